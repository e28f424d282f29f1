// LFM2-Audio's speech output head: what turns the backbone's last hidden state into one audio
// frame of Mimi codes, and a frame back into the backbone's next input.
//   * depth_linear: h [D] (the backbone's final normed state) → [codebooks, dim], one input per codebook;
//   * the depth transformer (layers of RMSNorm → GQA attention with per-head q/k RMSNorm and RoPE at the
//     codebook's index → RMSNorm → SwiGLU) runs `codebooks` steps, one per codebook: step c reads
//     input c plus the embedding of code c−1 (nothing at c = 0), attends to steps 0..c, and its
//     output, RMSNorm'ed, gives codebook c's logits [audio_vocab] through that codebook's head;
//   * a frame goes back into the backbone as the sum of its codes' rows in audio_embedding
//     ([codebooks · audio_vocab, D], code c of the frame at row c · audio_vocab + code).
// transformers: models/lfm2_audio Lfm2AudioForConditionalGeneration._sample_audio_frame and
// Lfm2AudioModel._prepare_inputs_embeds (audio-output positions).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "formats/tensor_source.h"
#include "kernels/backend.h"
#include "kernels/device_memory.h"

namespace lfm {

struct SpeechOutConfig {
  int64_t codebooks = 8;
  int64_t audio_vocab = 2049;    // codes per codebook, the end-of-audio code included
  int32_t audio_eos = 2048;      // the end-of-audio code (codebook 0 decides; the frame is then all eos)
  int32_t audio_start_id = 128;  // <|audio_start|>: sequential generation switches to audio after it
  int32_t text_end_id = 130;     // <|text_end|>: interleaved generation's text is over
  int64_t interleaved_text = 6, interleaved_audio = 12;  // interleaved runs
  int64_t text_hidden = 0;       // D: the backbone's hidden size
  // The depth transformer
  int64_t layers = 6, dim = 1024, heads = 32, kv_heads = 8, ffn = 0;
  double norm_eps = 1e-5, rope_theta = 1e6;
  bool tie = true;  // each codebook's head is its code embedding
  int64_t head_dim() const { return dim / heads; }
};

// From an LFM2-Audio config.json (top level and its `depthformer` dict); `text_hidden` is the
// backbone's. Throws lfm::Error naming a bad key or value.
SpeechOutConfig parse_speech_out_config(const nlohmann::json& j, int64_t text_hidden);

// Tensor names SpeechOutModel binds (transformers' native "model.…" prefix or none):
// "audio_embedding.embedding.weight" [codebooks · audio_vocab, D] (its embedding_norm / to_logits are
// for training and are not read), "depth_linear.{weight [codebooks · dim, D], bias}",
// "depthformer.layers.<i>.operator_norm.weight", ".operator.qkv_proj.weight" [dim + 2·kv, dim],
// ".operator.out_proj.weight", ".operator.bounded_attention.{q,k}_layernorm.weight" [head_dim],
// ".ffn_norm.weight", ".feed_forward.w{1,3}.weight" [ffn, dim], ".feed_forward.w2.weight",
// "depth_embeddings.<c>.embedding.weight" [audio_vocab, dim], ".embedding_norm.weight",
// ".to_logits.weight" (absent or equal when tied).
bool is_speech_out_tensor(const std::string& name);

class SpeechOutModel {
 public:
  SpeechOutModel(SpeechOutConfig cfg, std::shared_ptr<const TensorSource> source, Backend* backend);
  ~SpeechOutModel();
  const SpeechOutConfig& config() const { return cfg_; }
  // The backbone's input row for a frame: Σ_c audio_embedding[c · audio_vocab + codes[c]] (host, [D]).
  void frame_embedding(std::span<const int32_t> codes, float* out) const;
  size_t weight_bytes() const;

 private:
  friend class DepthDecoder;
  struct Weights;
  SpeechOutConfig cfg_;
  std::shared_ptr<const TensorSource> source_;
  std::unique_ptr<Weights> w_;
};

// Turns backbone hidden states into frames, batched: the depth transformer's steps run once per
// codebook for all rows together, on the backend the model was prepared for. The per-row key/value
// cache of the depth steps lives here (reused between calls).
class DepthDecoder {
 public:
  DepthDecoder(const SpeechOutModel& model, Backend& be);
  ~DepthDecoder();
  // hidden [n, D] (host): the backbone's final normed state of n frames to make. For each codebook c
  // and row i, choose(i, c, logits [audio_vocab]) picks the code (host logits; the caller samples).
  // codes [n, codebooks] receives the choices. Throws lfm::Error on a choice outside the vocabulary.
  using Choose = std::function<int32_t(int64_t row, int64_t codebook, const float* logits)>;
  void run(const float* hidden, int64_t n, const Choose& choose, int32_t* codes);

 private:
  template <typename T>
  T* scratch(DeviceBuffer& buf, int64_t n) {
    ensure_capacity(be_, buf, static_cast<size_t>(n) * sizeof(T));
    return buf.as<T>();
  }
  const SpeechOutModel& m_;
  Backend& be_;
  DeviceBuffer in_buf_, x_buf_, a_buf_, q_buf_, k_buf_, v_buf_, qs_buf_, ks_buf_, vs_buf_, os_buf_, o_buf_, t_buf_;
  DeviceBuffer gate_buf_, up_buf_, logits_buf_, ids_buf_, pos_buf_, idx_buf_, hidden_buf_;
  std::vector<float> logits_host_;
};

}  // namespace lfm
