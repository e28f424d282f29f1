// The normalised LFM2 / LFM2-MoE configuration: every config.json quirk resolved once, here
// (LFM2_SPEC.md §1). The model code reads only these fields.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace lfm {

enum class LayerKind : uint8_t { Conv, Attention };
const char* layer_kind_name(LayerKind k);  // "conv" / "full_attention"

struct ModelConfig {
  std::string model_type;    // "lfm2", "lfm2_moe" or "lfm2_bidirectional"
  std::string architecture;  // e.g. "Lfm2ForCausalLM"
  // Retrievers (LFM2.5-Embedding, the ColBERT models) give hidden states, not logits: a base
  // model without an LM head ("Lfm2Model", "Lfm2BidirectionalModel"), bidirectional for
  // "lfm2_bidirectional" (attention sees the whole text; the short conv is centred, no state).
  bool has_lm_head = true;
  bool bidirectional = false;
  std::string dtype;         // declared storage dtype ("bfloat16", ...), informational

  int64_t vocab_size = 65536;
  int64_t hidden_size = 0;       // d
  int64_t n_layers = 0;          // L
  int64_t n_heads = 0;           // H
  int64_t n_kv_heads = 0;        // G
  int64_t head_dim = 0;          // hd
  int64_t max_position = 128000;
  int64_t conv_kernel = 3;       // K (conv_L_cache)
  bool conv_bias = false;        // in_proj, conv and out_proj biases
  float norm_eps = 1e-5f;
  bool tie_embeddings = true;
  double rope_theta = 1e6;
  std::vector<LayerKind> layer_kinds;  // size L
  // Sliding-window attention (transformers' "sliding_attention" layers, config.json
  // `sliding_window`: LFM2.5-Audio's detokenizer): per layer, 0 for full causal attention (and for
  // conv layers), else the window w: a query at position p sees keys p − w < j ≤ p
  // (Backend::attention). Empty: no layer has one.
  std::vector<int64_t> layer_window;
  int64_t window(int64_t layer) const { return layer_window.empty() ? 0 : layer_window[static_cast<size_t>(layer)]; }

  // Dense FFN width F (after the auto-adjust rule for lfm2; as-is for lfm2_moe dense layers).
  int64_t ffn_dim = 0;

  // LFM2-MoE only (n_experts == 0 for dense models).
  int64_t n_experts = 0;
  int64_t n_experts_used = 0;
  int64_t moe_ffn_dim = 0;
  int64_t n_dense_layers = 0;
  bool use_expert_bias = true;
  bool norm_topk_prob = true;
  float routed_scaling_factor = 1.0f;

  int32_t bos_token_id = 1;
  std::vector<int32_t> eos_token_ids{2};
  int32_t pad_token_id = 0;

  bool is_moe() const { return n_experts > 0; }
  bool layer_is_moe(int64_t i) const { return is_moe() && i >= n_dense_layers; }
  int64_t n_attention_layers() const;
  int64_t n_conv_layers() const;
  std::string layer_pattern() const;  // one letter per layer: 'A' attention, 'c' conv

  nlohmann::json to_json() const;
};

// Parses and normalises a config.json object. Throws lfm::Error on unknown model types,
// inconsistent sizes or missing required keys.
ModelConfig parse_model_config(const nlohmann::json& j);
ModelConfig load_model_config(const std::string& config_json_path);

// Checks every size and token id of a normalised config against lfm's limits (core/limits.h);
// throws lfm::Error "<origin>: <field> = <value> exceeds lfm's limit of <max>". parse_model_config
// checks each key as it reads it; GGUF metadata goes through this before the config is used.
void check_config_limits(const ModelConfig& c, const std::string& origin);

// The auto-adjust FFN width rule of dense LFM2 (LFM2_SPEC.md §1.3).
int64_t lfm2_effective_ffn_dim(int64_t raw, bool auto_adjust, double multiplier, bool has_multiplier,
                               int64_t multiple_of);

}  // namespace lfm
