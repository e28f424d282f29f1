#include "model/vision_config.h"

#include <cmath>

#include "core/error.h"
#include "core/limits.h"

namespace lfm {

using nlohmann::json;

namespace {

int64_t get_dim(const json& j, const char* key, int64_t def, int64_t lo, int64_t hi) {
  if (!j.contains(key) || j[key].is_null()) {
    LFM_CHECK(def >= lo, "vision config: '", key, "' is required");
    return def;
  }
  LFM_CHECK(j[key].is_number_integer(), "vision config: '", key, "' must be an integer, got ", j[key].dump());
  const int64_t v = j[key].get<int64_t>();
  LFM_CHECK(v >= lo && v <= hi, "vision config: '", key, "' = ", v, " is outside [", lo, ", ", hi, "]");
  return v;
}

bool gelu_is_tanh(const json& j, const char* key, const char* def) {
  const std::string act = j.value(key, std::string(def));
  LFM_CHECK(act == "gelu" || act == "gelu_pytorch_tanh" || act == "gelu_new" || act == "gelu_fast",
            "vision config: unsupported ", key, " '", act, "' (gelu or gelu_pytorch_tanh)");
  return act != "gelu";
}

}  // namespace

int64_t VisionConfig::position_grid() const { return static_cast<int64_t>(std::lround(std::sqrt(double(num_patches)))); }

bool is_vision_language_config(const json& j) {
  return j.is_object() && j.value("model_type", std::string()) == "lfm2_vl";
}

json text_config_of(const json& j) {
  LFM_CHECK(j.contains("text_config") && j["text_config"].is_object(),
            "config: an lfm2_vl config needs a 'text_config' object");
  json t = j["text_config"];
  if (!t.contains("model_type")) t["model_type"] = "lfm2";
  if (!t.contains("tie_embedding") && !t.contains("tie_word_embeddings") && j.contains("tie_word_embeddings"))
    t["tie_word_embeddings"] = j["tie_word_embeddings"];
  t.erase("architectures");  // the top level names Lfm2VlForConditionalGeneration
  return t;
}

VisionConfig parse_vision_config(const json& j) {
  LFM_CHECK(is_vision_language_config(j), "vision config: model_type is not 'lfm2_vl'");
  LFM_CHECK(j.contains("vision_config") && j["vision_config"].is_object(),
            "vision config: an lfm2_vl config needs a 'vision_config' object");
  const json& v = j["vision_config"];
  const std::string type = v.value("model_type", std::string("siglip2_vision_model"));
  LFM_CHECK(type == "siglip2_vision_model", "vision config: unsupported vision model_type '", type,
            "' (lfm supports siglip2_vision_model)");
  LFM_CHECK(!v.value("vision_use_head", false), "vision config: vision_use_head = true is not used by LFM2-VL");
  VisionConfig c;
  c.hidden_size = get_dim(v, "hidden_size", 768, 1, limits::kMaxHiddenSize);
  c.intermediate_size = get_dim(v, "intermediate_size", 3072, 1, limits::kMaxFfnDim);
  c.n_layers = get_dim(v, "num_hidden_layers", 12, 1, limits::kMaxLayers);
  c.n_heads = get_dim(v, "num_attention_heads", 12, 1, limits::kMaxHeads);
  c.num_channels = get_dim(v, "num_channels", 3, 3, 3);
  c.patch_size = get_dim(v, "patch_size", 16, 1, 256);
  c.num_patches = get_dim(v, "num_patches", 256, 1, 1 << 20);
  c.layer_norm_eps = v.value("layer_norm_eps", 1e-6);
  LFM_CHECK(c.layer_norm_eps > 0 && c.layer_norm_eps < 1, "vision config: layer_norm_eps ", c.layer_norm_eps,
            " is outside (0, 1)");
  c.gelu_tanh = gelu_is_tanh(v, "hidden_act", "gelu_pytorch_tanh");
  LFM_CHECK(c.hidden_size % c.n_heads == 0, "vision config: hidden_size ", c.hidden_size,
            " is not divisible by num_attention_heads ", c.n_heads);
  LFM_CHECK(c.head_dim() <= 256, "vision config: head dim ", c.head_dim(), " is above 256");
  LFM_CHECK(c.position_grid() * c.position_grid() == c.num_patches, "vision config: num_patches ", c.num_patches,
            " is not a square");

  c.downsample_factor = get_dim(j, "downsample_factor", 2, 1, 8);
  c.projector_hidden_size = get_dim(j, "projector_hidden_size", 2560, 1, limits::kMaxFfnDim);
  c.projector_bias = j.value("projector_bias", true);
  c.projector_layernorm = j.value("projector_use_layernorm", true);
  c.projector_gelu_tanh = gelu_is_tanh(j, "projector_hidden_act", "gelu");
  c.text_hidden_size = get_dim(j["text_config"], "hidden_size", 0, 1, limits::kMaxHiddenSize);
  c.image_token_id = static_cast<int32_t>(get_dim(j, "image_token_id", 396, 0, limits::kMaxVocabSize - 1));
  return c;
}

std::vector<VisionTensor> vision_tensors(const VisionConfig& c) {
  const int64_t D = c.hidden_size, I = c.intermediate_size, f2 = c.downsample_factor * c.downsample_factor;
  std::vector<VisionTensor> t = {
      {"vision.embeddings.patch_embedding.weight", {D, c.num_channels * c.patch_size * c.patch_size}, true},
      {"vision.embeddings.patch_embedding.bias", {D}, false},
      {"vision.embeddings.position_embedding.weight", {c.num_patches, D}, false},
  };
  for (int64_t i = 0; i < c.n_layers; ++i) {
    const std::string p = "vision.encoder.layers." + std::to_string(i) + ".";
    for (const char* n : {"layer_norm1", "layer_norm2"}) {
      t.push_back({p + n + ".weight", {D}, false});
      t.push_back({p + n + ".bias", {D}, false});
    }
    for (const char* n : {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.out_proj"}) {
      t.push_back({p + n + ".weight", {D, D}, true});
      t.push_back({p + n + ".bias", {D}, false});
    }
    t.push_back({p + "mlp.fc1.weight", {I, D}, true});
    t.push_back({p + "mlp.fc1.bias", {I}, false});
    t.push_back({p + "mlp.fc2.weight", {D, I}, true});
    t.push_back({p + "mlp.fc2.bias", {D}, false});
  }
  t.push_back({"vision.post_layernorm.weight", {D}, false});
  t.push_back({"vision.post_layernorm.bias", {D}, false});
  if (c.projector_layernorm) {
    t.push_back({"projector.layer_norm.weight", {f2 * D}, false});
    t.push_back({"projector.layer_norm.bias", {f2 * D}, false});
  }
  t.push_back({"projector.linear_1.weight", {c.projector_hidden_size, f2 * D}, true});
  if (c.projector_bias) t.push_back({"projector.linear_1.bias", {c.projector_hidden_size}, false});
  t.push_back({"projector.linear_2.weight", {c.text_hidden_size, c.projector_hidden_size}, true});
  if (c.projector_bias) t.push_back({"projector.linear_2.bias", {c.text_hidden_size}, false});
  return t;
}

std::vector<std::pair<std::string, std::string>> vl_text_prefixes() {
  return {{"model.language_model.", "model."}, {"language_model.model.", "model."}, {"lm_head.", "lm_head."},
          {"language_model.lm_head.", "lm_head."}};
}

std::vector<std::pair<std::string, std::string>> vl_vision_prefixes() {
  return {{"model.vision_tower.vision_model.", "vision."}, {"vision_tower.vision_model.", "vision."},
          {"model.multi_modal_projector.", "projector."}, {"multi_modal_projector.", "projector."}};
}

}  // namespace lfm
