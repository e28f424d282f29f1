#include "model/config.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <utility>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json_guard.h"
#include "core/limits.h"

namespace lfm {

using nlohmann::json;

const char* layer_kind_name(LayerKind k) { return k == LayerKind::Attention ? "full_attention" : "conv"; }

int64_t ModelConfig::n_attention_layers() const {
  int64_t n = 0;
  for (LayerKind k : layer_kinds) n += k == LayerKind::Attention;
  return n;
}
int64_t ModelConfig::n_conv_layers() const { return n_layers - n_attention_layers(); }

std::string ModelConfig::layer_pattern() const {
  std::string s;
  for (LayerKind k : layer_kinds) s += k == LayerKind::Attention ? 'A' : 'c';
  return s;
}

int64_t lfm2_effective_ffn_dim(int64_t raw, bool auto_adjust, double multiplier, bool has_multiplier,
                               int64_t multiple_of) {
  // Every operand is bounded first: a hostile raw width or multiplier must neither overflow the
  // rounding below nor reach a double -> int64 cast out of range (undefined behaviour).
  LFM_CHECK(raw >= -limits::kMaxFfnDim && raw <= limits::kMaxFfnDim, "config: FFN width ", raw,
            " exceeds lfm's limit of ", limits::kMaxFfnDim);
  if (!auto_adjust) return raw;
  // Python: int(2 * raw / 3), then int(multiplier * F), then round UP to multiple_of.
  int64_t f = static_cast<int64_t>(2.0 * static_cast<double>(raw) / 3.0);
  if (has_multiplier) {
    const double scaled = multiplier * static_cast<double>(f);
    LFM_CHECK(std::isfinite(scaled) && std::fabs(scaled) <= double(limits::kMaxFfnDim), "config: block_ffn_dim_multiplier ",
              multiplier, " makes the FFN width ", scaled, ", beyond lfm's limit of ", limits::kMaxFfnDim);
    f = static_cast<int64_t>(scaled);
    LFM_CHECK(multiple_of > 0, "config: block_multiple_of must be positive, got ", multiple_of);
    LFM_CHECK(multiple_of <= limits::kMaxFfnDim, "config: block_multiple_of ", multiple_of, " exceeds lfm's limit of ",
              limits::kMaxFfnDim);
    f = multiple_of * ((f + multiple_of - 1) / multiple_of);
  }
  return f;
}

namespace {

// Reads an integer key. JSON numbers beyond int64 (2^64 - 1 is read as unsigned) and floats
// outside +-2^53 are refused with their text, never wrapped or cast (a cast would be undefined).
int64_t get_int(const json& j, const char* key, int64_t def, bool required = false) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    LFM_CHECK(!required || it != j.end(), "config: missing required key '", key, "'");
    LFM_CHECK(!required, "config: required key '", key, "' is null (an integer is needed)");
    return def;
  }
  if (it->is_number_unsigned()) {
    LFM_CHECK(it->get<uint64_t>() <= static_cast<uint64_t>(INT64_MAX), "config: '", key, "' = ", json_excerpt(*it),
              " is too large");
    return static_cast<int64_t>(it->get<uint64_t>());
  }
  if (it->is_number_integer()) return it->get<int64_t>();
  LFM_CHECK(it->is_number_float() && std::floor(it->get<double>()) == it->get<double>(), "config: '", key,
            "' must be an integer, got ", json_excerpt(*it));
  const double d = it->get<double>();
  LFM_CHECK(std::fabs(d) <= 9007199254740992.0, "config: '", key, "' = ", json_excerpt(*it), " is too large");
  return static_cast<int64_t>(d);
}

// Reads an integer key that must lie in [lo, hi] (hi is lfm's documented limit, core/limits.h).
int64_t get_bounded(const json& j, const char* key, int64_t def, int64_t lo, int64_t hi, bool required = false) {
  const int64_t v = get_int(j, key, def, required);
  LFM_CHECK(v >= lo && v <= hi, "config: '", key, "' = ", v, " is outside [", lo, ", ", hi, "]",
            v > hi ? " (lfm's limit)" : "");
  return v;
}

