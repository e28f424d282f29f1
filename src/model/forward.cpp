#include "model/forward.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "model/state_plan.h"

namespace lfm {

const float* StepOutput::row(size_t item, int64_t i) const { return logits.data() + (first_row[item] + i) * vocab; }

void Forward::observe(int64_t layer, const char* suffix, const float* data, int64_t rows, int64_t cols) {
  if (!observer_) return;
  if (!be_.host_memory()) {  // the observer reads host memory
    observed_.resize(static_cast<size_t>(rows * cols));
    be_.download(observed_.data(), data, observed_.size() * sizeof(float));
    data = observed_.data();
  }
  observer_(layer < 0 ? std::string(suffix) : "model.layers." + std::to_string(layer) + suffix, data, rows, cols);
}

Forward::Forward(const Model& model, Backend& backend, StateCache& cache)
    : model_(model), be_(backend), cache_(cache) {
  LFM_CHECK(model.config().has_lm_head && !model.config().bidirectional, "forward: ", model.config().architecture,
            " has no language-model head: it embeds text (lfm embed, /v1/embeddings) and cannot generate");
  const StateShape want = state_shape(model.config()), have = cache.shape();
  LFM_CHECK(want.attn_layers == have.attn_layers && want.kv_heads == have.kv_heads && want.head_dim == have.head_dim &&
                want.conv_layers == have.conv_layers && want.conv_dim == have.conv_dim &&
                want.conv_kernel == have.conv_kernel,
            "forward: the state cache was sized for another model");
  LFM_CHECK(model.prepared_for() == &backend || (model.prepared_for() == nullptr && backend.host_memory()),
            "forward: the model's weights were prepared for ",
            model.prepared_for() ? model.prepared_for()->name() : "the CPU", ", not for the ", backend.name(),
            " backend (load it with LoadOptions::backend)");
}

int64_t Forward::pad_rows(std::span<const BatchItem> items) const {
  if (cache_.options().pad_rows == 0 || observer_) return -1;
  for (const BatchItem& it : items)
    if (it.tokens.size() != 1 || !it.embeddings.empty()) return -1;
  const int64_t rows = be_.decode_step_rows(T_);
  LFM_CHECK(rows >= T_, "forward: the ", be_.name(), " backend pads a decode step of ", T_, " rows to ", rows);
  // A bucket of this size alone (1, 2, past the largest): one run, as without buckets.
  if (rows == T_ && (T_ == 1 || be_.decode_step_rows(T_ - 1) != T_)) return -1;
  // A cache sized for another backend's pads: the step runs as it is.
  return rows - T_ <= cache_.options().pad_rows ? rows - T_ : -1;
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
    const int64_t chain = it.seq->speculative_tokens() + static_cast<int64_t>(it.tokens.size()) - it.sure;
    LFM_CHECK(!it.speculative || chain <= cache_.options().draft_tokens + 1, "forward: a speculative chain of ", chain,
              " tokens, but the state cache keeps room for ", cache_.options().draft_tokens, " drafted tokens");
    LFM_CHECK(it.speculative || it.seq->speculative_tokens() == 0, "forward: a plain step for a sequence with ",
              it.seq->speculative_tokens(), " speculative tokens not yet kept or dropped");
    LFM_CHECK(it.sure >= 0 && it.sure < static_cast<int64_t>(it.tokens.size()) &&
                  (it.sure == 0 || (it.speculative && it.seq->speculative_tokens() == 0)),
              "forward: ", it.sure, " sure tokens in a step of ", it.tokens.size());
    LFM_CHECK(it.cache_keys.empty() || it.cache_keys.size() == it.tokens.size(), "forward: ", it.cache_keys.size(),
              " cache keys for ", it.tokens.size(), " tokens");
    for (const BatchItem::Embeddings& e : it.embeddings)
      LFM_CHECK(e.data && e.offset >= 0 && e.rows > 0 && e.offset + e.rows <= static_cast<int64_t>(it.tokens.size()),
                "forward: embedding rows [", e.offset, ", ", e.offset + e.rows, ") outside the item's ",
                it.tokens.size(), " tokens");
    LFM_CHECK(!it.skip_logits || (!it.argmax_only && !it.shortlist), "forward: an item without logits cannot want a ",
              it.argmax_only ? "greedy id" : "shortlist");
    T_ += static_cast<int64_t>(it.tokens.size());
  }
  const int64_t pad_or_none = pad_rows(items);
  const int64_t pad = std::max<int64_t>(pad_or_none, 0);
  int64_t need = 0;
  for (const BatchItem& it : items) need += cache_.blocks_needed(*it.seq, static_cast<int64_t>(it.tokens.size()));
  LFM_CHECK(need <= cache_.blocks_available(), "forward: the step needs ", need, " more KV blocks, the pool has ",
            cache_.blocks_available(), " free");
  for (const BatchItem& it : items) cache_.reserve(*it.seq, static_cast<int64_t>(it.tokens.size()));
  runs_.clear();
  int64_t row0 = 0;
  for (const BatchItem& it : items) {
    runs_.push_back(cache_.run(*it.seq, row0, static_cast<int64_t>(it.tokens.size()), it.speculative, it.sure));
    row0 += static_cast<int64_t>(it.tokens.size());
  }

