#include "model/encoder.h"

#include <cmath>

#include "core/error.h"

namespace lfm {

Encoder::Encoder(const Model& model, Backend& backend) : model_(model), be_(backend) {
  const ModelConfig& c = model.config();
  LFM_CHECK(!c.is_moe(), "encoder: ", c.architecture, " is a mixture of experts; lfm's retrievers are dense");
  LFM_CHECK(model.prepared_for() == &backend || (model.prepared_for() == nullptr && backend.host_memory()),
            "encoder: the model's weights were prepared for ",
            model.prepared_for() ? model.prepared_for()->name() : "the CPU", ", not for the ", backend.name(),
            " backend (load it with LoadOptions::backend)");
}

void Encoder::run(std::span<const EncoderText> texts, EncoderRows rows, const TensorView* head,
                  std::vector<float>& out) {
  const ModelConfig& c = model_.config();
  const ModelWeights& w = model_.weights();
  const int64_t d = c.hidden_size;
  LFM_CHECK(!texts.empty(), "encoder: no texts");
  LFM_CHECK(!head || (head->shape.size() == 2 && head->shape[1] == d), "encoder: the head's shape does not take ",
            d, " inputs");

  // Validate everything first.
  seg_.assign(1, 0);
  key_end_.clear();
  limited_keys_ = false;
  for (const EncoderText& t : texts) {
    const int64_t n = static_cast<int64_t>(t.ids.size());
    LFM_CHECK(n > 0, "encoder: an empty text (it needs at least one token)");
    LFM_CHECK(n <= c.max_position, "encoder: a text of ", n, " tokens is past the model's ", c.max_position,
              " positions");
    for (int32_t id : t.ids)
      LFM_CHECK(id >= 0 && id < c.vocab_size, "encoder: token id ", id, " is outside the vocabulary [0, ",
                c.vocab_size, ")");
    LFM_CHECK(t.keys >= 0 && t.keys <= n, "encoder: ", t.keys, " attention keys for a text of ", n, " tokens");
    limited_keys_ = limited_keys_ || (t.keys > 0 && t.keys < n);
    key_end_.push_back(seg_.back() + (t.keys > 0 ? t.keys : n));
    seg_.push_back(seg_.back() + n);
  }
  T_ = seg_.back();

  // Up: ids and positions (each text from 0).
  std::vector<int32_t> ids;
  std::vector<int64_t> positions;
  ids.reserve(static_cast<size_t>(T_));
  positions.reserve(static_cast<size_t>(T_));
  for (const EncoderText& t : texts)
    for (size_t i = 0; i < t.ids.size(); ++i) {
      ids.push_back(t.ids[i]);
      positions.push_back(static_cast<int64_t>(i));
    }
  int32_t* ids_dev = scratch<int32_t>(ids_buf_, T_);
  int64_t* pos_dev = scratch<int64_t>(positions_buf_, T_);
  be_.upload(ids_dev, ids.data(), ids.size() * sizeof(int32_t));
  be_.upload(pos_dev, positions.data(), positions.size() * sizeof(int64_t));
  positions_ = pos_dev;

  h_ = scratch<float>(h_buf_, T_ * d);
  a_ = scratch<float>(a_buf_, T_ * d);
  mix_ = scratch<float>(mix_buf_, T_ * d);
  be_.embedding(w.embed, ids_dev, T_, h_);
  // As Forward::step: each residual add runs with the RMSNorm after it.
  be_.rms_norm(h_, w.layers[0].operator_norm.ptr(), T_, d, c.norm_eps, a_);
  for (int64_t i = 0; i < c.n_layers; ++i) {
    const LayerWeights& lw = w.layers[static_cast<size_t>(i)];
    if (lw.kind == LayerKind::Conv)
      conv_mixer(lw);
    else
      attention_mixer(lw);
    be_.add_rms_norm(h_, mix_, lw.ffn_norm.ptr(), T_, d, c.norm_eps, a_);
    // SwiGLU: W2 (silu(W1 f) ⊙ W3 f)
    const int64_t F = lw.ffn.w1.shape[0];
    float* gate = scratch<float>(gate_buf_, T_ * F);
    float* up = scratch<float>(up_buf_, T_ * F);
    be_.matmul_swiglu(a_, T_, lw.ffn.w1, lw.ffn.w3, gate, up);
    be_.matmul(gate, T_, lw.ffn.w2, mix_);
    if (i + 1 < c.n_layers)
      be_.add_rms_norm(h_, mix_, w.layers[static_cast<size_t>(i + 1)].operator_norm.ptr(), T_, d, c.norm_eps, a_);
    else
      be_.add(h_, mix_, T_ * d);
  }

  // The wanted rows, the final norm, the head; down.
  std::vector<int32_t> wanted;
  for (size_t s = 0; s + 1 < seg_.size(); ++s) {
    if (rows == EncoderRows::kAll)
      for (int64_t r = seg_[s]; r < seg_[s + 1]; ++r) wanted.push_back(static_cast<int32_t>(r));
    else
      wanted.push_back(static_cast<int32_t>(rows == EncoderRows::kFirst ? seg_[s] : seg_[s + 1] - 1));
  }
  const int64_t R = static_cast<int64_t>(wanted.size());
  int32_t* rows_dev = scratch<int32_t>(rows_buf_, R);
  be_.upload(rows_dev, wanted.data(), wanted.size() * sizeof(int32_t));
  be_.gather_rows(h_, d, rows_dev, R, a_);
  be_.rms_norm(a_, w.final_norm.ptr(), R, d, c.norm_eps, a_);
  const float* result = a_;
  int64_t cols = d;
  if (head) {
    cols = head->shape[0];
    float* projected = scratch<float>(out_buf_, R * cols);
    be_.matmul(a_, R, *head, projected);
    result = projected;
  }
  out.resize(static_cast<size_t>(R * cols));
  be_.download(out.data(), result, out.size() * sizeof(float));
}

// ShortConv without state: p = W_in a → (B, C, x); u = B ⊙ x; z = depthwise conv(u) inside each
// text (centred when bidirectional, causal otherwise); y = C ⊙ z; out = W_out y.
void Encoder::conv_mixer(const LayerWeights& lw) {
  const ModelConfig& c = model_.config();
  const int64_t d = c.hidden_size, K = c.conv_kernel;
  const ConvWeights& cw = lw.conv;
  float* proj = scratch<float>(proj_buf_, T_ * 3 * d);  // [T, 3d]: B | C | x
  be_.matmul(a_, T_, cw.in_proj, proj);
  if (!cw.in_bias.empty()) be_.add_bias(proj, cw.in_bias.ptr(), T_, 3 * d);
  float* u = scratch<float>(tmp_buf_, T_ * d);
  float* z = scratch<float>(tmp2_buf_, T_ * d);
  be_.mul_rows(proj, 3 * d, proj + 2 * d, 3 * d, T_, d, u, d);  // u = B ⊙ x
  be_.segment_conv(u, seg_, d, K, c.bidirectional ? K / 2 : K - 1, cw.kernel.ptr(),
                   cw.conv_bias.empty() ? nullptr : cw.conv_bias.ptr(), z);
  be_.mul_rows(proj + d, 3 * d, z, d, T_, d, z, d);  // y = C ⊙ z
  be_.matmul(z, T_, cw.out_proj, mix_);
  if (!cw.out_bias.empty()) be_.add_bias(mix_, cw.out_bias.ptr(), T_, d);
}

// GQA attention inside each text: q/k per-head RMSNorm, NeoX RoPE at the token's position in its
// text, softmax(q kᵀ / √hd) v over the text's keys (all of them, or those up to the query when
// causal), then the output projection.
void Encoder::attention_mixer(const LayerWeights& lw) {
  const ModelConfig& c = model_.config();
  const int64_t H = c.n_heads, G = c.n_kv_heads, hd = c.head_dim;
  const AttentionWeights& aw = lw.attn;
  float* q = scratch<float>(tmp_buf_, T_ * H * hd);
  float* k = scratch<float>(tmp2_buf_, T_ * G * hd);
  float* v = scratch<float>(tmp3_buf_, T_ * G * hd);
  const TensorView* qkv[] = {&aw.q, &aw.k, &aw.v};
  float* qkv_out[] = {q, k, v};
  be_.matmul_shared(a_, T_, qkv, qkv_out);
  be_.qk_norm_rope(q, k, aw.q_norm.ptr(), aw.k_norm.ptr(), T_, H, G, hd, c.norm_eps, positions_,
                   model_.rope_inv_freq().ptr());
  float* att = scratch<float>(proj_buf_, T_ * H * hd);
  SegmentAttention shape{seg_, {}, H, G, hd, 1.0f / std::sqrt(static_cast<float>(hd)), !c.bidirectional};
  if (limited_keys_) shape.key_end = key_end_;
  be_.segment_attention(q, k, v, shape, att);
  be_.matmul(att, T_, aw.out, mix_);
}

}  // namespace lfm