// A token id key (bos/eos/pad): in [0, kMaxVocabSize) or -1 (none, as some configs write it),
// never silently cut to 32 bits.
int32_t get_token_id(const json& j, const char* key, int64_t def) {
  return static_cast<int32_t>(get_bounded(j, key, def, -1, limits::kMaxVocabSize - 1));
}

double get_num(const json& j, const char* key, double def) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return def;
  LFM_CHECK(it->is_number(), "config: '", key, "' must be a number, got ", json_excerpt(*it));
  LFM_CHECK(std::isfinite(it->get<double>()), "config: '", key, "' must be finite, got ", json_excerpt(*it));
  return it->get<double>();
}

bool get_bool(const json& j, const char* key, bool def) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return def;
  LFM_CHECK(it->is_boolean(), "config: '", key, "' must be true or false, got ", json_excerpt(*it));
  return it->get<bool>();
}

void check_positive(int64_t v, const char* name) {
  LFM_CHECK(v > 0, "config: '", name, "' must be positive, got ", v);
}

void check_max(int64_t v, const char* name, int64_t max) {
  LFM_CHECK(v <= max, "config: '", name, "' = ", v, " exceeds lfm's limit of ", max);
}

std::vector<LayerKind> parse_layer_kinds(const json& j, int64_t n_layers, bool moe) {
  std::vector<LayerKind> kinds;
  if (auto it = j.find("layer_types"); it != j.end() && !it->is_null()) {
    LFM_CHECK(it->is_array(), "config: 'layer_types' must be a list, got ", json_excerpt(*it));
    LFM_CHECK(static_cast<int64_t>(it->size()) == n_layers, "config: 'layer_types' has ", it->size(),
              " entries but num_hidden_layers is ", n_layers);
    for (const auto& t : *it) {
      LFM_CHECK(t.is_string(), "config: 'layer_types' entries must be strings, got ", json_excerpt(t));
      // "full_attention" and "sliding_attention" (parse_layer_windows) are attention layers;
      // anything else is a conv layer (as transformers treats it).
      const std::string type = t.get<std::string>();
      kinds.push_back(type == "full_attention" || type == "sliding_attention" ? LayerKind::Attention : LayerKind::Conv);
    }
    return kinds;
  }
  if (auto it = j.find("full_attn_idxs"); it != j.end() && !it->is_null() && !moe) {
    LFM_CHECK(it->is_array(), "config: 'full_attn_idxs' must be a list, got ", json_excerpt(*it));
    kinds.assign(n_layers, LayerKind::Conv);
    for (const auto& v : *it) {
      LFM_CHECK(v.is_number_integer(), "config: 'full_attn_idxs' entries must be integers, got ", json_excerpt(v));
      LFM_CHECK(!v.is_number_unsigned() || v.get<uint64_t>() < static_cast<uint64_t>(n_layers),
                "config: full_attn_idxs entry ", json_excerpt(v), " is outside [0, ", n_layers, ")");
      const int64_t idx = v.get<int64_t>();
      LFM_CHECK(idx >= 0 && idx < n_layers, "config: full_attn_idxs entry ", idx, " is outside [0, ",
                n_layers, ")");
      kinds[idx] = LayerKind::Attention;
    }
    return kinds;
  }
  LFM_CHECK(!moe, "config: lfm2_moe requires 'layer_types'");
  // transformers' default: every layer is attention.
  return std::vector<LayerKind>(n_layers, LayerKind::Attention);
}