  // Up: token ids and positions (runs' block tables through begin_step).
  std::vector<int32_t> ids;
  std::vector<int64_t> positions;
  ids.reserve(T_ + pad);
  positions.reserve(T_ + pad);
  for (const BatchItem& it : items)
    for (size_t t = 0; t < it.tokens.size(); ++t) {
      positions.push_back(it.seq->n_past() + static_cast<int64_t>(t));
      ids.push_back(it.tokens[t]);
    }
  // Pad rows after the items' (token 0 at position 0, each on its own pad state): the layers then
  // run on as many rows as any decode step of this bucket. Nothing reads what they compute.
  for (int64_t p = 0; p < pad; ++p) {
    runs_.push_back(cache_.pad_run(p, T_ + p));
    ids.push_back(0);
    positions.push_back(0);
  }
  T_ += pad;
  // Ops queued since the last step (the cache zeroing a slot, restoring a snapshot) are a run of
  // their own: the layers' run is then the same for every step of the bucket.
  if (pad_or_none >= 0) be_.launch_queued();
  int32_t* ids_dev = scratch<int32_t>(ids_buf_, T_);
  int64_t* pos_dev = scratch<int64_t>(positions_buf_, T_);
  be_.upload(ids_dev, ids.data(), ids.size() * sizeof(int32_t));
  be_.upload(pos_dev, positions.data(), positions.size() * sizeof(int64_t));
  positions_ = pos_dev;
  be_.begin_step(runs_);

  h_ = scratch<float>(h_buf_, T_ * d);
  a_ = scratch<float>(a_buf_, T_ * d);
  mix_ = scratch<float>(mix_buf_, T_ * d);
  be_.embedding(w.embed, ids_dev, T_, h_);
  int64_t item_row0 = 0;
  for (const BatchItem& it : items) {
    for (const BatchItem::Embeddings& e : it.embeddings)
      be_.upload(h_ + (item_row0 + e.offset) * d, e.data, static_cast<size_t>(e.rows * d) * sizeof(float));
    item_row0 += static_cast<int64_t>(it.tokens.size());
  }

