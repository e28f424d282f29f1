// Randomly initialised LFM2 checkpoints of the real family shapes, for benchmarking and format
// tests only: random weights say nothing about quality. Deterministic from the seed: every value
// is a pure function of (seed, tensor name, row, column), so output bytes do not depend on the
// thread count or chunking. Matrices ~ U(-a, a) with std 0.02 (a = 0.02·√3), the conv kernel
// likewise, norms 1, MoE expert bias 0.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/dtype.h"
#include "convert/gguf_export.h"
#include "model/config.h"

namespace lfm::gguf {

// Known shapes: "tiny" (d 256, 4 layers cAcA, vocab 512 — small, but rows of 256 so K-quants
// apply), "tiny-moe" (the same as LFM2-MoE: 4 experts, top-2, 1 dense layer), "350M", "700M",
// "1.2B", "2.6B", "8B-A1B" (LFM2_SPEC §6 and tests/data/assets/lfm2/*/config.json).
std::vector<std::string> random_shape_names();
// The Hugging Face config.json of a shape (throws on an unknown name).
nlohmann::json random_shape_config(const std::string& shape);

class RandomRowProducer : public RowProducer {
 public:
  // `branch_scale` multiplies the output projection of every residual branch (attention and conv
  // out_proj, the FFN's and experts' w2).
  explicit RandomRowProducer(uint64_t seed, float branch_scale = 1.0f) : seed_(seed), branch_scale_(branch_scale) {}
  void rows(const ExpectedTensor& t, int64_t first_row, int64_t n_rows, float* out) override;

 private:
  uint64_t seed_;
  float branch_scale_;
};

struct RandomCheckpointOptions {
  std::string shape = "tiny";
  uint64_t seed = 0;
  DType hf_dtype = DType::BF16;  // Hugging Face output: F32, F16 or BF16
  FileType gguf_type = FileType::BF16;
  bool progress = false;
  int threads = 0;
  // Below 1, the residual stream keeps more of the current token's embedding, so the (tied) head
  // predicts confidently and mostly from the last token: greedy decoding falls into repetition
  // and a quantized copy agrees with the original, as speculative-decoding benchmarks need (plain
  // random weights never repeat and have near-flat logits).
  float branch_scale = 1.0f;
  // LFM2-VL (Hugging Face folders only): a vision tower of this shape ("siglip2-base": LFM2-VL-450M's,
  // "siglip2-so400m": LFM2-VL-1.6B's) and the projector, the text shape as the language model.
  std::string vision;
  // A retriever (Hugging Face folders only) laid out as the released ones: "embedding"
  // (LFM2.5-Embedding: bidirectional, CLS pooling, sentence-transformers files), "colbert"
  // (LFM2.5-ColBERT: bidirectional, PyLate files, a random Dense d → 128) or "colbert-causal"
  // (LFM2-ColBERT: the causal base model with the same head). No LM head; tensor names without
  // the "model." prefix.
  std::string retriever;
  // LFM2-Audio (convert/random_audio.h): a speech encoder of this shape ("lfm2-audio": the 1.5B
  // models', "lfm2.5-audio": the same with LFM2.5-Audio's speech output, "tiny": both, tiny) in
  // front of the text shape. A folder in transformers' layout (speech output: the depthformer and
  // audio_detokenizer/), or for a GGUF output llama.cpp's pair: the backbone at the path and the
  // lfm2a mmproj at mmproj_path (default: mmproj-<file name> beside it).
  std::string audio;
  std::string mmproj_path;
  // GGUF output only: when set, the layer stack instead of the shape's, one letter a layer ('c'
  // conv, 'A' attention): a model of the shape's widths but fewer layers, e.g. "cA" for the CUDA
  // emulator's cost model (tests/cuda_emu/cost_model.h), which cannot run all of a 1.2B step.
  std::string layer_types;
};
std::vector<std::string> random_retriever_names();
std::vector<std::string> random_vision_names();

// A Hugging Face folder: config.json + model.safetensors (streamed tensor by tensor; peak memory
// is the largest tensor).
void write_random_hf(const std::string& dir, const RandomCheckpointOptions& opt);
// A GGUF file (streamed in row chunks).
void write_random_gguf(const std::string& path, const RandomCheckpointOptions& opt);
// Only config.json (for `lfm info` on a real-size shape without writing the weights).
void write_random_config(const std::string& dir, const std::string& shape);

}  // namespace lfm::gguf