// ModelConfig::layer_window: `sliding_window` for the "sliding_attention" layers, 0 elsewhere;
// empty when no layer is one (then `sliding_window` is not read).
std::vector<int64_t> parse_layer_windows(const json& j, int64_t n_layers) {
  const auto it = j.find("layer_types");
  if (it == j.end() || !it->is_array()) return {};
  std::vector<int64_t> windows(static_cast<size_t>(n_layers), 0);
  bool any = false;
  for (size_t i = 0; i < it->size() && i < windows.size(); ++i)
    if ((*it)[i].is_string() && (*it)[i].get<std::string>() == "sliding_attention") windows[i] = 1, any = true;
  if (!any) return {};
  LFM_CHECK(j.contains("sliding_window") && !j["sliding_window"].is_null(),
            "config: 'layer_types' has sliding_attention layers but no 'sliding_window' is given");
  const int64_t w = get_bounded(j, "sliding_window", 0, 1, limits::kMaxPositions, true);
  for (int64_t& v : windows) v *= w;
  return windows;
}

double parse_rope_theta(const json& j) {
  if (auto it = j.find("rope_parameters"); it != j.end() && it->is_object()) {
    const std::string type = it->value("rope_type", std::string("default"));
    LFM_CHECK(type == "default", "config: unsupported rope_type '", type, "' (only 'default' RoPE is used by LFM2)");
    if (it->contains("rope_theta")) return get_num(*it, "rope_theta", 1e6);
  }
  if (j.contains("theta")) return get_num(j, "theta", 1e6);
  return get_num(j, "rope_theta", 1e6);
}

}  // namespace