  // Each residual add runs with the RMSNorm after it (Backend::add_rms_norm, or with the branch's
  // last projection too: residual_add), so a_ holds the normed input of the next block when a
  // layer starts.
  be_.rms_norm(h_, w.layers[0].operator_norm.ptr(), T_, d, c.norm_eps, a_);
  for (int64_t i = 0; i < c.n_layers; ++i) {
    const LayerWeights& lw = w.layers[i];
    const float* next_norm = i + 1 < c.n_layers ? w.layers[i + 1].operator_norm.ptr() : nullptr;
    observe(i, ".input", h_, T_, d);
    // h = h + Mixer(RMSNorm(h)); a = RMSNorm(h)
    observe(i, ".operator_norm", a_, T_, d);
    if (lw.kind == LayerKind::Conv)
      conv_mixer(lw, i);
    else
      attention_mixer(lw, i);
    observe(i, ".ffn_norm.input", h_, T_, d);
    observe(i, ".ffn_norm", a_, T_, d);
    // h = h + FFN(a); a = the next layer's RMSNorm(h)
    if (c.layer_is_moe(i))
      moe_ffn(lw.moe, i, next_norm);
    else
      dense_ffn(lw.ffn, i, next_norm);
    observe(i, "", h_, T_, d);
  }
  // A bucketed decode step's layers are one run for every batch size of the bucket (padded or
  // already the bucket's size); the head's ops depend on the items.
  if (pad_or_none >= 0) be_.launch_queued();

  // Final normed hidden states, for the items that want them (before the head reuses a_).
  out.hidden_size = d;
  out.hidden_row.assign(items.size(), -1);
  out.hidden.clear();
  {
    std::vector<int32_t> hrows;
    int64_t offset = 0;
    for (size_t i = 0; i < items.size(); ++i) {
      const BatchItem& it = items[i];
      const int64_t n = static_cast<int64_t>(it.tokens.size());
      if (it.hidden) {
        out.hidden_row[i] = static_cast<int64_t>(hrows.size());
        for (int64_t t = it.all_logits ? 0 : n - 1; t < n; ++t) hrows.push_back(static_cast<int32_t>(offset + t));
      }
      offset += n;
    }
    if (!hrows.empty()) {
      const int64_t Rh = static_cast<int64_t>(hrows.size());
      int32_t* hrows_dev = scratch<int32_t>(rows_buf_, Rh);
      be_.upload(hrows_dev, hrows.data(), hrows.size() * sizeof(int32_t));
      be_.gather_rows(h_, d, hrows_dev, Rh, a_);
      be_.rms_norm(a_, w.final_norm.ptr(), Rh, d, c.norm_eps, a_);
      out.hidden.resize(static_cast<size_t>(Rh * d));
      be_.download(out.hidden.data(), a_, out.hidden.size() * sizeof(float));
    }
  }

  // Final norm and head, only on the rows whose logits (or greedy ids) are wanted.
  out.first_row.clear();
  out.n_rows.clear();
  out.argmax.assign(items.size(), -1);
  std::vector<int32_t> rows;
  int64_t offset = 0;
  for (const BatchItem& it : items) {
    const int64_t n = static_cast<int64_t>(it.tokens.size());
    out.first_row.push_back(static_cast<int64_t>(rows.size()));
    out.n_rows.push_back(it.skip_logits ? 0 : it.all_logits ? n : 1);
    if (!it.skip_logits)
      for (int64_t t = it.all_logits ? 0 : n - 1; t < n; ++t) rows.push_back(static_cast<int32_t>(offset + t));
    offset += n;
  }
  const int64_t R = static_cast<int64_t>(rows.size());
  if (R == 0) {  // nothing but hidden states wanted
    out.vocab = c.vocab_size;
    out.logits.clear();
    out.logits_row.assign(items.size(), -1);
    out.shortlist_of.assign(items.size(), -1);
    for (const BatchItem& it : items) cache_.commit(*it.seq, it.cache_keys.empty() ? it.tokens : it.cache_keys);
    return;
  }
  int32_t* rows_dev = scratch<int32_t>(rows_buf_, R);
  be_.upload(rows_dev, rows.data(), rows.size() * sizeof(int32_t));
  be_.gather_rows(h_, d, rows_dev, R, a_);
  be_.rms_norm(a_, w.final_norm.ptr(), R, d, c.norm_eps, a_);
  observe(-1, "model.embedding_norm", a_, R, d);
  out.vocab = c.vocab_size;
  out.logits.resize(R * c.vocab_size);
  // Down: the wanted rows' logits (a host backend writes them in place), or for argmax_only items
  // their greedy ids.
  float* logits = be_.host_memory() ? out.logits.data() : scratch<float>(logits_buf_, R * c.vocab_size);
  step_logits_ = logits;
  be_.matmul(a_, R, w.lm_head, logits);
  observe(-1, "lm_head", logits, R, c.vocab_size);
  download_choices(items, logits, R, out);

