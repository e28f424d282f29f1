#include "model/gguf_names.h"

#include <charconv>
#include <string_view>

namespace lfm::gguf {

namespace {

struct Pair {
  const char* hf;
  const char* gguf;
};

constexpr Pair kGlobal[] = {
    {"model.embed_tokens.weight", "token_embd.weight"},
    {"model.embedding_norm.weight", "token_embd_norm.weight"},  // the FINAL norm (llama.cpp's output norm)
    {"lm_head.weight", "output.weight"},
};

// Per-layer suffixes: HF "model.layers.N.<hf>" ↔ GGUF "blk.N.<gguf>".
constexpr Pair kLayer[] = {
    {"operator_norm.weight", "attn_norm.weight"},
    {"ffn_norm.weight", "ffn_norm.weight"},
    {"feed_forward.w1.weight", "ffn_gate.weight"},
    {"feed_forward.w3.weight", "ffn_up.weight"},
    {"feed_forward.w2.weight", "ffn_down.weight"},
    {"self_attn.q_proj.weight", "attn_q.weight"},
    {"self_attn.k_proj.weight", "attn_k.weight"},
    {"self_attn.v_proj.weight", "attn_v.weight"},
    {"self_attn.out_proj.weight", "attn_output.weight"},
    {"self_attn.q_layernorm.weight", "attn_q_norm.weight"},
    {"self_attn.k_layernorm.weight", "attn_k_norm.weight"},
    {"conv.in_proj.weight", "shortconv.in_proj.weight"},
    {"conv.in_proj.bias", "shortconv.in_proj.bias"},
    {"conv.conv.weight", "shortconv.conv.weight"},
    {"conv.conv.bias", "shortconv.conv.bias"},
    {"conv.out_proj.weight", "shortconv.out_proj.weight"},
    {"conv.out_proj.bias", "shortconv.out_proj.bias"},
    {"feed_forward.gate.weight", "ffn_gate_inp.weight"},
    {"feed_forward.expert_bias", "exp_probs_b.bias"},
};

// Stacked experts: GGUF "blk.N.<gguf>" ↔ HF "model.layers.N.feed_forward.experts.E.<hf>".
constexpr Pair kExperts[] = {
    {"w1.weight", "ffn_gate_exps.weight"},
    {"w3.weight", "ffn_up_exps.weight"},
    {"w2.weight", "ffn_down_exps.weight"},
};

// Parses a decimal index at the start of s followed by '.'; returns chars consumed or 0.
size_t parse_index(std::string_view s, int64_t& out) {
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  if (ec != std::errc() || p == s.data() || p == s.data() + s.size() || *p != '.' || out < 0) return 0;
  return static_cast<size_t>(p - s.data()) + 1;
}

}  // namespace

std::optional<MappedName> hf_name_from_gguf(const std::string& name) {
  for (const auto& g : kGlobal)
    if (name == g.gguf) return MappedName{g.hf, -1, false};
  if (name == "output_norm.weight") return MappedName{"model.embedding_norm.weight", -1, false};  // generic spelling
  std::string_view s(name);
  if (s.substr(0, 4) != "blk.") return std::nullopt;
  int64_t layer = 0;
  const size_t used = parse_index(s.substr(4), layer);
  if (!used) return std::nullopt;
  const std::string_view rest = s.substr(4 + used);
  const std::string prefix = "model.layers." + std::to_string(layer) + ".";
  for (const auto& p : kLayer)
    if (rest == p.gguf) return MappedName{prefix + p.hf, layer, false};
  for (const auto& p : kExperts)
    if (rest == p.gguf) return MappedName{prefix + "feed_forward.experts.{e}." + p.hf, layer, true};
  return std::nullopt;
}

std::optional<std::string> gguf_name_from_hf(const std::string& name, int64_t* expert) {
  for (const auto& g : kGlobal)
    if (name == g.hf) return std::string(g.gguf);
  std::string_view s(name);
  constexpr std::string_view kPrefix = "model.layers.";
  if (s.substr(0, kPrefix.size()) != kPrefix) return std::nullopt;
  int64_t layer = 0;
  const size_t used = parse_index(s.substr(kPrefix.size()), layer);
  if (!used) return std::nullopt;
  std::string_view rest = s.substr(kPrefix.size() + used);
  const std::string prefix = "blk." + std::to_string(layer) + ".";
  for (const auto& p : kLayer)
    if (rest == p.hf) return prefix + p.gguf;
  if (rest == "feed_forward.expert_bias.weight") return prefix + "exp_probs_b.bias";  // alternative HF spelling
  constexpr std::string_view kExp = "feed_forward.experts.";
  if (rest.substr(0, kExp.size()) != kExp) return std::nullopt;
  int64_t e = 0;
  const size_t eused = parse_index(rest.substr(kExp.size()), e);
  if (!eused) return std::nullopt;
  rest = rest.substr(kExp.size() + eused);
  for (const auto& p : kExperts)
    if (rest == p.hf) {
      if (expert) *expert = e;
      return prefix + p.gguf;
    }
  return std::nullopt;
}

std::string expert_name(const std::string& pattern, int64_t e) {
  std::string out = pattern;
  const size_t at = out.find("{e}");
  if (at != std::string::npos) out.replace(at, 3, std::to_string(e));
  return out;
}

}  // namespace lfm::gguf
