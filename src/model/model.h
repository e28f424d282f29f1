// A loaded LFM2 model: normalised config, the tensor source that owns the bytes, and the bound
// weight table. Immutable once loaded; share it between any number of sequences and steps.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "formats/tensor_source.h"
#include "kernels/weight_set.h"
#include "model/config.h"
#include "model/vision_config.h"
#include "model/weights.h"

namespace lfm {

class Backend;
class RetrievalHead;
class VisionModel;
class AudioModel;
class SpeechOutModel;
class WaveformDecoder;

struct LoadOptions {
  // Let the backend prepare the weights it computes with (Backend::prepare_weights: the CPU
  // backends copy the matrices their kernels read faster in another layout, a GPU backend uploads
  // everything). Off for tools that only inspect or convert the weights.
  bool pack = true;
  // The backend the model will run on; null: the CPU backends' preparation (every CPU backend,
  // the reference included, runs such a model).
  Backend* backend = nullptr;
  // The backend that will run the model, where the caller knows it (the CLI and server do): if it
  // reads only the prepared copies (Backend::reads_only_prepared_copies), the model copies the
  // few stored bytes it still reads (the embedding table, matrices left unpacked) into memory and
  // lets go of its files, so a file truncated or rewritten in place later cannot touch it.
  const Backend* run_on = nullptr;
  // BF16 matrices multiply activations rounded to bf16 (TensorView::act_type), as llama.cpp and
  // transformers running in bf16 do, instead of exact float32 ones: one bf16 term for AVX-512
  // BF16 / AMX instead of three. Other weight types are unaffected.
  bool bf16_activations = false;
  // LFM2-VL / LFM2-Audio from llama.cpp's GGUF pair: the mmproj GGUF with the vision tower
  // (model/mmproj.h) or, for clip.projector_type "lfm2a", the speech encoder (model/audio_mmproj.h),
  // loaded beside a .gguf language model (a checkpoint folder carries its own).
  std::string mmproj{};
  // LFM2.5-Audio's speech output from llama.cpp's vocoder GGUF (model/vocoder_gguf.h), beside a
  // .gguf language model (a checkpoint folder carries its own); or, with an LFM2-Audio checkpoint
  // folder, Kyutai's Mimi decoder to use (model/mimi.h: a transformers folder or a .safetensors file).
  std::string vocoder{};
};

class Model {
 public:
  Model(ModelConfig cfg, std::unique_ptr<TensorSource> source, const LoadOptions& options = {});

  const ModelConfig& config() const { return cfg_; }
  const ModelWeights& weights() const { return weights_; }
  const TensorSource& source() const { return *source_; }

  // Index of layer i among the conv layers (or among the attention layers).
  int64_t state_slot(int64_t layer) const { return slot_[layer]; }
  // RoPE inverse frequencies [head_dim / 2], computed in float32 like transformers.
  const WeightVector& rope_inv_freq() const { return inv_freq_; }