  // Speculative tokens are held tentatively until StateCache::commit_accepted.
  for (const BatchItem& it : items) cache_.commit(*it.seq, it.cache_keys.empty() ? it.tokens : it.cache_keys);
}

void Forward::set_allowed_tokens(std::span<const uint8_t> allowed) {
  const int64_t vocab = model_.config().vocab_size;
  has_allowed_ = !allowed.empty();
  if (!has_allowed_) return;
  LFM_CHECK(static_cast<int64_t>(allowed.size()) >= vocab, "forward: the allowed-token flags cover ", allowed.size(),
            " ids, the vocabulary has ", vocab);
  be_.upload(scratch<uint8_t>(allowed_buf_, vocab), allowed.data(), static_cast<size_t>(vocab));
}

// ShortConv: p = W_in a → (B, C, x); u = B ⊙ x; z = causal depthwise conv(u) with the
// sequence's rolling state; y = C ⊙ z; out = W_out y.
void Forward::conv_mixer(const LayerWeights& lw, int64_t layer) {
  const ModelConfig& c = model_.config();
  const int64_t d = c.hidden_size;
  const ConvWeights& cw = lw.conv;
  float* proj = scratch<float>(proj_buf_, T_ * 3 * d);  // [T, 3d]: B | C | x
  float* u = scratch<float>(tmp_buf_, T_ * d);
  float* z = scratch<float>(tmp2_buf_, T_ * d);  // z, then y
  const ConvPool pool = cache_.conv_pool(model_.state_slot(layer));
  const float* bias = cw.conv_bias.empty() ? nullptr : cw.conv_bias.ptr();
  if (!observer_ && cw.in_bias.empty()) {  // the same bits, in one op
    be_.matmul_gated_short_conv(a_, T_, cw.in_proj, proj, pool, runs_, c.conv_kernel, cw.kernel.ptr(), bias, u, z);
    return residual_add(z, cw.out_proj, &cw.out_bias, lw.ffn_norm.ptr(), layer, ".conv");
  }
  be_.matmul(a_, T_, cw.in_proj, proj);
  if (!cw.in_bias.empty()) be_.add_bias(proj, cw.in_bias.ptr(), T_, 3 * d);
  if (observer_) {  // each product on its own, for the observer
    be_.mul_rows(proj, 3 * d, proj + 2 * d, 3 * d, T_, d, u, d);  // u = B ⊙ x
    observe(layer, ".conv.conv.input", u, T_, d);
    be_.short_conv(u, pool, runs_, c.conv_kernel, cw.kernel.ptr(), bias, z);
    observe(layer, ".conv.conv", z, T_, d);
    be_.mul_rows(proj + d, 3 * d, z, d, T_, d, z, d);  // y = C ⊙ z
    observe(layer, ".conv.out_proj.input", z, T_, d);
  } else {  // the same bits, in one op
    be_.gated_short_conv(proj, pool, runs_, c.conv_kernel, cw.kernel.ptr(), bias, u, z);
  }
  residual_add(z, cw.out_proj, &cw.out_bias, lw.ffn_norm.ptr(), layer, ".conv");
}

