#include "model/config.h"

#include <cmath>
#include <fstream>

#include <nlohmann/json.hpp>

#include "core/error.h"

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
  if (!auto_adjust) return raw;
  // Python: int(2 * raw / 3), then int(multiplier * F), then round UP to multiple_of.
  int64_t f = static_cast<int64_t>(2.0 * static_cast<double>(raw) / 3.0);
  if (has_multiplier) {
    f = static_cast<int64_t>(multiplier * static_cast<double>(f));
    LFM_CHECK(multiple_of > 0, "config: block_multiple_of must be positive, got ", multiple_of);
    f = multiple_of * ((f + multiple_of - 1) / multiple_of);
  }
  return f;
}

namespace {

// Reads an integer key; the value must be a non-negative integer.
int64_t get_int(const json& j, const char* key, int64_t def, bool required = false) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    LFM_CHECK(!required, "config: missing required key '", key, "'");
    return def;
  }
  LFM_CHECK(it->is_number_integer() || (it->is_number_float() && std::floor(it->get<double>()) == it->get<double>()),
            "config: '", key, "' must be an integer, got ", it->dump());
  return it->get<int64_t>();
}

double get_num(const json& j, const char* key, double def) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return def;
  LFM_CHECK(it->is_number(), "config: '", key, "' must be a number, got ", it->dump());
  return it->get<double>();
}

bool get_bool(const json& j, const char* key, bool def) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return def;
  LFM_CHECK(it->is_boolean(), "config: '", key, "' must be true or false, got ", it->dump());
  return it->get<bool>();
}

void check_positive(int64_t v, const char* name) {
  LFM_CHECK(v > 0, "config: '", name, "' must be positive, got ", v);
}

