#include "model/audio_mmproj.h"

#include <cctype>
#include <map>
#include <string_view>

#include "core/error.h"
#include "core/limits.h"

namespace lfm {

namespace {

struct NamePair {
  const char* ours;    // binding name (stem)
  const char* theirs;  // mmproj name (stem)
};

// Whole-model stems; ".weight" / ".bias" follow.
const NamePair kGlobalNames[] = {
    {"conformer.subsampling.layers.0", "a.conv1d.0"},
    {"conformer.subsampling.layers.2", "a.conv1d.2"},
    {"conformer.subsampling.layers.3", "a.conv1d.3"},
    {"conformer.subsampling.layers.5", "a.conv1d.5"},
    {"conformer.subsampling.layers.6", "a.conv1d.6"},
    {"conformer.subsampling.linear", "a.pre_encode.out"},
    {"audio_adapter_norm", "mm.a.mlp.0"},
    {"audio_adapter_linear_1", "mm.a.mlp.1"},
    {"audio_adapter_linear_2", "mm.a.mlp.3"},
    {"audio_embedding.embedding", "a.position_embd"},
    {"audio_embedding.embedding_norm", "a.position_embd_norm"},
    {"audio_embedding.to_logits", "a.embd_to_logits"},
};
// Per block, after "conformer.layers.N." ↔ "a.blk.N."; ".weight" / ".bias" follow.
const NamePair kLayerNames[] = {
    {"feed_forward1.linear1", "ffn_up"},        {"feed_forward1.linear2", "ffn_down"},
    {"feed_forward2.linear1", "ffn_up_1"},      {"feed_forward2.linear2", "ffn_down_1"},
    {"norm_feed_forward1", "ffn_norm"},         {"norm_feed_forward2", "ffn_norm_1"},
    {"norm_self_att", "ln1"},                   {"norm_conv", "norm_conv"},
    {"norm_out", "ln2"},                        {"self_attn.q_proj", "attn_q"},
    {"self_attn.k_proj", "attn_k"},             {"self_attn.v_proj", "attn_v"},
    {"self_attn.o_proj", "attn_out"},           {"self_attn.relative_k_proj", "linear_pos"},
    {"conv.pointwise_conv1", "conv_pw1"},       {"conv.depthwise_conv", "conv_dw"},
    {"conv.norm", "conv_norm"},                 {"conv.pointwise_conv2", "conv_pw2"},
};
// Per block, whole names (parameters, not modules: no ".weight").
const NamePair kLayerParams[] = {{"self_attn.bias_u", "pos_bias_u"}, {"self_attn.bias_v", "pos_bias_v"}};

// Splits "X.weight" / "X.bias".
bool split_kind(const std::string& name, std::string& stem, std::string& kind) {
  const size_t dot = name.rfind('.');
  if (dot == std::string::npos) return false;
  stem = name.substr(0, dot);
  kind = name.substr(dot + 1);
  return kind == "weight" || kind == "bias";
}

// "PREFIX<digits>.REST" → the digits and REST (non-empty); no leading zeros (one spelling per layer).
bool split_layer(const std::string& name, std::string_view prefix, std::string& index, std::string& rest) {
  if (!name.starts_with(prefix)) return false;
  size_t end = prefix.size();
  while (end < name.size() && std::isdigit(static_cast<unsigned char>(name[end]))) ++end;
  if (end == prefix.size() || end + 1 >= name.size() || name[end] != '.') return false;
  if (name[prefix.size()] == '0' && end - prefix.size() > 1) return false;
  index = name.substr(prefix.size(), end - prefix.size());
  rest = name.substr(end + 1);
  return true;
}

// One direction of the tables: `from` side → `to` side.
std::optional<std::string> rename(const std::string& name, bool to_mmproj) {
  auto from = [&](const NamePair& p) { return std::string_view(to_mmproj ? p.ours : p.theirs); };
  auto to = [&](const NamePair& p) { return std::string(to_mmproj ? p.theirs : p.ours); };
  const std::string_view layer_from = to_mmproj ? "conformer.layers." : "a.blk.";
  const std::string layer_to = to_mmproj ? "a.blk." : "conformer.layers.";
  std::string index, rest, stem, kind;
  if (split_layer(name, layer_from, index, rest)) {
    for (const NamePair& p : kLayerParams)
      if (rest == from(p)) return layer_to + index + "." + to(p);
    if (!split_kind(rest, stem, kind)) return std::nullopt;
    for (const NamePair& p : kLayerNames)
      if (stem == from(p)) return layer_to + index + "." + to(p) + "." + kind;
    return std::nullopt;
  }
  if (!split_kind(name, stem, kind)) return std::nullopt;
  for (const NamePair& p : kGlobalNames)
    if (stem == from(p)) return to(p) + "." + kind;
  return std::nullopt;
}

// Without size-1 dims: a writer may keep or drop them (the element order is the same).
std::vector<int64_t> squeezed(const std::vector<int64_t>& s) {
  std::vector<int64_t> out;
  for (int64_t d : s)
    if (d != 1) out.push_back(d);
  return out;
}

class AudioMmprojSource : public MapTensorSource {
 public:
  AudioMmprojSource(std::shared_ptr<const gguf::GgufFile> f, const AudioConfig& cfg) : file_(std::move(f)) {
    origin_ = file_->path();
    std::map<std::string, std::vector<int64_t>> want;
    for (AudioTensor& t : lfm2a_tensor_layout(cfg, false)) want.emplace(std::move(t.name), std::move(t.shape));
    for (const gguf::TensorInfo& t : file_->tensors()) {
      const std::optional<std::string> ours = audio_binding_name(t.name);
      LFM_CHECK(ours, "audio mmproj: '", origin_, "': tensor '", t.name,
                "' is not part of the LFM2-Audio (lfm2a) mmproj layout");
      if (ours->starts_with("audio_embedding.")) continue;  // audio output: not the encoder's
      const auto it = want.find(*ours);
      LFM_CHECK(it != want.end(), "audio mmproj: '", origin_, "': tensor '", t.name, "' (", *ours,
                ") does not belong to an encoder of ", cfg.n_layers, " blocks");
      const std::vector<int64_t> shape(t.ne.rbegin(), t.ne.rend());
      const std::vector<int64_t> expect = audio_mmproj_stored_shape(*ours, it->second);
      LFM_CHECK(squeezed(shape) == squeezed(expect), "audio mmproj: '", origin_, "': tensor '", t.name,
                "' has shape ", shape_str(shape), " (PyTorch order), expected ", shape_str(expect));
      LFM_CHECK(dtype_decodable(t.dtype), "audio mmproj: '", origin_, "': tensor '", t.name, "' has type ",
                dtype_name(t.dtype), " which lfm cannot decode");
      tensors_.emplace(*ours, TensorView{t.dtype, it->second, t.data, t.nbytes});
    }
    for (const auto& [name, shape] : want)
      LFM_CHECK(tensors_.count(name), "audio mmproj: '", origin_, "' lacks tensor '", *audio_mmproj_name(name),
                "' (", name, ")");
  }
  void drop_pages(const TensorView& t) const override { file_->drop_pages(t.data, t.nbytes); }
  void detach(const std::vector<std::pair<const void*, size_t>>& keep) const override { file_->detach_from_file(keep); }

