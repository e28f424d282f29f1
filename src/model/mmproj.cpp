#include "model/mmproj.h"

#include <cctype>
#include <string_view>

#include "core/error.h"
#include "core/limits.h"
#include "kernels/dequant.h"

namespace lfm {

namespace {

// Per-layer pieces: lfm's suffix after "vision.encoder.layers.N." ↔ llama.cpp's after "v.blk.N.".
const std::pair<const char*, const char*> kLayerNames[] = {
    {"layer_norm1", "ln1"},        {"layer_norm2", "ln2"},          {"self_attn.q_proj", "attn_q"},
    {"self_attn.k_proj", "attn_k"}, {"self_attn.v_proj", "attn_v"}, {"self_attn.out_proj", "attn_out"},
    {"mlp.fc1", "ffn_up"},          {"mlp.fc2", "ffn_down"},
};
const std::pair<const char*, const char*> kGlobalNames[] = {
    {"vision.embeddings.patch_embedding", "v.patch_embd"},
    {"vision.embeddings.position_embedding", "v.position_embd"},
    {"vision.post_layernorm", "v.post_ln"},
    {"projector.layer_norm", "mm.input_norm"},
    {"projector.linear_1", "mm.1"},
    {"projector.linear_2", "mm.2"},
};

// Splits "X.weight" / "X.bias".
bool split_kind(const std::string& name, std::string& stem, std::string& kind) {
  const size_t dot = name.rfind('.');
  if (dot == std::string::npos) return false;
  stem = name.substr(0, dot);
  kind = name.substr(dot + 1);
  return kind == "weight" || kind == "bias";
}

class MmprojSource : public MapTensorSource {
 public:
  MmprojSource(std::shared_ptr<const gguf::GgufFile> f, const VisionConfig& cfg) : file_(std::move(f)) {
    origin_ = file_->path();
    for (const gguf::TensorInfo& t : file_->tensors()) {
      const std::optional<std::string> ours = lfm_name_from_mmproj(t.name);
      LFM_CHECK(ours, "mmproj: '", origin_, "': tensor '", t.name, "' is not part of the LFM2-VL mmproj layout");
      std::vector<int64_t> shape(t.ne.rbegin(), t.ne.rend());
      if (*ours == "vision.embeddings.patch_embedding.weight") {
        // [D, C, p, p] (a conv kernel) → [D, p·p·C] with (row, column, channel) order.
        const int64_t D = cfg.hidden_size, C = cfg.num_channels, p = cfg.patch_size;
        LFM_CHECK(shape == std::vector<int64_t>({D, C, p, p}), "mmproj: '", origin_, "': v.patch_embd.weight has shape ",
                  shape_str(shape), ", expected ", shape_str({D, C, p, p}));
        LFM_CHECK(dtype_decodable(t.dtype), "mmproj: '", origin_, "': v.patch_embd.weight has type ",
                  dtype_name(t.dtype), " which cannot be decoded");
        std::vector<float> conv(static_cast<size_t>(t.numel()));
        dequantize_row(t.dtype, t.data, conv.data(), t.numel());
        patch_.resize(conv.size());
        for (int64_t d = 0; d < D; ++d)
          for (int64_t c = 0; c < C; ++c)
            for (int64_t y = 0; y < p; ++y)
              for (int64_t x = 0; x < p; ++x)
                patch_[static_cast<size_t>(((d * p + y) * p + x) * C + c)] =
                    conv[static_cast<size_t>(((d * C + c) * p + y) * p + x)];
        tensors_.emplace(*ours, TensorView{DType::F32, {D, p * p * C}, patch_.data(), patch_.size() * sizeof(float)});
        continue;
      }
      LFM_CHECK(!tensors_.count(*ours), "mmproj: '", origin_, "': two tensors map to '", *ours, "'");
      tensors_.emplace(*ours, TensorView{t.dtype, std::move(shape), t.data, t.nbytes});
    }
  }
  void drop_pages(const TensorView& t) const override {
    if (t.data != patch_.data()) file_->drop_pages(t.data, t.nbytes);
  }

