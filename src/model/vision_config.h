// LFM2-VL: the vision tower's and projector's configuration (config.json of an
// Lfm2VlForConditionalGeneration checkpoint: `vision_config` is a SigLIP2 NaFlex vision model,
// `text_config` an LFM2 model), and the tensor names of both checkpoint layouts.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace lfm {

struct VisionConfig {
  // SigLIP2 vision transformer
  int64_t hidden_size = 0;        // D
  int64_t intermediate_size = 0;  // MLP width
  int64_t n_layers = 0;
  int64_t n_heads = 0;
  int64_t num_channels = 3;
  int64_t patch_size = 16;         // p: a patch is p·p·channels values
  int64_t num_patches = 256;       // position-embedding table rows: a square grid of side √num_patches
  double layer_norm_eps = 1e-6;
  bool gelu_tanh = true;           // hidden_act "gelu_pytorch_tanh" (else exact "gelu")
  // Projector: pixel unshuffle by downsample_factor, LayerNorm, Linear, GELU, Linear.
  int64_t downsample_factor = 2;
  int64_t projector_hidden_size = 0;
  bool projector_bias = true;
  bool projector_layernorm = true;
  bool projector_gelu_tanh = false;  // projector_hidden_act "gelu" (exact) by default
  int64_t text_hidden_size = 0;      // the language model's d: what an image token embeds to
  int32_t image_token_id = 396;
  // The processor's normalisation as an mmproj GGUF records it (a checkpoint folder's processor
  // config says it there).
  float image_mean[3] = {0.5f, 0.5f, 0.5f}, image_std[3] = {0.5f, 0.5f, 0.5f};

  int64_t head_dim() const { return hidden_size / n_heads; }
  int64_t position_grid() const;  // √num_patches
};

// Whether a config.json is a vision-language checkpoint (model_type "lfm2_vl").
bool is_vision_language_config(const nlohmann::json& j);
// The language model's config as parse_model_config reads it: `text_config`, with the top
// level's tying flag where the text config has none (transformers: tie_embedding overrides).
nlohmann::json text_config_of(const nlohmann::json& j);
// Throws lfm::Error naming the key and value on anything missing or out of range.
VisionConfig parse_vision_config(const nlohmann::json& j);

// Every tensor of the vision tower and projector a config implies, under lfm's names ("vision.…",
// "projector.…") with PyTorch shapes (matrix: consumed by matmul).
struct VisionTensor {
  std::string name;
  std::vector<int64_t> shape;
  bool matrix;
};
std::vector<VisionTensor> vision_tensors(const VisionConfig& c);

// Checkpoint name prefixes → the names lfm binds: the language model's tensors as an LFM2
// checkpoint names them ("model.layers.0…", "lm_head.weight"), the vision tower's under
// "vision.", the projector's under "projector.". transformers 5 writes the first set, older
// releases the second.
std::vector<std::pair<std::string, std::string>> vl_text_prefixes();
std::vector<std::pair<std::string, std::string>> vl_vision_prefixes();

}  // namespace lfm