ModelConfig parse_model_config(const json& j) {
  LFM_CHECK(j.is_object(), "config: expected a JSON object at the top level");
  ModelConfig c;
  c.model_type = j.value("model_type", std::string());
  LFM_CHECK(c.model_type == "lfm2" || c.model_type == "lfm2_moe" || c.model_type == "lfm2_bidirectional",
            "config: unsupported model_type '", c.model_type,
            "' (lfm supports 'lfm2', 'lfm2_moe' and 'lfm2_bidirectional')");
  const bool moe = c.model_type == "lfm2_moe";
  // The released LFM2.5 retrievers say model_type "lfm2" with the bidirectional architecture
  // (remote code through auto_map); transformers' own class says "lfm2_bidirectional".
  std::string arch;
  if (auto it = j.find("architectures"); it != j.end() && it->is_array() && !it->empty())
    arch = (*it)[0].is_string() ? (*it)[0].get<std::string>() : "?";
  c.bidirectional = c.model_type == "lfm2_bidirectional" || (c.model_type == "lfm2" && arch == "Lfm2BidirectionalModel");
  const char* causal_lm = moe ? "Lfm2MoeForCausalLM" : "Lfm2ForCausalLM";
  const char* base = c.bidirectional ? "Lfm2BidirectionalModel" : moe ? "Lfm2MoeModel" : "Lfm2Model";
  if (!arch.empty()) {
    c.architecture = arch;
    LFM_CHECK(c.architecture == base || (!c.bidirectional && c.architecture == causal_lm),
              "config: unsupported architecture '", c.architecture, "' for model_type '", c.model_type, "' (expected ",
              c.bidirectional ? "" : causal_lm, c.bidirectional ? "" : " or ", base, ")");
  } else {
    c.architecture = c.bidirectional ? base : causal_lm;
  }
  c.has_lm_head = c.architecture == causal_lm;
  c.dtype = j.value("dtype", j.value("torch_dtype", std::string("bfloat16")));

  c.vocab_size = get_int(j, "vocab_size", 65536);
  c.hidden_size = get_int(j, "hidden_size", 0, true);
  c.n_layers = get_int(j, "num_hidden_layers", 0, true);
  c.n_heads = get_int(j, "num_attention_heads", 0, true);
  c.n_kv_heads = get_int(j, "num_key_value_heads", c.n_heads);
  for (auto [v, n] : {std::pair{c.vocab_size, "vocab_size"}, {c.hidden_size, "hidden_size"},
                      {c.n_layers, "num_hidden_layers"}, {c.n_heads, "num_attention_heads"},
                      {c.n_kv_heads, "num_key_value_heads"}})
    check_positive(v, n);
  // Bounded before any arithmetic (core/limits.h), so nothing below can overflow.
  check_max(c.vocab_size, "vocab_size", limits::kMaxVocabSize);
  check_max(c.hidden_size, "hidden_size", limits::kMaxHiddenSize);
  check_max(c.n_layers, "num_hidden_layers", limits::kMaxLayers);
  check_max(c.n_heads, "num_attention_heads", limits::kMaxHeads);
  check_max(c.n_kv_heads, "num_key_value_heads", limits::kMaxHeads);
  LFM_CHECK(c.n_heads % c.n_kv_heads == 0, "config: num_attention_heads ", c.n_heads,
            " is not a multiple of num_key_value_heads ", c.n_kv_heads);
  if (j.contains("head_dim") && !j["head_dim"].is_null()) {
    c.head_dim = get_int(j, "head_dim", 0);
  } else {
    LFM_CHECK(c.hidden_size % c.n_heads == 0, "config: hidden_size ", c.hidden_size,
              " is not divisible by num_attention_heads ", c.n_heads, " and no head_dim is given");
    c.head_dim = c.hidden_size / c.n_heads;
  }
  check_positive(c.head_dim, "head_dim");
  check_max(c.head_dim, "head_dim", limits::kMaxHeadDim);
  LFM_CHECK(c.head_dim % 2 == 0, "config: head_dim must be even for RoPE, got ", c.head_dim);
  // Legacy duplicates must agree with hidden_size (released models always do).
  for (const char* key : {"block_dim", "conv_dim", "conv_dim_out"}) {
    if (j.contains(key) && !j[key].is_null())
      LFM_CHECK(get_int(j, key, 0) == c.hidden_size, "config: '", key, "' = ", json_excerpt(j[key]),
                " differs from hidden_size ", c.hidden_size, " (unsupported)");
  }
  if (j.contains("num_heads") && !j["num_heads"].is_null())
    LFM_CHECK(get_int(j, "num_heads", 0) == c.n_heads, "config: 'num_heads' ", json_excerpt(j["num_heads"]),
              " differs from num_attention_heads ", c.n_heads);

  c.max_position = get_bounded(j, "max_position_embeddings", 128000, 1, limits::kMaxPositions);
  c.conv_kernel = get_int(j, "conv_L_cache", 3);
  check_positive(c.conv_kernel, "conv_L_cache");
  check_max(c.conv_kernel, "conv_L_cache", limits::kMaxConvKernel);
  c.conv_bias = get_bool(j, "conv_bias", false);
  // Checked as a double: a value beyond float's range would make the conversion undefined.
  const double eps = get_num(j, "norm_eps", 1e-5);
  LFM_CHECK(eps > 0 && eps <= 1, "config: 'norm_eps' must be in (0, 1], got ", eps);
  c.norm_eps = static_cast<float>(eps);
  LFM_CHECK(c.norm_eps > 0, "config: 'norm_eps' must be positive, got ", c.norm_eps);
  c.tie_embeddings = j.contains("tie_embedding") ? get_bool(j, "tie_embedding", true)
                                                  : get_bool(j, "tie_word_embeddings", true);
  c.rope_theta = parse_rope_theta(j);
  LFM_CHECK(c.rope_theta > 0, "config: rope theta must be positive, got ", c.rope_theta);
  c.layer_kinds = parse_layer_kinds(j, c.n_layers, moe);
  c.layer_window = parse_layer_windows(j, c.n_layers);

  if (moe) {
    c.ffn_dim = get_int(j, "intermediate_size", 7168);
    c.moe_ffn_dim = get_int(j, "moe_intermediate_size", 1792);
    c.n_experts = get_int(j, "num_experts", 32);
    c.n_experts_used = get_int(j, "num_experts_per_tok", 4);
    c.n_dense_layers = get_int(j, "num_dense_layers", 2);
    c.use_expert_bias = get_bool(j, "use_expert_bias", true);
    c.norm_topk_prob = get_bool(j, "norm_topk_prob", true);
    const double scale = get_num(j, "routed_scaling_factor", 1.0);
    LFM_CHECK(std::fabs(scale) <= 1e6, "config: 'routed_scaling_factor' = ", scale, " is outside [-1e6, 1e6]");
    c.routed_scaling_factor = static_cast<float>(scale);
    check_positive(c.moe_ffn_dim, "moe_intermediate_size");
    check_positive(c.n_experts, "num_experts");
    check_positive(c.n_experts_used, "num_experts_per_tok");
    check_max(c.ffn_dim, "intermediate_size", limits::kMaxFfnDim);
    check_max(c.moe_ffn_dim, "moe_intermediate_size", limits::kMaxFfnDim);
    check_max(c.n_experts, "num_experts", limits::kMaxExperts);
    LFM_CHECK(c.n_experts_used <= c.n_experts, "config: num_experts_per_tok ", c.n_experts_used,
              " exceeds num_experts ", c.n_experts);
    LFM_CHECK(c.n_dense_layers >= 0 && c.n_dense_layers <= c.n_layers, "config: num_dense_layers ",
              c.n_dense_layers, " is outside [0, ", c.n_layers, "]");
  } else {
    // block_ff_dim wins over intermediate_size (transformers and llama.cpp agree).
    const char* raw_key = j.contains("block_ff_dim") && !j["block_ff_dim"].is_null() ? "block_ff_dim" : "intermediate_size";
    const int64_t raw = get_int(j, raw_key, 12288);
    check_max(raw, raw_key, limits::kMaxFfnDim);
    const bool has_mult = !(j.contains("block_ffn_dim_multiplier") && j["block_ffn_dim_multiplier"].is_null());
    c.ffn_dim = lfm2_effective_ffn_dim(raw, get_bool(j, "block_auto_adjust_ff_dim", true),
                                       get_num(j, "block_ffn_dim_multiplier", 1.0), has_mult,
                                       get_int(j, "block_multiple_of", 256));
  }
  check_positive(c.ffn_dim, "effective FFN width");
  check_max(c.ffn_dim, "effective FFN width", limits::kMaxFfnDim);

  c.bos_token_id = get_token_id(j, "bos_token_id", 1);
  c.pad_token_id = get_token_id(j, "pad_token_id", 0);
  c.eos_token_ids.clear();
  if (auto it = j.find("eos_token_id"); it != j.end() && it->is_array()) {
    for (const auto& v : *it) {
      LFM_CHECK(v.is_number_integer() && v.get<int64_t>() >= -1 && v.get<int64_t>() < limits::kMaxVocabSize &&
                    (!v.is_number_unsigned() || v.get<uint64_t>() < uint64_t(limits::kMaxVocabSize)),
                "config: 'eos_token_id' entries must be integers in [-1, ", limits::kMaxVocabSize - 1, "], got ",
                json_excerpt(v));
      c.eos_token_ids.push_back(static_cast<int32_t>(v.get<int64_t>()));
    }
  } else {
    c.eos_token_ids.push_back(get_token_id(j, "eos_token_id", 2));
  }
  check_config_limits(c, "config");
  return c;
}

