#include "model/weights.h"

#include <set>

#include "core/error.h"
#include "kernels/dequant.h"

namespace lfm {

namespace {

std::string layer_prefix(int64_t i) { return "model.layers." + std::to_string(i) + "."; }

class Binder {
 public:
  Binder(const TensorSource& src) : src_(src) {}

  const TensorView& matrix(const std::string& name, std::vector<int64_t> shape) {
    const TensorView& v = get(name, shape);
    LFM_CHECK(dtype_decodable(v.dtype), "weights: tensor '", name, "' has type ", dtype_name(v.dtype),
              " which no kernel supports");
    return v;
  }

  // Small tensors are decoded to float32; `shape` may differ from the stored one only by
  // size-1 dimensions (e.g. the conv kernel [d, 1, K] is read as [d, K]).
  std::vector<float> vec(const std::string& name, std::vector<int64_t> shape) {
    const TensorView& v = get(name, shape);
    std::vector<float> out(static_cast<size_t>(v.numel()));
    dequantize_row(v.dtype, v.data, out.data(), v.numel());
    return out;
  }

  bool has(const std::string& name) const { return src_.find(name) != nullptr; }

  void check_no_extra() const {
    for (const auto& n : src_.names())
      LFM_CHECK(used_.count(n), "weights: unexpected tensor '", n, "' in ", src_.origin(),
                " (not part of this model configuration)");
  }

 private:
  const TensorView& get(const std::string& name, const std::vector<int64_t>& shape) {
    const TensorView* v = src_.find(name);
    LFM_CHECK(v, "weights: missing tensor '", name, "' (expected shape ", shape_str(shape), ") in ", src_.origin());
    LFM_CHECK(squeeze(v->shape) == squeeze(shape), "weights: tensor '", name, "' has shape ", shape_str(v->shape),
              ", expected ", shape_str(shape));
    used_.insert(name);
    return *v;
  }
  static std::vector<int64_t> squeeze(const std::vector<int64_t>& s) {
    std::vector<int64_t> out;
    for (int64_t d : s)
      if (d != 1) out.push_back(d);
    return out;
  }

