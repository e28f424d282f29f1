// The GGUF side of loading that needs no kernels: the normalised ModelConfig read from lfm2.* /
// lfm2moe.* metadata and the TensorSource naming GGUF tensors the Hugging Face way. Kept apart
// from load_gguf_model (gguf_model.cpp) so the fuzzing build, which leaves kernels out, can run
// a hostile GGUF through the same config and tensor mapping the loader uses.
#include <algorithm>

#include "core/error.h"
#include "core/limits.h"
#include "model/gguf_model.h"
#include "model/gguf_names.h"
#include "model/gguf_retrieval.h"

namespace lfm {

namespace gguf {

GgufTensorSource::GgufTensorSource(std::shared_ptr<const GgufFile> file) : file_(std::move(file)) {
  origin_ = file_->path();
  for (const TensorInfo& t : file_->tensors()) {
    // A retriever's Dense projection is the head's, not the backbone's (gguf_dense_source).
    if (t.name == kDenseTensor || t.name == kDenseBias) continue;
    const std::optional<MappedName> m = hf_name_from_gguf(t.name);
    LFM_CHECK(m, "gguf: '", origin_, "': tensor '", t.name, "' is not part of the LFM2 GGUF layout");
    std::vector<int64_t> shape(t.ne.rbegin(), t.ne.rend());  // ggml {ne0, ne1, ...} → PyTorch [..., ne1, ne0]
    if (!m->experts) {
      LFM_CHECK(!tensors_.count(m->hf), "gguf: '", origin_, "': two tensors map to '", m->hf, "'");
      tensors_.emplace(m->hf, TensorView{t.dtype, std::move(shape), t.data, t.nbytes});
      continue;
    }
    LFM_CHECK(t.ne.size() == 3, "gguf: '", origin_, "': expert tensor '", t.name,
              "' must be 3-D {in, out, experts}, has ", t.ne.size(), " dims");
    const int64_t n_expert = t.ne[2];
    // One view per expert: bound the count before creating them (a hostile ne[2] of 2^30 would
    // otherwise fill memory with views).
    LFM_CHECK(n_expert >= 1 && n_expert <= limits::kMaxExperts, "gguf: '", origin_, "': expert tensor '", t.name,
              "' holds ", n_expert, " experts (lfm's limit is ", limits::kMaxExperts, ")");
    const size_t per_expert = t.nbytes / static_cast<size_t>(n_expert);
    for (int64_t e = 0; e < n_expert; ++e) {
      const std::string name = expert_name(m->hf, e);
      LFM_CHECK(!tensors_.count(name), "gguf: '", origin_, "': two tensors map to '", name, "'");
      tensors_.emplace(name, TensorView{t.dtype, {t.ne[1], t.ne[0]}, t.data + e * per_expert, per_expert});
    }
  }
}

namespace {

class Meta {
 public:
  Meta(const GgufFile& f, std::string arch) : f_(f), arch_(std::move(arch)) {}
  const Value* get(const std::string& key) const { return f_.find(arch_ + "." + key); }
  const Value& need(const std::string& key) const {
    const Value* v = get(key);
    LFM_CHECK(v, "gguf: '", f_.path(), "' lacks required metadata '", arch_, ".", key, "'");
    return *v;
  }
  int64_t integer(const std::string& key) const { return need(key).as_int(arch_ + "." + key); }
  int64_t integer(const std::string& key, int64_t def) const {
    const Value* v = get(key);
    return v ? v->as_int(arch_ + "." + key) : def;
  }
  double number(const std::string& key, double def) const {
    const Value* v = get(key);
    return v ? v->as_double(arch_ + "." + key) : def;
  }
  // A per-layer value: an array of n entries, or a scalar meaning the same for every layer.
  std::vector<int64_t> per_layer(const std::string& key, int64_t n) const {
    const Value& v = need(key);
    const std::string what = arch_ + "." + key;
    if (v.type != ValueType::ARRAY) return std::vector<int64_t>(static_cast<size_t>(n), v.as_int(what));
    LFM_CHECK(static_cast<int64_t>(v.arr.size()) == n, "gguf: '", what, "' has ", v.arr.size(), " entries but ", arch_,
              ".block_count is ", n);
    std::vector<int64_t> out;
    for (const Value& x : v.arr) out.push_back(x.as_int(what));
    return out;
  }

