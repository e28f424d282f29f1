#include "model/forward.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/error.h"
#include "model/state_plan.h"

namespace lfm {

const float* StepOutput::row(size_t item, int64_t i) const { return logits.data() + (first_row[item] + i) * vocab; }

void Forward::observe(int64_t layer, const char* suffix, const float* data, int64_t rows, int64_t cols) {
  if (!observer_) return;
  observer_(layer < 0 ? std::string(suffix) : "model.layers." + std::to_string(layer) + suffix, data, rows, cols);
}

Forward::Forward(const Model& model, Backend& backend, StateCache& cache)
    : model_(model), be_(backend), cache_(cache) {
  const StateShape want = state_shape(model.config()), have = cache.shape();
  LFM_CHECK(want.attn_layers == have.attn_layers && want.kv_heads == have.kv_heads && want.head_dim == have.head_dim &&
                want.conv_layers == have.conv_layers && want.conv_dim == have.conv_dim &&
                want.conv_kernel == have.conv_kernel,
            "forward: the state cache was sized for another model");
}

void Forward::step(std::span<const BatchItem> items, StepOutput& out) {
  const ModelConfig& c = model_.config();
  const ModelWeights& w = model_.weights();
  const int64_t d = c.hidden_size;

  // Validate everything before touching any state.
  T_ = 0;
  for (const BatchItem& it : items) {
    LFM_CHECK(it.seq, "forward: batch item without a sequence");
    LFM_CHECK(!it.tokens.empty(), "forward: batch item with no tokens");
    LFM_CHECK(it.seq->n_past() + static_cast<int64_t>(it.tokens.size()) <= it.seq->max_tokens(),
              "forward: sequence would reach ", it.seq->n_past() + static_cast<int64_t>(it.tokens.size()),
              " tokens, past the context size ", it.seq->max_tokens());
    for (int32_t t : it.tokens)
      LFM_CHECK(t >= 0 && t < c.vocab_size, "forward: token id ", t, " is outside the vocabulary [0, ", c.vocab_size,
                ")");
    for (const BatchItem& other : items)
      LFM_CHECK(&other == &it || other.seq != it.seq, "forward: the same sequence appears twice in one batch");
    T_ += static_cast<int64_t>(it.tokens.size());
  }
  int64_t need = 0;
  for (const BatchItem& it : items) need += cache_.blocks_needed(*it.seq, static_cast<int64_t>(it.tokens.size()));
  LFM_CHECK(need <= cache_.blocks_available(), "forward: the step needs ", need, " more KV blocks, the pool has ",
            cache_.blocks_available(), " free");
  for (const BatchItem& it : items) cache_.reserve(*it.seq, static_cast<int64_t>(it.tokens.size()));
  runs_.clear();
  int64_t row0 = 0;
  for (const BatchItem& it : items) {
    runs_.push_back(cache_.run(*it.seq, row0, static_cast<int64_t>(it.tokens.size())));
    row0 += static_cast<int64_t>(it.tokens.size());
  }

  positions_.resize(T_);
  std::vector<int32_t> ids;
  ids.reserve(T_);
  for (const BatchItem& it : items)
    for (size_t t = 0; t < it.tokens.size(); ++t) {
      positions_[ids.size()] = it.seq->n_past() + static_cast<int64_t>(t);
      ids.push_back(it.tokens[t]);
    }

  h_.resize(T_ * d);
  a_.resize(T_ * d);
  mix_.resize(T_ * d);
  be_.embedding(w.embed, ids.data(), T_, h_.data());

  for (int64_t i = 0; i < c.n_layers; ++i) {
    const LayerWeights& lw = w.layers[i];
    observe(i, ".input", h_.data(), T_, d);
    // h = h + Mixer(RMSNorm(h))
    be_.rms_norm(h_.data(), lw.operator_norm.data(), T_, d, c.norm_eps, a_.data());
    observe(i, ".operator_norm", a_.data(), T_, d);
    if (lw.kind == LayerKind::Conv)
      conv_mixer(lw, i);
    else
      attention_mixer(lw, i);
    observe(i, lw.kind == LayerKind::Conv ? ".conv" : ".self_attn", mix_.data(), T_, d);
    be_.add(h_.data(), mix_.data(), T_ * d);
    observe(i, ".ffn_norm.input", h_.data(), T_, d);
    // h = h + FFN(RMSNorm(h))
    be_.rms_norm(h_.data(), lw.ffn_norm.data(), T_, d, c.norm_eps, a_.data());
    observe(i, ".ffn_norm", a_.data(), T_, d);
    current_layer_ = i;
    if (c.layer_is_moe(i))
      moe_ffn(lw.moe, T_);
    else
      dense_ffn(lw.ffn, a_.data(), T_, mix_.data());
    observe(i, ".feed_forward", mix_.data(), T_, d);
    be_.add(h_.data(), mix_.data(), T_ * d);
    observe(i, "", h_.data(), T_, d);
  }

  // Final norm and head, only on the rows whose logits are wanted.
  out.first_row.clear();
  out.n_rows.clear();
  std::vector<int64_t> rows;
  int64_t offset = 0;
  for (const BatchItem& it : items) {
    const int64_t n = static_cast<int64_t>(it.tokens.size());
    out.first_row.push_back(static_cast<int64_t>(rows.size()));
    out.n_rows.push_back(it.all_logits ? n : 1);
    for (int64_t t = it.all_logits ? 0 : n - 1; t < n; ++t) rows.push_back(offset + t);
    offset += n;
  }
  const int64_t R = static_cast<int64_t>(rows.size());
  for (int64_t r = 0; r < R; ++r) std::copy_n(h_.data() + rows[r] * d, d, a_.data() + r * d);
  be_.rms_norm(a_.data(), w.final_norm.data(), R, d, c.norm_eps, a_.data());
  observe(-1, "model.embedding_norm", a_.data(), R, d);
  out.vocab = c.vocab_size;
  out.logits.resize(R * c.vocab_size);
  be_.matmul(a_.data(), R, w.lm_head, out.logits.data());
  observe(-1, "lm_head", out.logits.data(), R, c.vocab_size);

  for (const BatchItem& it : items) cache_.commit(*it.seq, it.tokens);
}

// ShortConv: p = W_in a → (B, C, x); u = B ⊙ x; z = causal depthwise conv(u) with the
// sequence's rolling state; y = C ⊙ z; out = W_out y.
void Forward::conv_mixer(const LayerWeights& lw, int64_t layer) {
  const ModelConfig& c = model_.config();
  const int64_t d = c.hidden_size;
  const ConvWeights& cw = lw.conv;
  proj_.resize(T_ * 3 * d);
  be_.matmul(a_.data(), T_, cw.in_proj, proj_.data());  // [T, 3d]
  if (!cw.in_bias.empty())
    for (int64_t t = 0; t < T_; ++t) be_.add(proj_.data() + t * 3 * d, cw.in_bias.data(), 3 * d);
  tmp_.resize(T_ * d);   // u
  tmp2_.resize(T_ * d);  // z, then y
  for (int64_t t = 0; t < T_; ++t) {
    const float* row = proj_.data() + t * 3 * d;
    be_.mul(row, row + 2 * d, d, tmp_.data() + t * d);  // u = B ⊙ x
  }
  observe(layer, ".conv.conv.input", tmp_.data(), T_, d);
  be_.short_conv(tmp_.data(), cache_.conv_pool(model_.state_slot(layer)), runs_, c.conv_kernel, cw.kernel.data(),
                 cw.conv_bias.empty() ? nullptr : cw.conv_bias.data(), tmp2_.data());
  observe(layer, ".conv.conv", tmp2_.data(), T_, d);
  for (int64_t t = 0; t < T_; ++t)
    be_.mul(proj_.data() + t * 3 * d + d, tmp2_.data() + t * d, d, tmp2_.data() + t * d);  // y = C ⊙ z
  observe(layer, ".conv.out_proj.input", tmp2_.data(), T_, d);
  be_.matmul(tmp2_.data(), T_, cw.out_proj, mix_.data());
  if (!cw.out_bias.empty())
    for (int64_t t = 0; t < T_; ++t) be_.add(mix_.data() + t * d, cw.out_bias.data(), d);
}

// GQA attention: q/k per-head RMSNorm, NeoX RoPE at each token's own position, K/V stored in the
// sequence's cache blocks, causal softmax(q kᵀ / √hd) v, then the output projection.
void Forward::attention_mixer(const LayerWeights& lw, int64_t layer) {
  const ModelConfig& c = model_.config();
  const int64_t H = c.n_heads, G = c.n_kv_heads, hd = c.head_dim;
  const AttentionWeights& aw = lw.attn;
  tmp_.resize(T_ * H * hd);   // q, later the attention output
  tmp2_.resize(T_ * G * hd);  // k
  tmp3_.resize(T_ * G * hd);  // v
  const TensorView* qkv[] = {&aw.q, &aw.k, &aw.v};
  float* qkv_out[] = {tmp_.data(), tmp2_.data(), tmp3_.data()};
  be_.matmul_shared(a_.data(), T_, qkv, qkv_out);
  observe(layer, ".self_attn.q_proj", tmp_.data(), T_, H * hd);
  observe(layer, ".self_attn.k_proj", tmp2_.data(), T_, G * hd);
  observe(layer, ".self_attn.v", tmp3_.data(), T_, G * hd);
  be_.rms_norm(tmp_.data(), aw.q_norm.data(), T_ * H, hd, c.norm_eps, tmp_.data());
  be_.rms_norm(tmp2_.data(), aw.k_norm.data(), T_ * G, hd, c.norm_eps, tmp2_.data());
  observe(layer, ".self_attn.q_layernorm", tmp_.data(), T_, H * hd);
  observe(layer, ".self_attn.k_layernorm", tmp2_.data(), T_, G * hd);
  be_.rope_neox(tmp_.data(), T_, H, hd, positions_.data(), model_.rope_inv_freq().data());
  be_.rope_neox(tmp2_.data(), T_, G, hd, positions_.data(), model_.rope_inv_freq().data());
  observe(layer, ".self_attn.q_rope", tmp_.data(), T_, H * hd);
  observe(layer, ".self_attn.k_rope", tmp2_.data(), T_, G * hd);

  // K/V go into the paged cache first; attention then reads every key, this step's too, from it.
  proj_.resize(T_ * H * hd);
  const KvPool pool = cache_.kv_pool(model_.state_slot(layer));
  be_.kv_write(pool, runs_, tmp2_.data(), tmp3_.data());
  be_.attention(tmp_.data(), pool, runs_, H, 1.0f / std::sqrt(static_cast<float>(hd)), proj_.data());
  observe(layer, ".self_attn.out_proj.input", proj_.data(), T_, H * hd);
  be_.matmul(proj_.data(), T_, aw.out, mix_.data());
}

// SwiGLU: W2 (silu(W1 f) ⊙ W3 f).
void Forward::dense_ffn(const FfnWeights& w, const float* in, int64_t rows, float* out) {
  const int64_t F = w.w1.shape[0];
  ffn_gate_.resize(rows * F);
  ffn_up_.resize(rows * F);
  const TensorView* gate_up[] = {&w.w1, &w.w3};
  float* gate_up_out[] = {ffn_gate_.data(), ffn_up_.data()};
  be_.matmul_shared(in, rows, gate_up, gate_up_out);
  be_.swiglu(ffn_gate_.data(), ffn_up_.data(), rows * F, ffn_gate_.data());
  be_.matmul(ffn_gate_.data(), rows, w.w2, out);
}

// Sigmoid-routed MoE (LFM2_SPEC.md §3.7): the expert bias only steers selection; weights come
// from the unbiased scores, renormalised (+1e-6) and scaled. Each token sums its experts in
// ascending expert order, so its result does not depend on which other tokens are present.
void Forward::moe_ffn(const MoeWeights& w, int64_t rows) {
  const ModelConfig& c = model_.config();
  const int64_t d = c.hidden_size, E = c.n_experts, k = c.n_experts_used;
  std::vector<float> logits(rows * E);
  be_.matmul(a_.data(), rows, w.router, logits.data());
  observe(current_layer_, ".feed_forward.gate", logits.data(), rows, E);
  // Per token: chosen experts (ascending) and their weights.
  std::vector<std::vector<std::pair<int64_t, float>>> chosen(rows);
  std::vector<std::vector<int64_t>> tokens_of(E);
  for (int64_t t = 0; t < rows; ++t) {
    std::vector<float> score(E), sel(E);
    for (int64_t e = 0; e < E; ++e) {
      score[e] = 1.0f / (1.0f + std::exp(-logits[t * E + e]));
      sel[e] = score[e] + (w.expert_bias.empty() ? 0.0f : w.expert_bias[e]);
    }
    std::vector<int64_t> idx(E);
    std::iota(idx.begin(), idx.end(), 0);
    std::stable_sort(idx.begin(), idx.end(), [&](int64_t x, int64_t y) { return sel[x] > sel[y]; });
    idx.resize(k);
    float sum = 0;
    for (int64_t e : idx) sum += score[e];
    for (int64_t e : idx) {
      float wt = score[e];
      if (c.norm_topk_prob) wt /= (sum + 1e-6f);
      chosen[t].push_back({e, wt * c.routed_scaling_factor});
    }
    std::sort(chosen[t].begin(), chosen[t].end());
    for (const auto& [e, wt] : chosen[t]) tokens_of[e].push_back(t);
  }
  // Each expert runs on the tokens routed to it, its rows packed after the previous expert's
  // ([R = rows · k] in all): the inputs gathered, then w1/w3 of every expert as one batch of
  // matmuls, SwiGLU, and w2 likewise, so a decode step's k experts cost two passes, not 2k.
  const int64_t F = c.moe_ffn_dim;  // every expert's w1/w3 [F, d], w2 [d, F] (checked at load)
  std::vector<int64_t> first(E + 1, 0);  // expert e owns rows [first[e], first[e + 1])
  for (int64_t e = 0; e < E; ++e) first[e + 1] = first[e] + static_cast<int64_t>(tokens_of[e].size());
  const int64_t R = first[E];
  moe_in_.resize(R * d);
  ffn_gate_.resize(R * F);
  ffn_up_.resize(R * F);
  moe_out_.resize(R * d);
  std::vector<Backend::MatmulJob> gate_up, down;
  for (int64_t e = 0; e < E; ++e) {
    const int64_t n = first[e + 1] - first[e];
    if (n == 0) continue;
    for (int64_t r = 0; r < n; ++r) std::copy_n(a_.data() + tokens_of[e][r] * d, d, moe_in_.data() + (first[e] + r) * d);
    const FfnWeights& fw = w.experts[e];
    gate_up.push_back({moe_in_.data() + first[e] * d, n, &fw.w1, ffn_gate_.data() + first[e] * F});
    gate_up.push_back({moe_in_.data() + first[e] * d, n, &fw.w3, ffn_up_.data() + first[e] * F});
    down.push_back({ffn_gate_.data() + first[e] * F, n, &fw.w2, moe_out_.data() + first[e] * d});
  }
  be_.matmul_jobs(gate_up);
  be_.swiglu(ffn_gate_.data(), ffn_up_.data(), R * F, ffn_gate_.data());
  be_.matmul_jobs(down);
  std::vector<size_t> cursor(E, 0);
  std::fill(mix_.begin(), mix_.begin() + rows * d, 0.0f);
  for (int64_t t = 0; t < rows; ++t)
    for (const auto& [e, wt] : chosen[t]) {
      const float* src = moe_out_.data() + (first[e] + static_cast<int64_t>(cursor[e]++)) * d;
      float* dst = mix_.data() + t * d;
      for (int64_t i = 0; i < d; ++i) dst[i] += wt * src[i];
    }
}

}  // namespace lfm