void check_config_limits(const ModelConfig& c, const std::string& origin) {
  const std::pair<int64_t, const char*> sizes[] = {
      {c.n_layers, "layer count"}, {c.hidden_size, "hidden size"}, {c.n_heads, "attention heads"},
      {c.n_kv_heads, "KV heads"}, {c.head_dim, "head dimension"}, {c.ffn_dim, "FFN width"},
      {c.moe_ffn_dim, "expert FFN width"}, {c.n_experts, "expert count"}, {c.vocab_size, "vocabulary size"},
      {c.conv_kernel, "conv kernel length"}, {c.max_position, "context length"}};
  const int64_t maxima[] = {limits::kMaxLayers, limits::kMaxHiddenSize, limits::kMaxHeads, limits::kMaxHeads,
                            limits::kMaxHeadDim, limits::kMaxFfnDim, limits::kMaxFfnDim, limits::kMaxExperts,
                            limits::kMaxVocabSize, limits::kMaxConvKernel, limits::kMaxPositions};
  for (size_t i = 0; i < std::size(sizes); ++i)
    LFM_CHECK(sizes[i].first >= 0 && sizes[i].first <= maxima[i], origin, ": ", sizes[i].second, " = ", sizes[i].first,
              sizes[i].first < 0 ? " is negative" : " exceeds lfm's limit of ", sizes[i].first < 0 ? "" : cat(maxima[i]));
  LFM_CHECK(static_cast<int64_t>(c.layer_kinds.size()) == c.n_layers, origin, ": ", c.layer_kinds.size(),
            " layer kinds for ", c.n_layers, " layers");
  LFM_CHECK(c.layer_window.empty() || static_cast<int64_t>(c.layer_window.size()) == c.n_layers, origin, ": ",
            c.layer_window.size(), " attention windows for ", c.n_layers, " layers");
  for (int64_t w : c.layer_window)
    LFM_CHECK(w >= 0 && w <= limits::kMaxPositions, origin, ": sliding window ", w, " is outside [0, ",
              limits::kMaxPositions, "]");
  std::vector<int32_t> ids = c.eos_token_ids;
  ids.push_back(c.bos_token_id);
  ids.push_back(c.pad_token_id);
  for (int32_t id : ids)  // -1: none (GGUF files say so for a missing padding token)
    LFM_CHECK(id >= -1 && id < limits::kMaxVocabSize, origin, ": special token id ", id, " is outside [0, ",
              limits::kMaxVocabSize, ")");
}