  const TensorSource& src_;
  std::set<std::string> used_;
};

FfnWeights bind_ffn(Binder& b, const std::string& p, int64_t d, int64_t f) {
  FfnWeights w;
  w.w1 = b.matrix(p + "w1.weight", {f, d});
  w.w3 = b.matrix(p + "w3.weight", {f, d});
  w.w2 = b.matrix(p + "w2.weight", {d, f});
  return w;
}

}  // namespace

std::vector<ExpectedTensor> expected_tensors(const ModelConfig& c, bool include_lm_head) {
  const int64_t d = c.hidden_size, hd = c.head_dim, K = c.conv_kernel;
  std::vector<ExpectedTensor> t;
  t.push_back({"model.embed_tokens.weight", {c.vocab_size, d}, true});
  t.push_back({"model.embedding_norm.weight", {d}, false});
  if (include_lm_head) t.push_back({"lm_head.weight", {c.vocab_size, d}, true});
  for (int64_t i = 0; i < c.n_layers; ++i) {
    const std::string p = layer_prefix(i);
    t.push_back({p + "operator_norm.weight", {d}, false});
    t.push_back({p + "ffn_norm.weight", {d}, false});
    if (c.layer_kinds[i] == LayerKind::Conv) {
      t.push_back({p + "conv.in_proj.weight", {3 * d, d}, true});
      t.push_back({p + "conv.conv.weight", {d, 1, K}, false});
      t.push_back({p + "conv.out_proj.weight", {d, d}, true});
      if (c.conv_bias) {
        t.push_back({p + "conv.in_proj.bias", {3 * d}, false});
        t.push_back({p + "conv.conv.bias", {d}, false});
        t.push_back({p + "conv.out_proj.bias", {d}, false});
      }
    } else {
      t.push_back({p + "self_attn.q_proj.weight", {c.n_heads * hd, d}, true});
      t.push_back({p + "self_attn.k_proj.weight", {c.n_kv_heads * hd, d}, true});
      t.push_back({p + "self_attn.v_proj.weight", {c.n_kv_heads * hd, d}, true});
      t.push_back({p + "self_attn.out_proj.weight", {d, c.n_heads * hd}, true});
      t.push_back({p + "self_attn.q_layernorm.weight", {hd}, false});
      t.push_back({p + "self_attn.k_layernorm.weight", {hd}, false});
    }
    if (c.layer_is_moe(i)) {
      t.push_back({p + "feed_forward.gate.weight", {c.n_experts, d}, true});
      if (c.use_expert_bias) t.push_back({p + "feed_forward.expert_bias", {c.n_experts}, false});
      for (int64_t e = 0; e < c.n_experts; ++e) {
        const std::string ep = p + "feed_forward.experts." + std::to_string(e) + ".";
        t.push_back({ep + "w1.weight", {c.moe_ffn_dim, d}, true});
        t.push_back({ep + "w3.weight", {c.moe_ffn_dim, d}, true});
        t.push_back({ep + "w2.weight", {d, c.moe_ffn_dim}, true});
      }
    } else {
      t.push_back({p + "feed_forward.w1.weight", {c.ffn_dim, d}, true});
      t.push_back({p + "feed_forward.w3.weight", {c.ffn_dim, d}, true});
      t.push_back({p + "feed_forward.w2.weight", {d, c.ffn_dim}, true});
    }
  }
  return t;
}

ModelWeights bind_weights(const ModelConfig& c, const TensorSource& src) {
  Binder b(src);
  const int64_t d = c.hidden_size, hd = c.head_dim, K = c.conv_kernel;
  ModelWeights w;
  w.embed = b.matrix("model.embed_tokens.weight", {c.vocab_size, d});
  w.final_norm = b.vec("model.embedding_norm.weight", {d});
  if (!c.has_lm_head) {
    w.lm_head = w.embed;  // never multiplied: a base model's forward ends at the final norm
  } else if (c.tie_embeddings) {
    // Some exports also write the tied head; it is the embedding by definition, so only check it.
    if (b.has("lm_head.weight")) b.matrix("lm_head.weight", {c.vocab_size, d});
    w.lm_head = w.embed;
  } else {
    w.lm_head = b.matrix("lm_head.weight", {c.vocab_size, d});
  }
  w.layers.resize(c.n_layers);
  for (int64_t i = 0; i < c.n_layers; ++i) {
    const std::string p = layer_prefix(i);
    LayerWeights& l = w.layers[i];
    l.kind = c.layer_kinds[i];
    l.operator_norm = b.vec(p + "operator_norm.weight", {d});
    l.ffn_norm = b.vec(p + "ffn_norm.weight", {d});
    if (l.kind == LayerKind::Conv) {
      l.conv.in_proj = b.matrix(p + "conv.in_proj.weight", {3 * d, d});
      l.conv.kernel = b.vec(p + "conv.conv.weight", {d, 1, K});
      l.conv.out_proj = b.matrix(p + "conv.out_proj.weight", {d, d});
      if (c.conv_bias) {
        l.conv.in_bias = b.vec(p + "conv.in_proj.bias", {3 * d});
        l.conv.conv_bias = b.vec(p + "conv.conv.bias", {d});
        l.conv.out_bias = b.vec(p + "conv.out_proj.bias", {d});
      }
    } else {
      l.attn.q = b.matrix(p + "self_attn.q_proj.weight", {c.n_heads * hd, d});
      l.attn.k = b.matrix(p + "self_attn.k_proj.weight", {c.n_kv_heads * hd, d});
      l.attn.v = b.matrix(p + "self_attn.v_proj.weight", {c.n_kv_heads * hd, d});
      l.attn.out = b.matrix(p + "self_attn.out_proj.weight", {d, c.n_heads * hd});
      l.attn.q_norm = b.vec(p + "self_attn.q_layernorm.weight", {hd});
      l.attn.k_norm = b.vec(p + "self_attn.k_layernorm.weight", {hd});
    }
    if (c.layer_is_moe(i)) {
      l.moe.router = b.matrix(p + "feed_forward.gate.weight", {c.n_experts, d});
      if (c.use_expert_bias) {
        // Hugging Face stores the buffer without a suffix; accept the ".weight" spelling too.
        const std::string bias = p + "feed_forward.expert_bias";
        l.moe.expert_bias = b.vec(b.has(bias) ? bias : bias + ".weight", {c.n_experts});
      }
      for (int64_t e = 0; e < c.n_experts; ++e)
        l.moe.experts.push_back(bind_ffn(b, p + "feed_forward.experts." + std::to_string(e) + ".", d, c.moe_ffn_dim));
    } else {
      l.ffn = bind_ffn(b, p + "feed_forward.", d, c.ffn_dim);
    }
  }
  b.check_no_extra();
  return w;
}

}  // namespace lfm