std::vector<LayerKind> parse_layer_kinds(const json& j, int64_t n_layers, bool moe) {
  std::vector<LayerKind> kinds;
  if (auto it = j.find("layer_types"); it != j.end() && !it->is_null()) {
    LFM_CHECK(it->is_array(), "config: 'layer_types' must be a list, got ", it->dump());
    LFM_CHECK(static_cast<int64_t>(it->size()) == n_layers, "config: 'layer_types' has ", it->size(),
              " entries but num_hidden_layers is ", n_layers);
    for (const auto& t : *it) {
      LFM_CHECK(t.is_string(), "config: 'layer_types' entries must be strings, got ", t.dump());
      // Anything other than "full_attention" is a conv layer (as transformers treats it).
      kinds.push_back(t.get<std::string>() == "full_attention" ? LayerKind::Attention : LayerKind::Conv);
    }
    return kinds;
  }
  if (auto it = j.find("full_attn_idxs"); it != j.end() && !it->is_null() && !moe) {
    LFM_CHECK(it->is_array(), "config: 'full_attn_idxs' must be a list, got ", it->dump());
    kinds.assign(n_layers, LayerKind::Conv);
    for (const auto& v : *it) {
      LFM_CHECK(v.is_number_integer(), "config: 'full_attn_idxs' entries must be integers, got ", v.dump());
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
  LFM_CHECK(c.model_type == "lfm2" || c.model_type == "lfm2_moe", "config: unsupported model_type '",
            c.model_type, "' (lfm supports 'lfm2' and 'lfm2_moe')");
  const bool moe = c.model_type == "lfm2_moe";
  if (auto it = j.find("architectures"); it != j.end() && it->is_array() && !it->empty()) {
    c.architecture = (*it)[0].is_string() ? (*it)[0].get<std::string>() : "";
    const char* want = moe ? "Lfm2MoeForCausalLM" : "Lfm2ForCausalLM";
    LFM_CHECK(c.architecture == want, "config: unsupported architecture '", c.architecture, "' for model_type '",
              c.model_type, "' (expected ", want, ")");
  } else {
    c.architecture = moe ? "Lfm2MoeForCausalLM" : "Lfm2ForCausalLM";
  }
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
  LFM_CHECK(c.head_dim % 2 == 0, "config: head_dim must be even for RoPE, got ", c.head_dim);
  // Legacy duplicates must agree with hidden_size (released models always do).
  for (const char* key : {"block_dim", "conv_dim", "conv_dim_out"}) {
    if (j.contains(key) && !j[key].is_null())
      LFM_CHECK(get_int(j, key, 0) == c.hidden_size, "config: '", key, "' = ", j[key].dump(),
                " differs from hidden_size ", c.hidden_size, " (unsupported)");
  }
  if (j.contains("num_heads") && !j["num_heads"].is_null())
    LFM_CHECK(get_int(j, "num_heads", 0) == c.n_heads, "config: 'num_heads' ", j["num_heads"].dump(),
              " differs from num_attention_heads ", c.n_heads);

  c.max_position = get_int(j, "max_position_embeddings", 128000);
  c.conv_kernel = get_int(j, "conv_L_cache", 3);
  check_positive(c.conv_kernel, "conv_L_cache");
  c.conv_bias = get_bool(j, "conv_bias", false);
  c.norm_eps = static_cast<float>(get_num(j, "norm_eps", 1e-5));
  LFM_CHECK(c.norm_eps > 0, "config: 'norm_eps' must be positive, got ", c.norm_eps);
  c.tie_embeddings = j.contains("tie_embedding") ? get_bool(j, "tie_embedding", true)
                                                  : get_bool(j, "tie_word_embeddings", true);
  c.rope_theta = parse_rope_theta(j);
  LFM_CHECK(c.rope_theta > 0, "config: rope theta must be positive, got ", c.rope_theta);
  c.layer_kinds = parse_layer_kinds(j, c.n_layers, moe);

  if (moe) {
    c.ffn_dim = get_int(j, "intermediate_size", 7168);
    c.moe_ffn_dim = get_int(j, "moe_intermediate_size", 1792);
    c.n_experts = get_int(j, "num_experts", 32);
    c.n_experts_used = get_int(j, "num_experts_per_tok", 4);
    c.n_dense_layers = get_int(j, "num_dense_layers", 2);
    c.use_expert_bias = get_bool(j, "use_expert_bias", true);
    c.norm_topk_prob = get_bool(j, "norm_topk_prob", true);
    c.routed_scaling_factor = static_cast<float>(get_num(j, "routed_scaling_factor", 1.0));
    check_positive(c.moe_ffn_dim, "moe_intermediate_size");
    check_positive(c.n_experts, "num_experts");
    check_positive(c.n_experts_used, "num_experts_per_tok");
    LFM_CHECK(c.n_experts_used <= c.n_experts, "config: num_experts_per_tok ", c.n_experts_used,
              " exceeds num_experts ", c.n_experts);
    LFM_CHECK(c.n_dense_layers >= 0 && c.n_dense_layers <= c.n_layers, "config: num_dense_layers ",
              c.n_dense_layers, " is outside [0, ", c.n_layers, "]");
  } else {
    // block_ff_dim wins over intermediate_size (transformers and llama.cpp agree).
    const int64_t raw = j.contains("block_ff_dim") && !j["block_ff_dim"].is_null()
                            ? get_int(j, "block_ff_dim", 0)
                            : get_int(j, "intermediate_size", 12288);
    const bool has_mult = !(j.contains("block_ffn_dim_multiplier") && j["block_ffn_dim_multiplier"].is_null());
    c.ffn_dim = lfm2_effective_ffn_dim(raw, get_bool(j, "block_auto_adjust_ff_dim", true),
                                       get_num(j, "block_ffn_dim_multiplier", 1.0), has_mult,
                                       get_int(j, "block_multiple_of", 256));
  }
  check_positive(c.ffn_dim, "effective FFN width");

  c.bos_token_id = static_cast<int32_t>(get_int(j, "bos_token_id", 1));
  c.pad_token_id = static_cast<int32_t>(get_int(j, "pad_token_id", 0));
  c.eos_token_ids.clear();
  if (auto it = j.find("eos_token_id"); it != j.end() && it->is_array()) {
    for (const auto& v : *it) {
      LFM_CHECK(v.is_number_integer(), "config: 'eos_token_id' entries must be integers, got ", v.dump());
      c.eos_token_ids.push_back(v.get<int32_t>());
    }
  } else {
    c.eos_token_ids.push_back(static_cast<int32_t>(get_int(j, "eos_token_id", 2)));
  }
  return c;
}

ModelConfig load_model_config(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  LFM_CHECK(in.good(), "config: cannot open '", path, "'");
  json j;
  try {
    j = json::parse(in);
  } catch (const json::exception& e) {
    fail("config: '", path, "' is not valid JSON: ", e.what());
  }
  try {
    return parse_model_config(j);
  } catch (const json::exception& e) {
    fail("config: '", path, "': ", e.what());
  }
}

json ModelConfig::to_json() const {
  json j;
  j["model_type"] = model_type;
  j["architecture"] = architecture;
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
  for (LayerKind k : layer_kinds) kinds.push_back(layer_kind_name(k));
  j["layer_types"] = kinds;
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