ModelConfig load_model_config(const std::string& path) {
  const json j = parse_json(read_text_file(path, "config:"), cat("config: '", path, "'"));
  try {
    return parse_model_config(j);
  } catch (const json::exception& e) {
    fail("config: '", path, "': ", e.what());
  } catch (const Error& e) {
    fail(e.what(), " (in '", path, "')");
  }
}

json ModelConfig::to_json() const {
  json j;
  j["model_type"] = model_type;
  j["architecture"] = architecture;
  j["has_lm_head"] = has_lm_head;
  j["bidirectional"] = bidirectional;
  j["dtype"] = dtype;
  j["vocab_size"] = vocab_size;
  j["hidden_size"] = hidden_size;
  j["num_hidden_layers"] = n_layers;
  j["num_attention_heads"] = n_heads;
  j["num_key_value_heads"] = n_kv_heads;
  j["head_dim"] = head_dim;
  j["ffn_dim"] = ffn_dim;
  j["max_position_embeddings"] = max_position;
  j["conv_L_cache"] = conv_kernel;
  j["conv_bias"] = conv_bias;
  j["norm_eps"] = norm_eps;
  j["tie_word_embeddings"] = tie_embeddings;
  j["rope_theta"] = rope_theta;
  std::vector<std::string> kinds;
  for (size_t i = 0; i < layer_kinds.size(); ++i)
    kinds.push_back(window(static_cast<int64_t>(i)) > 0 ? "sliding_attention" : layer_kind_name(layer_kinds[i]));
  j["layer_types"] = kinds;
  if (!layer_window.empty()) j["sliding_window"] = *std::max_element(layer_window.begin(), layer_window.end());
  j["layer_pattern"] = layer_pattern();
  if (is_moe()) {
    j["num_experts"] = n_experts;
    j["num_experts_per_tok"] = n_experts_used;
    j["moe_intermediate_size"] = moe_ffn_dim;
    j["num_dense_layers"] = n_dense_layers;
    j["use_expert_bias"] = use_expert_bias;
    j["norm_topk_prob"] = norm_topk_prob;
    j["routed_scaling_factor"] = routed_scaling_factor;
  }
  j["bos_token_id"] = bos_token_id;
  j["eos_token_id"] = eos_token_ids;
  j["pad_token_id"] = pad_token_id;
  return j;
}

}  // namespace lfm