// GQA attention: q/k per-head RMSNorm, NeoX RoPE at each token's own position, K/V stored in the
// sequence's cache blocks, causal softmax(q kᵀ / √hd) v, then the output projection.
void Forward::attention_mixer(const LayerWeights& lw, int64_t layer) {
  const ModelConfig& c = model_.config();
  const int64_t H = c.n_heads, G = c.n_kv_heads, hd = c.head_dim;
  const AttentionWeights& aw = lw.attn;
  float* q = scratch<float>(tmp_buf_, T_ * H * hd);
  float* k = scratch<float>(tmp2_buf_, T_ * G * hd);
  float* v = scratch<float>(tmp3_buf_, T_ * G * hd);
  const TensorView* qkv[] = {&aw.q, &aw.k, &aw.v};
  float* qkv_out[] = {q, k, v};
  be_.matmul_shared(a_, T_, qkv, qkv_out);
  observe(layer, ".self_attn.q_proj", q, T_, H * hd);
  observe(layer, ".self_attn.k_proj", k, T_, G * hd);
  observe(layer, ".self_attn.v", v, T_, G * hd);
  // K/V go into the paged cache first; attention then reads every key, this step's too, from it.
  const KvPool pool = cache_.kv_pool(model_.state_slot(layer));
  if (observer_) {  // each step on its own, for the observer
    be_.rms_norm(q, aw.q_norm.ptr(), T_ * H, hd, c.norm_eps, q);
    be_.rms_norm(k, aw.k_norm.ptr(), T_ * G, hd, c.norm_eps, k);
    observe(layer, ".self_attn.q_layernorm", q, T_, H * hd);
    observe(layer, ".self_attn.k_layernorm", k, T_, G * hd);
    be_.rope_neox(q, T_, H, hd, positions_, model_.rope_inv_freq().ptr());
    be_.rope_neox(k, T_, G, hd, positions_, model_.rope_inv_freq().ptr());
    observe(layer, ".self_attn.q_rope", q, T_, H * hd);
    observe(layer, ".self_attn.k_rope", k, T_, G * hd);
    be_.kv_write(pool, runs_, k, v);
  } else {  // the same bits, in one op
    be_.qk_norm_rope_kv_write(q, k, v, aw.q_norm.ptr(), aw.k_norm.ptr(), T_, H, G, hd, c.norm_eps, positions_,
                              model_.rope_inv_freq().ptr(), pool, runs_);
  }
  float* att = scratch<float>(proj_buf_, T_ * H * hd);
  be_.attention(q, pool, runs_, H, 1.0f / std::sqrt(static_cast<float>(hd)), att, c.window(layer));
  observe(layer, ".self_attn.out_proj.input", att, T_, H * hd);
  residual_add(att, aw.out, nullptr, lw.ffn_norm.ptr(), layer, ".self_attn");
}

// SwiGLU on a_: W2 (silu(W1 a) ⊙ W3 a), added into h (residual_add).
void Forward::dense_ffn(const FfnWeights& w, int64_t layer, const float* next_norm) {
  const int64_t F = w.w1.shape[0];
  float* gate = scratch<float>(gate_buf_, T_ * F);
  float* up = scratch<float>(up_buf_, T_ * F);
  be_.matmul_swiglu(a_, T_, w.w1, w.w3, gate, up);
  residual_add(gate, w.w2, nullptr, next_norm, layer, ".feed_forward");
}

// A branch's end: h += y · Wᵀ (+ bias), then a = RMSNorm(h) · norm (norm null: the sum only).
// One op (Backend::matmul_add_rms_norm) unless a bias or the observer wants the branch's output
// (mix_) on its own.
void Forward::residual_add(const float* y, const TensorView& w, const WeightVector* bias, const float* norm,
                           int64_t layer, const char* name) {
  const ModelConfig& c = model_.config();
  const int64_t d = c.hidden_size;
  const bool biased = bias && !bias->empty();
  if (!biased && !observer_) return be_.matmul_add_rms_norm(y, T_, w, mix_, h_, norm, c.norm_eps, a_);
  be_.matmul(y, T_, w, mix_);
  if (biased) be_.add_bias(mix_, bias->ptr(), T_, d);
  observe(layer, name, mix_, T_, d);
  add_mix(norm);
}