 private:
  std::shared_ptr<const gguf::GgufFile> file_;
};

}  // namespace

std::vector<AudioTensor> lfm2a_tensor_layout(const AudioConfig& c, bool running_stats) {
  const int64_t d = c.hidden_size, C = c.subsampling_channels, ff = c.intermediate_size, k = c.conv_kernel_size;
  const int64_t D = c.text_hidden_size;
  std::vector<AudioTensor> out;
  auto add = [&](std::string stem, std::vector<int64_t> w, std::vector<int64_t> b) {
    out.push_back({stem + ".weight", std::move(w)});
    if (!b.empty()) out.push_back({stem + ".bias", std::move(b)});
  };
  // ×8 dw_striding: Conv2d(1→C, 3, s2), ReLU, depthwise Conv2d(C, 3, s2), pointwise Conv2d(C→C, 1),
  // ReLU, the same again, ReLU (indices of the nn.Sequential; the ReLUs have no weights).
  const std::string sub = "conformer.subsampling.layers.";
  add(sub + "0", {C, 1, 3, 3}, {C});
  for (const char* i : {"2", "5"}) {
    add(sub + i, {C, 1, 3, 3}, {C});
    add(sub + std::to_string(std::stoi(i) + 1), {C, C, 1, 1}, {C});
  }
  // Frequency axis after three stride-2 convs: mels / 8 (mels a multiple of 8).
  add("conformer.subsampling.linear", {d, C * (c.num_mel_bins / c.subsampling_factor)}, {d});
  for (int64_t i = 0; i < c.n_layers; ++i) {
    const std::string l = "conformer.layers." + std::to_string(i) + ".";
    for (const char* ffn : {"feed_forward1", "feed_forward2"}) {
      add(l + ffn + ".linear1", {ff, d}, {ff});
      add(l + ffn + ".linear2", {d, ff}, {d});
    }
    for (const char* norm : {"norm_feed_forward1", "norm_self_att", "norm_conv", "norm_feed_forward2", "norm_out"})
      add(l + norm, {d}, {d});
    for (const char* proj : {"q_proj", "k_proj", "v_proj", "o_proj"}) add(l + "self_attn." + proj, {d, d}, {d});
    add(l + "self_attn.relative_k_proj", {d, d}, {});
    out.push_back({l + "self_attn.bias_u", {c.n_heads, c.head_dim()}});
    out.push_back({l + "self_attn.bias_v", {c.n_heads, c.head_dim()}});
    add(l + "conv.pointwise_conv1", {2 * d, d, 1}, {2 * d});
    add(l + "conv.depthwise_conv", {d, 1, k}, {d});
    add(l + "conv.norm", {d}, {d});
    if (running_stats) {
      out.push_back({l + "conv.norm.running_mean", {d}});
      out.push_back({l + "conv.norm.running_var", {d}});
    }
    add(l + "conv.pointwise_conv2", {d, d, 1}, {d});
  }
  add("audio_adapter_norm", {d}, {d});
  add("audio_adapter_linear_1", {D, d}, {D});
  add("audio_adapter_linear_2", {D, D}, {D});
  return out;
}

std::optional<std::string> audio_mmproj_name(const std::string& binding_name) { return rename(binding_name, true); }

std::vector<int64_t> audio_mmproj_stored_shape(const std::string& binding, const std::vector<int64_t>& shape) {
  if (binding.starts_with("conformer.subsampling.layers.") && binding.ends_with(".bias") && shape.size() == 1)
    return {shape[0], 1, 1};
  if ((binding.ends_with("pointwise_conv1.weight") || binding.ends_with("pointwise_conv2.weight") ||
       binding.ends_with("depthwise_conv.weight")) &&
      shape.size() == 3)
    return {shape[0], shape[1] * shape[2]};
  return shape;
}
std::optional<std::string> audio_binding_name(const std::string& mmproj_name) { return rename(mmproj_name, false); }

bool is_audio_mmproj(const gguf::GgufFile& f) {
  const gguf::Value* p = f.find("clip.projector_type");
  return p && p->type == gguf::ValueType::STRING && p->str == "lfm2a";
}

AudioConfig audio_config_from_mmproj(const gguf::GgufFile& f, int64_t text_hidden_size, int32_t audio_token_id) {
  auto need = [&](const std::string& key) -> const gguf::Value& {
    const gguf::Value* v = f.find(key);
    LFM_CHECK(v, "audio mmproj: '", f.path(), "' lacks required metadata '", key, "'");
    return *v;
  };
  auto dim = [&](const std::string& key, int64_t hi) {
    const int64_t v = need(key).as_int(key);
    LFM_CHECK(v >= 1 && v <= hi, "audio mmproj: '", f.path(), "': ", key, " = ", v, " is outside [1, ", hi, "]");
    return v;
  };
  // A tensor's ggml dims, which must exist with `n` of them.
  auto tensor = [&](const std::string& name, size_t n) -> const std::vector<int64_t>& {
    const gguf::TensorInfo* t = f.find_tensor(name);
    LFM_CHECK(t, "audio mmproj: '", f.path(), "' lacks tensor '", name, "'");
    LFM_CHECK(t->ne.size() >= n, "audio mmproj: '", f.path(), "': tensor '", name, "' has ", t->ne.size(),
              " dims, expected ", n);
    return t->ne;
  };
  const gguf::Value* arch = f.find("general.architecture");
  LFM_CHECK(arch && arch->type == gguf::ValueType::STRING && arch->str == "clip", "audio mmproj: '", f.path(),
            "' is not a clip GGUF (general.architecture ", arch ? arch->to_string() : std::string("missing"), ")");
  const std::string proj = need("clip.projector_type").as_string("clip.projector_type");
  LFM_CHECK(proj == "lfm2a", "audio mmproj: '", f.path(), "': clip.projector_type '", proj,
            "' is not LFM2-Audio's ('lfm2a')");
  LFM_CHECK(need("clip.has_audio_encoder").as_bool("clip.has_audio_encoder"), "audio mmproj: '", f.path(),
            "': clip.has_audio_encoder is false");
  AudioConfig c;
  c.hidden_size = dim("clip.audio.embedding_length", limits::kMaxHiddenSize);
  c.n_layers = dim("clip.audio.block_count", limits::kMaxLayers);
  c.n_heads = dim("clip.audio.attention.head_count", limits::kMaxHeads);
  c.num_mel_bins = dim("clip.audio.num_mel_bins", 256);  // clip.cpp's own limit
  LFM_CHECK(c.num_mel_bins % c.subsampling_factor == 0, "audio mmproj: clip.audio.num_mel_bins ", c.num_mel_bins,
            " is not a multiple of ", c.subsampling_factor);
  LFM_CHECK(c.hidden_size % c.n_heads == 0, "audio mmproj: clip.audio.embedding_length ", c.hidden_size,
            " is not a multiple of clip.audio.attention.head_count ", c.n_heads);
  const int64_t proj_dim = dim("clip.audio.projection_dim", limits::kMaxHiddenSize);
  LFM_CHECK(proj_dim == text_hidden_size, "audio mmproj: '", f.path(), "': clip.audio.projection_dim ", proj_dim,
            " is not the language model's hidden size ", text_hidden_size);
  if (const gguf::Value* eps = f.find("clip.audio.attention.layer_norm_epsilon")) {
    c.layer_norm_eps = eps->as_double("clip.audio.attention.layer_norm_epsilon");
    LFM_CHECK(c.layer_norm_eps > 0 && c.layer_norm_eps < 1, "audio mmproj: clip.audio.attention.layer_norm_epsilon ",
              c.layer_norm_eps, " is outside (0, 1)");
  }
  // Not in the keys (feed_forward_length holds d_model): the shapes.
  c.intermediate_size = tensor("a.blk.0.ffn_up.weight", 2)[1];
  c.conv_kernel_size = tensor("a.blk.0.conv_dw.weight", 2)[0];
  c.subsampling_channels = tensor("a.conv1d.0.weight", 4)[3];
  LFM_CHECK(c.intermediate_size >= 1 && c.intermediate_size <= limits::kMaxFfnDim, "audio mmproj: ffn width ",
            c.intermediate_size, " is out of range");
  LFM_CHECK(c.conv_kernel_size % 2 == 1 && c.conv_kernel_size <= limits::kMaxConvKernel,
            "audio mmproj: a.blk.0.conv_dw.weight gives conv kernel ", c.conv_kernel_size, ", expected an odd size");
  LFM_CHECK(c.subsampling_channels >= 1 && c.subsampling_channels <= limits::kMaxHiddenSize,
            "audio mmproj: a.conv1d.0.weight gives ", c.subsampling_channels, " subsampling channels");
  c.batch_norm_eps = 1e-5;  // already folded into conv_norm
  c.scale_input = false;    // clip.cpp's graph has no x·√d
  c.text_hidden_size = text_hidden_size;
  c.audio_token_id = audio_token_id;
  c.front_end = audio::LogMelConfig{};  // clip.cpp hard-codes LFM2-Audio's front end
  c.front_end.num_mel_bins = static_cast<int>(c.num_mel_bins);
  return c;
}

std::shared_ptr<const TensorSource> audio_mmproj_tensor_source(std::shared_ptr<const gguf::GgufFile> f,
                                                               const AudioConfig& cfg) {
  return std::make_shared<AudioMmprojSource>(std::move(f), cfg);
}

}  // namespace lfm