  int64_t parameter_count() const;
  size_t weight_bytes() const;
  // Bytes of the routed experts' matrices as the kernels read them (packed copies where there
  // are; 0 for dense models): a decode step reads only the experts its tokens select.
  size_t expert_bytes() const;
  // Weight bytes a forward step streams: the sizes of read_ranges(), packed copies in place of
  // their originals (a Q3_K copy is ~1.9× its stored bytes; the other formats' within a few %).
  size_t read_bytes() const;
  // Bytes of packed matrix copies the CPU kernels read instead of the stored ones (0 if none).
  size_t packed_bytes() const;
  // The backend whose prepare_weights made the copies the views point into (null: the CPU
  // preparation, or none). Forward checks that it runs the model on that backend.
  const Backend* prepared_for() const { return prepared_for_; }
  // Bytes of the backend's copies (host or device), 0 if none.
  size_t prepared_bytes() const;
  // Every weight byte once, where a forward reads it: a packed matrix from its copy, the rest
  // where the source maps it (a packed original's pages were handed back: reading them there
  // would fault them in again and hold the model twice).
  std::vector<std::pair<const void*, size_t>> read_ranges() const;
  // Whether some matrix multiplies bf16-rounded activations (LoadOptions::bf16_activations on a
  // model with BF16 matrices).
  bool bf16_activations() const { return bf16_activations_; }
  // Whether the model let go of its files after load (LoadOptions::run_on), and the stored bytes
  // it copied into memory to do so (the embedding table, matrices without a prepared copy).
  bool detached() const { return detached_; }
  // LFM2-VL: the image encoder loaded with the language model (null for a text-only model).
  const VisionModel* vision() const { return vision_.get(); }
  void set_vision(std::shared_ptr<const VisionModel> vision) { vision_ = std::move(vision); }
  // LFM2-Audio's speech encoder and adapter (model/audio_model.h; null for a model without one).
  const AudioModel* audio() const { return audio_.get(); }
  void set_audio(std::shared_ptr<const AudioModel> audio) { audio_ = std::move(audio); }
  // LFM2-Audio's speech output head (model/speech_out.h; null for a model that cannot speak).
  const SpeechOutModel* speech_out() const { return speech_out_.get(); }
  void set_speech_out(std::shared_ptr<const SpeechOutModel> s) { speech_out_ = std::move(s); }
  // Speech output's codes → waveform decoder (model/waveform_decoder.h: LFM2.5-Audio's
  // detokenizer or Kyutai's Mimi decoder; null: none loaded).
  const WaveformDecoder* detokenizer() const { return detokenizer_.get(); }
  void set_detokenizer(std::shared_ptr<const WaveformDecoder> d) { detokenizer_ = std::move(d); }
  // A retriever's pooling / Dense head (model/retrieval.h; null for a generative model or a base
  // model without sentence-transformers files).
  const RetrievalHead* retrieval() const { return retrieval_.get(); }
  void set_retrieval(std::shared_ptr<const RetrievalHead> head) { retrieval_ = std::move(head); }
  size_t resident_bytes() const { return resident_bytes_; }

 private:
  void prepare_weights(Backend* backend);
  void detach_from_files();
  void set_bf16_activations();

  ModelConfig cfg_;
  std::unique_ptr<TensorSource> source_;
  ModelWeights weights_;
  std::vector<int64_t> slot_;
  WeightVector inv_freq_;
  std::unique_ptr<PreparedWeights> prepared_;  // the backend's copies the views point into
  std::shared_ptr<const VisionModel> vision_;
  std::shared_ptr<const AudioModel> audio_;
  std::shared_ptr<const SpeechOutModel> speech_out_;
  std::shared_ptr<const WaveformDecoder> detokenizer_;
  std::shared_ptr<const RetrievalHead> retrieval_;
  const Backend* prepared_for_ = nullptr;
  bool bf16_activations_ = false;
  bool detached_ = false;
  size_t resident_bytes_ = 0;
};

// Opens a model: a Hugging Face folder (config.json + safetensors) or a .gguf file. An LFM2-VL
// folder (model_type "lfm2_vl") gives its language model with the image encoder (Model::vision),
// an LFM2-Audio folder (model_type "lfm2_audio") its backbone with the speech encoder
// (Model::audio), when options.pack is on.
std::unique_ptr<Model> load_model(const std::string& path, const LoadOptions& options = {});

// An LFM2-VL checkpoint folder's vision side, unprepared (for converters): its config and its
// tensors named "vision.…" / "projector.…". nullopt for a text-only folder.
struct VisionCheckpoint {
  VisionConfig config;
  std::shared_ptr<const TensorSource> source;
};
std::optional<VisionCheckpoint> open_vision_checkpoint(const std::string& folder);

// RoPE inverse frequencies as transformers computes them: 1 / theta^(2j / hd) in float32.
std::vector<float> rope_inverse_frequencies(double theta, int64_t head_dim);

}  // namespace lfm