// h += mix_, then a = RMSNorm(h) · norm (norm null: the sum only).
void Forward::add_mix(const float* norm) {
  const ModelConfig& c = model_.config();
  const int64_t d = c.hidden_size;
  if (norm) be_.add_rms_norm(h_, mix_, norm, T_, d, c.norm_eps, a_);
  else be_.add(h_, mix_, T_ * d);
}

// Sigmoid-routed MoE (LFM2_SPEC.md §3.7): the expert bias only steers selection; weights come
// from the unbiased scores, renormalised (+1e-6) and scaled (Backend::moe_route). Each token sums
// its experts in ascending expert order, so its result does not depend on which other tokens are
// present. Routing, grouping and the experts' matmuls stay on the backend.
void Forward::moe_ffn(const MoeWeights& w, int64_t layer, const float* next_norm) {
  const ModelConfig& c = model_.config();
  const int64_t rows = T_;
  const int64_t d = c.hidden_size, E = c.n_experts, k = c.n_experts_used;
  float* logits = scratch<float>(moe_logits_buf_, rows * E);
  be_.matmul(a_, rows, w.router, logits);
  observe(layer, ".feed_forward.gate", logits, rows, E);
  int32_t* experts_dev = scratch<int32_t>(moe_experts_buf_, rows * k);
  float* weights_dev = scratch<float>(moe_weights_buf_, rows * k);
  be_.moe_route(logits, rows, E, k, w.expert_bias.empty() ? nullptr : w.expert_bias.ptr(), c.norm_topk_prob,
                c.routed_scaling_factor, experts_dev, weights_dev);
  // The choices grouped by expert on the backend (no round trip to the host): expert e runs on
  // the tokens routed to it, in token order, its rows packed after the previous expert's.
  const int64_t R = rows * k;  // each token's k experts are distinct
  int32_t* first_dev = scratch<int32_t>(moe_first_buf_, E + 1);
  int32_t* index_dev = scratch<int32_t>(moe_index_buf_, R);
  int32_t* src_dev = scratch<int32_t>(moe_src_buf_, R);
  be_.moe_group(experts_dev, rows, k, E, first_dev, index_dev, src_dev);

  // The gathered inputs, then w1/w3 of every expert as one grouped matmul each, SwiGLU, and w2
  // likewise, so a decode step's k experts cost three passes, not 3k.
  const int64_t F = c.moe_ffn_dim;  // every expert's w1/w3 [F, d], w2 [d, F] (checked at load)
  float* in = scratch<float>(moe_in_buf_, R * d);
  float* gate = scratch<float>(gate_buf_, R * F);
  float* up = scratch<float>(up_buf_, R * F);
  float* out = scratch<float>(moe_out_buf_, R * d);
  be_.gather_rows(a_, d, index_dev, R, in);
  moe_w1_.clear(), moe_w3_.clear(), moe_w2_.clear();
  for (const FfnWeights& fw : w.experts) moe_w1_.push_back(&fw.w1), moe_w3_.push_back(&fw.w3), moe_w2_.push_back(&fw.w2);
  be_.moe_matmul(in, first_dev, moe_w1_, R, gate);
  be_.moe_matmul(in, first_dev, moe_w3_, R, up);
  be_.swiglu(gate, up, R * F, gate);
  be_.moe_matmul(gate, first_dev, moe_w2_, R, out);
  // Each token's k outputs weighted into h, and the next norm (one op unless observed).
  if (!observer_)
    return be_.moe_combine_add_rms_norm(out, src_dev, weights_dev, rows, k, d, mix_, h_, next_norm, c.norm_eps, a_);
  be_.moe_combine(out, src_dev, weights_dev, rows, k, d, mix_);
  observe(layer, ".feed_forward", mix_, T_, d);
  add_mix(next_norm);
}

}  // namespace lfm
