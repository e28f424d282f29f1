// Kyutai's Mimi decoder (transformers' MimiModel.decode, the first 8 codebooks): the waveform
// decoder of LFM2-Audio-1.5B, whose checkpoint folder ships Mimi in moshi's layout
// (tokenizer-e351c8d8-checkpoint125.safetensors) instead of an audio_detokenizer/ folder.
//
//   codes [frames, 8] → codebook rows (embed_sum / max(cluster_usage, 1e-5), [2048, 256] each):
//   codebook 0 through the semantic output projection, the sum of codebooks 1..7 through the
//   acoustic one (1×1 convs 256 → 512), added → [frames, 512] → upsample (depthwise transposed
//   conv, kernel 4, stride 2) → [2·frames, 512] → the decoder transformer (8 layers: LayerNorm,
//   RoPE attention, GELU MLP, layer scales; causal, keys within the sliding window) → SEANet
//   decoder (conv 512 → 1024 k7; per ratio 8, 6, 5, 4: ELU, transposed conv (kernel 2·ratio) to
//   half the channels, a residual block (ELU, conv k3 → half, ELU, conv k1 → back, + input);
//   ELU, conv 64 → 1 k3) → 1920 samples per frame at 24 kHz.
//
// Every layer is causal (convs padded on the left only, transposed convs trimmed on the right,
// attention over past keys), so streaming is exact and immediate: after n frames the first
// 1920·n samples are final. Activations are float32 on the host; convs are im2col + matmul and
// transposed convs matmul + overlap-add on the backend's kernels (a device backend's decoder runs
// on a CPU backend of its own).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "model/model.h"
#include "model/waveform_decoder.h"

namespace lfm {

// MimiConfig's decoder fields (transformers' names); the defaults are kyutai/mimi's.
struct MimiConfig {
  int64_t sampling_rate = 24000, hidden_size = 512, num_filters = 64, num_residual_layers = 1;
  std::vector<int64_t> upsampling_ratios{8, 6, 5, 4};
  int64_t kernel_size = 7, last_kernel_size = 3, residual_kernel_size = 3, dilation_growth_rate = 2, compress = 2;
  int64_t codebook_size = 2048, codebook_dim = 256, num_quantizers = 32, num_semantic_quantizers = 1;
  int64_t vector_quantization_hidden_dimension = 256, upsample_groups = 512;
  int64_t num_hidden_layers = 8, intermediate_size = 2048, num_attention_heads = 8, num_key_value_heads = 8, head_dim = 64;
  int64_t max_position_embeddings = 8000, sliding_window = 250;
  double norm_eps = 1e-5, rope_theta = 10000.0, frame_rate = 12.5;

  int64_t hop() const;  // samples per transformer row: the product of the ratios (960)
  int64_t upsample_stride() const;  // transformer rows per frame (2)
};

// A config.json with model_type "mimi" → MimiConfig; lfm::Error naming the file and the field
// on anything the decoder does not run (non-causal convs, another pad mode, a conv shortcut, ...).
MimiConfig parse_mimi_config(const std::string& path);

class MimiDecoder : public WaveformDecoder {
 public:
  static constexpr int64_t kCodebooks = 8;

  // A Mimi from (a) transformers' layout: a folder with config.json (model_type mimi) and
  // model.safetensors, or such a model.safetensors file (config.json beside it when there is one);
  // (b) moshi's layout: a .safetensors file (tensor names quantizer.rvq_first…, decoder.model…),
  // with kyutai/mimi's config. The layout is told by the tensor names. Shapes are checked against
  // the config; the encoder's tensors are ignored.
  static std::unique_ptr<MimiDecoder> load(const std::string& path, const LoadOptions& options = {});
  // Whether the file (or a folder's model.safetensors) holds a Mimi in either layout, by its
  // tensor names; false for anything that is not a readable safetensors file.
  static bool is_mimi_file(const std::string& path);
  // The moshi-layout Mimi among a checkpoint folder's .safetensors files (LFM2-Audio-1.5B's
  // tokenizer-….safetensors), or "" when there is none.
  static std::string find_in_folder(const std::string& folder);
  ~MimiDecoder() override;

  const MimiConfig& config() const;
  int sample_rate() const override;
  int64_t samples_per_frame() const override;  // 1920
  int64_t max_frames() const override;         // max_position_embeddings / 2
  // Keys a transformer row attends to: the last sliding_window positions, itself included.
  int64_t attention_window() const;

  // decode()'s stages, for tests: codebook 0's rows [frames, 256] and codebooks 1..7's sum (the
  // projections' inputs), the quantizer's output [frames, 512], the upsampled rows [2·frames, 512],
  // the decoder transformer's output [2·frames, 512], and the SEANet's stages: its first conv's
  // output, then each upsampling stage's after its residual blocks ([T, channels] each).
  struct Trace {
    std::vector<float> semantic, acoustic, quantized, upsampled, transformed;
    std::vector<std::vector<float>> seanet;
  };
  std::vector<float> decode(Backend& be, std::span<const int32_t> codes, Trace* trace) const;
  std::vector<float> decode(Backend& be, std::span<const int32_t> codes) const override {
    return decode(be, codes, nullptr);
  }
  std::unique_ptr<WaveformStreams> streams(Backend& be, int64_t max_streams, int64_t max_frames) const override;

  struct Impl;

 private:
  explicit MimiDecoder(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace lfm