 private:
  const GgufFile& f_;
  std::string arch_;
};

void positive(int64_t v, const char* what) { LFM_CHECK(v > 0, "gguf: ", what, " must be positive, got ", v); }

}  // namespace

namespace {

ModelConfig config_from_metadata(const GgufFile& f) {
  const Value* av = f.find("general.architecture");
  LFM_CHECK(av, "gguf: '", f.path(), "' lacks general.architecture");
  const std::string arch = av->as_string("general.architecture");
  LFM_CHECK(arch == "lfm2" || arch == "lfm2moe" || arch == "lfm2-bidir", "gguf: '", f.path(), "' has architecture '",
            arch, "' (lfm supports 'lfm2', 'lfm2moe' and 'lfm2-bidir')");
  const bool moe = arch == "lfm2moe";
  // `lfm2-bidir` (LiquidAI's GGUFs of LFM2.5-Embedding and LFM2.5-ColBERT, from a llama.cpp fork)
  // is `lfm2` under its own key prefix, bidirectional unless `lfm2-bidir.attention.causal` says
  // otherwise; upstream llama.cpp writes `lfm2` with attention.causal = false instead.
  const bool bidir_arch = arch == "lfm2-bidir";
  Meta m(f, arch);
  ModelConfig c;
  c.model_type = moe ? "lfm2_moe" : "lfm2";
  c.architecture = moe ? "Lfm2MoeForCausalLM" : "Lfm2ForCausalLM";
  // A retriever (llama.cpp's converter keeps the architecture `lfm2` for Lfm2Model and
  // Lfm2BidirectionalModel) is a base model: hidden states, no LM head.
  if (gguf_is_retriever(f, arch)) {
    const Value* causal = f.find(arch + ".attention.causal");
    c.bidirectional = causal ? !causal->as_bool(arch + ".attention.causal") : bidir_arch;
    LFM_CHECK(!(moe && c.bidirectional), "gguf: '", f.path(), "': ", arch,
              ".attention.causal = false: a bidirectional LFM2-MoE is not supported");
    c.has_lm_head = false;
    c.architecture = c.bidirectional ? "Lfm2BidirectionalModel" : moe ? "Lfm2MoeModel" : "Lfm2Model";
    LFM_CHECK(!f.find_tensor("output.weight"), "gguf: '", f.path(), "' is a retriever (no LM head) but has tensor 'output.weight'");
  }
  if (const Value* ft = f.find("general.file_type")) {
    std::string n = file_type_name(ft->as_int("general.file_type"));
    std::transform(n.begin(), n.end(), n.begin(), [](unsigned char ch) { return std::tolower(ch); });
    c.dtype = n == "f32" ? "float32" : n == "f16" ? "float16" : n == "bf16" ? "bfloat16" : n;
  } else {
    c.dtype = "unknown";
  }

  c.hidden_size = m.integer("embedding_length");
  c.n_layers = m.integer("block_count");
  positive(c.hidden_size, "embedding_length");
  positive(c.n_layers, "block_count");
  LFM_CHECK(c.n_layers <= limits::kMaxLayers, "gguf: '", f.path(), "': ", arch, ".block_count = ", c.n_layers,
            " exceeds lfm's limit of ", limits::kMaxLayers);
  LFM_CHECK(c.hidden_size <= limits::kMaxHiddenSize, "gguf: '", f.path(), "': ", arch, ".embedding_length = ",
            c.hidden_size, " exceeds lfm's limit of ", limits::kMaxHiddenSize);
  const std::vector<int64_t> heads = m.per_layer("attention.head_count", c.n_layers);
  c.n_heads = *std::max_element(heads.begin(), heads.end());
  positive(c.n_heads, "attention.head_count");
  // Per-layer KV heads: 0 marks a conv (short-convolution) layer (LFM2_SPEC §1.4).
  const std::vector<int64_t> kv = m.per_layer("attention.head_count_kv", c.n_layers);
  c.n_kv_heads = 0;
  for (int64_t i = 0; i < c.n_layers; ++i) {
    LFM_CHECK(kv[i] >= 0, "gguf: attention.head_count_kv[", i, "] is negative");
    c.layer_kinds.push_back(kv[i] == 0 ? LayerKind::Conv : LayerKind::Attention);
    if (kv[i] == 0) continue;
    LFM_CHECK(c.n_kv_heads == 0 || c.n_kv_heads == kv[i], "gguf: attention layers have different KV head counts (",
              c.n_kv_heads, " and ", kv[i], "), which LFM2 does not use");
    c.n_kv_heads = kv[i];
  }
  if (c.n_kv_heads == 0) c.n_kv_heads = c.n_heads;  // no attention layer: any valid value
  LFM_CHECK(c.n_heads % c.n_kv_heads == 0, "gguf: head_count ", c.n_heads, " is not a multiple of head_count_kv ",
            c.n_kv_heads);
  c.head_dim = m.integer("attention.key_length", 0);
  if (c.head_dim == 0) {
    LFM_CHECK(c.hidden_size % c.n_heads == 0, "gguf: embedding_length ", c.hidden_size,
              " is not divisible by head_count ", c.n_heads, " and attention.key_length is absent");
    c.head_dim = c.hidden_size / c.n_heads;
  }
  positive(c.head_dim, "head dimension");
  LFM_CHECK(c.head_dim % 2 == 0, "gguf: head dimension must be even for RoPE, got ", c.head_dim);

  c.max_position = m.integer("context_length", 128000);
  c.conv_kernel = m.integer("shortconv.l_cache", 3);
  positive(c.conv_kernel, "shortconv.l_cache");
  c.norm_eps = static_cast<float>(m.number("attention.layer_norm_rms_epsilon", 1e-5));
  LFM_CHECK(c.norm_eps > 0, "gguf: layer_norm_rms_epsilon must be positive");
  c.rope_theta = m.number("rope.freq_base", 1e6);
  LFM_CHECK(c.rope_theta > 0, "gguf: rope.freq_base must be positive");

  const TensorInfo* embd = f.find_tensor("token_embd.weight");
  LFM_CHECK(embd && embd->ne.size() == 2, "gguf: '", f.path(), "' lacks a 2-D token_embd.weight");
  c.vocab_size = m.integer("vocab_size", embd->ne[1]);
  LFM_CHECK(c.vocab_size == embd->ne[1], "gguf: ", arch, ".vocab_size ", c.vocab_size, " differs from token_embd rows ",
            embd->ne[1]);
  c.tie_embeddings = f.find_tensor("output.weight") == nullptr;
  c.conv_bias = false;
  for (int64_t i = 0; i < c.n_layers; ++i)
    if (c.layer_kinds[i] == LayerKind::Conv) {
      c.conv_bias = f.find_tensor("blk." + std::to_string(i) + ".shortconv.in_proj.bias") != nullptr;
      break;
    }

  // feed_forward_length: dense LFM2 stores the effective width; MoE stores the dense layers' width.
  if (m.get("feed_forward_length")) {
    const std::vector<int64_t> ff = m.per_layer("feed_forward_length", c.n_layers);
    c.ffn_dim = *std::max_element(ff.begin(), ff.end());
  }
  if (moe) {
    c.n_experts = m.integer("expert_count");
    c.n_experts_used = m.integer("expert_used_count");
    c.moe_ffn_dim = m.integer("expert_feed_forward_length");
    c.n_dense_layers = m.integer("leading_dense_block_count", 0);
    positive(c.n_experts, "expert_count");
    positive(c.n_experts_used, "expert_used_count");
    positive(c.moe_ffn_dim, "expert_feed_forward_length");
    LFM_CHECK(c.n_experts_used <= c.n_experts, "gguf: expert_used_count ", c.n_experts_used, " exceeds expert_count ",
              c.n_experts);
    LFM_CHECK(c.n_dense_layers >= 0 && c.n_dense_layers <= c.n_layers, "gguf: leading_dense_block_count ",
              c.n_dense_layers, " is outside [0, ", c.n_layers, "]");
    const int64_t gating = m.integer("expert_gating_func", 2);
    LFM_CHECK(gating == 2, "gguf: expert_gating_func ", gating, " is not sigmoid (2), which LFM2-MoE uses");
    c.use_expert_bias = false;
    for (int64_t i = c.n_dense_layers; i < c.n_layers; ++i) {
      c.use_expert_bias = f.find_tensor("blk." + std::to_string(i) + ".exp_probs_b.bias") != nullptr;
      break;
    }
    if (const Value* v = m.get("expert_weights_norm")) c.norm_topk_prob = v->as_bool(arch + ".expert_weights_norm");
    c.routed_scaling_factor = static_cast<float>(m.number("expert_weights_scale", 1.0));
    if (c.routed_scaling_factor == 0.0f) c.routed_scaling_factor = 1.0f;     // llama.cpp writes 0 for "unset"
    if (c.ffn_dim == 0 && c.n_dense_layers == 0) c.ffn_dim = c.moe_ffn_dim;  // unused: no dense layer
  }
  LFM_CHECK(c.ffn_dim > 0, "gguf: '", f.path(), "' lacks ", arch, ".feed_forward_length");

  // Token ids are range-checked as int64 before they become int32 (never silently cut);
  // llama.cpp writes -1 / UINT32_MAX for "none", kept as -1.
  auto token_id = [&](const Value& v, const char* key) {
    const int64_t id = v.as_int(key);
    if (id == -1 || id == 0xffffffffLL) return int32_t{-1};
    LFM_CHECK(id >= 0 && id < limits::kMaxVocabSize, "gguf: '", f.path(), "': ", key, " = ", id, " is outside [0, ",
              limits::kMaxVocabSize, ")");
    return static_cast<int32_t>(id);
  };
  if (const Value* v = f.find("tokenizer.ggml.bos_token_id")) c.bos_token_id = token_id(*v, "tokenizer.ggml.bos_token_id");
  if (const Value* v = f.find("tokenizer.ggml.padding_token_id"))
    c.pad_token_id = token_id(*v, "tokenizer.ggml.padding_token_id");
  if (const Value* v = f.find("tokenizer.ggml.eos_token_id")) {
    c.eos_token_ids = {token_id(*v, "tokenizer.ggml.eos_token_id")};
    if (const Value* t = f.find("tokenizer.ggml.eot_token_id")) {
      const int32_t eot = token_id(*t, "tokenizer.ggml.eot_token_id");
      if (eot != c.eos_token_ids[0]) c.eos_token_ids.push_back(eot);
    }
  }
  check_config_limits(c, "gguf: '" + f.path() + "'");
  return c;
}

}  // namespace

ModelConfig config_from_gguf(const GgufFile& f) {
  try {
    return config_from_metadata(f);
  } catch (const Error& e) {
    // Value accessors name only the key; say which file it came from.
    const std::string msg = e.what();
    if (msg.find(f.path()) != std::string::npos) throw;
    fail(msg, " (in '", f.path(), "')");
  }
}

}  // namespace gguf
}  // namespace lfm