 private:
  std::shared_ptr<const gguf::GgufFile> file_;
  std::vector<float> patch_;
};

// "PREFIX<digits>.REST" → the digits as written and REST (non-empty). A scan, not std::regex:
// <regex> costs a second of compile time and a page of GCC 12 -Wmaybe-uninitialized noise.
bool split_layer(const std::string& stem, std::string_view prefix, std::string& index, std::string& rest) {
  if (!stem.starts_with(prefix)) return false;
  size_t end = prefix.size();
  while (end < stem.size() && std::isdigit(static_cast<unsigned char>(stem[end]))) ++end;
  if (end == prefix.size() || end + 1 >= stem.size() || stem[end] != '.') return false;
  index = stem.substr(prefix.size(), end - prefix.size());
  rest = stem.substr(end + 1);
  return true;
}

}  // namespace

std::optional<std::string> mmproj_name_from_lfm(const std::string& name) {
  std::string stem, kind;
  if (!split_kind(name, stem, kind)) return std::nullopt;
  for (const auto& [ours, theirs] : kGlobalNames)
    if (stem == ours) return std::string(theirs) + "." + kind;
  std::string index, rest;
  if (!split_layer(stem, "vision.encoder.layers.", index, rest)) return std::nullopt;
  for (const auto& [ours, theirs] : kLayerNames)
    if (rest == ours) return "v.blk." + index + "." + theirs + "." + kind;
  return std::nullopt;
}

std::optional<std::string> lfm_name_from_mmproj(const std::string& name) {
  std::string stem, kind;
  if (!split_kind(name, stem, kind)) return std::nullopt;
  for (const auto& [ours, theirs] : kGlobalNames)
    if (stem == theirs) return std::string(ours) + "." + kind;
  std::string index, rest;
  if (!split_layer(stem, "v.blk.", index, rest)) return std::nullopt;
  for (const auto& [ours, theirs] : kLayerNames)
    if (rest == theirs) return "vision.encoder.layers." + index + "." + ours + "." + kind;
  return std::nullopt;
}

VisionConfig vision_config_from_mmproj(const gguf::GgufFile& f, int64_t text_hidden_size, int32_t image_token_id) {
  auto need = [&](const std::string& key) -> const gguf::Value& {
    const gguf::Value* v = f.find(key);
    LFM_CHECK(v, "mmproj: '", f.path(), "' lacks required metadata '", key, "'");
    return *v;
  };
  auto dim = [&](const std::string& key, int64_t hi) {
    const int64_t v = need(key).as_int(key);
    LFM_CHECK(v >= 1 && v <= hi, "mmproj: '", f.path(), "': ", key, " = ", v, " is outside [1, ", hi, "]");
    return v;
  };
  const gguf::Value* arch = f.find("general.architecture");
  LFM_CHECK(arch && arch->type == gguf::ValueType::STRING && arch->str == "clip", "mmproj: '", f.path(),
            "' is not a clip GGUF (general.architecture ", arch ? arch->to_string() : std::string("missing"), ")");
  const std::string proj = need("clip.projector_type").as_string("clip.projector_type");
  LFM_CHECK(proj == "lfm2", "mmproj: '", f.path(), "': projector type '", proj, "' is not LFM2-VL's ('lfm2')");
  VisionConfig c;
  c.hidden_size = dim("clip.vision.embedding_length", limits::kMaxHiddenSize);
  c.intermediate_size = dim("clip.vision.feed_forward_length", limits::kMaxFfnDim);
  c.n_layers = dim("clip.vision.block_count", limits::kMaxLayers);
  c.n_heads = dim("clip.vision.attention.head_count", limits::kMaxHeads);
  c.patch_size = dim("clip.vision.patch_size", 256);
  c.layer_norm_eps = need("clip.vision.attention.layer_norm_epsilon").as_double("clip.vision.attention.layer_norm_epsilon");
  LFM_CHECK(c.layer_norm_eps > 0 && c.layer_norm_eps < 1, "mmproj: layer_norm_epsilon ", c.layer_norm_eps,
            " is outside (0, 1)");
  c.downsample_factor = f.find("clip.vision.projector.scale_factor")
                            ? dim("clip.vision.projector.scale_factor", 8)
                            : 2;
  LFM_CHECK(c.hidden_size % c.n_heads == 0 && c.hidden_size / c.n_heads <= 256, "mmproj: embedding_length ",
            c.hidden_size, " and head_count ", c.n_heads, " give no head dim up to 256");
  // What the tensors say: the position table's rows, the projector's widths and its LayerNorm.
  const gguf::TensorInfo* pos = f.find_tensor("v.position_embd.weight");
  LFM_CHECK(pos && pos->ne.size() == 2, "mmproj: '", f.path(), "' lacks a 2-D v.position_embd.weight");
  c.num_patches = pos->ne[1];
  LFM_CHECK(c.position_grid() * c.position_grid() == c.num_patches, "mmproj: ", c.num_patches,
            " position embeddings are not a square grid");
  const gguf::TensorInfo* mm1 = f.find_tensor("mm.1.weight");
  LFM_CHECK(mm1 && mm1->ne.size() == 2, "mmproj: '", f.path(), "' lacks a 2-D mm.1.weight");
  c.projector_hidden_size = mm1->ne[1];
  c.projector_layernorm = f.find_tensor("mm.input_norm.weight") != nullptr;
  c.projector_bias = f.find_tensor("mm.1.bias") != nullptr;
  c.gelu_tanh = true;             // SigLIP2's gelu_pytorch_tanh
  c.projector_gelu_tanh = false;  // LFM2-VL's projector: exact GELU
  c.text_hidden_size = text_hidden_size;
  c.image_token_id = image_token_id;
  if (const gguf::Value* mean = f.find("clip.vision.image_mean"); mean && mean->as_array("image_mean").size() == 3)
    for (int i = 0; i < 3; ++i) c.image_mean[i] = static_cast<float>(mean->arr[i].as_double("image_mean"));
  if (const gguf::Value* std = f.find("clip.vision.image_std"); std && std->as_array("image_std").size() == 3)
    for (int i = 0; i < 3; ++i) c.image_std[i] = static_cast<float>(std->arr[i].as_double("image_std"));
  return c;
}

std::shared_ptr<const TensorSource> mmproj_tensor_source(std::shared_ptr<const gguf::GgufFile> f,
                                                         const VisionConfig& cfg) {
  return std::make_shared<MmprojSource>(std::move(f), cfg);
}

}  // namespace lfm
