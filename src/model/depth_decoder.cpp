// DepthDecoder (model/speech_out.h): the depth transformer's per-codebook steps for n frames at
// once. Step c of every row runs together: one matmul per weight for all rows, so many speaking
// streams share each pass over the depth weights.
//
// Keys and values: step c's rows are written at rows [c·n, (c+1)·n) of a per-layer store
// [codebooks · n, kv], codebook-major, so the projection writes them in place. Attention then sees
// each row's own steps 0..c as one segment: the keys are gathered into [n · (c+1), kv] (row i's
// steps contiguous) and the queries into the same layout (row i's query repeated: a causal segment's
// last row attends to all of its keys, and only that row is kept), so the backend's
// segment_attention computes exactly softmax(q kᵀ / √hd) v over the row's own steps.
#include <cmath>
#include <numeric>

#include "core/error.h"
#include "model/speech_out.h"
#include "model/speech_out_weights.h"

namespace lfm {

DepthDecoder::DepthDecoder(const SpeechOutModel& model, Backend& be) : m_(model), be_(be) {}
DepthDecoder::~DepthDecoder() = default;

void DepthDecoder::run(const float* hidden, int64_t n, const Choose& choose, int32_t* codes) {
  if (n <= 0) return;
  const SpeechOutConfig& c = m_.config();
  const SpeechOutModel::Weights& w = *m_.w_;
  const int64_t C = c.codebooks, V = c.audio_vocab, D = c.text_hidden, dim = c.dim;
  const int64_t H = c.heads, G = c.kv_heads, hd = c.head_dim(), kv = G * hd, F = c.ffn, L = c.layers;
  const float eps = static_cast<float>(c.norm_eps);

  // depth_linear: every codebook's input, [n, C·dim] = [n·C, dim] (row i·C + c).
  float* h = scratch<float>(hidden_buf_, n * D);
  be_.upload(h, hidden, static_cast<size_t>(n * D) * sizeof(float));
  float* in = scratch<float>(in_buf_, n * C * dim);
  be_.matmul(h, n, w.depth_linear, in);
  be_.add_bias(in, w.depth_linear_b.ptr(), n, C * dim);

  float* x = scratch<float>(x_buf_, n * dim);
  float* a = scratch<float>(a_buf_, n * dim);
  float* q = scratch<float>(q_buf_, n * dim);
  float* kstore = scratch<float>(k_buf_, L * C * n * kv);
  float* vstore = scratch<float>(v_buf_, L * C * n * kv);
  float* qs = scratch<float>(qs_buf_, n * C * dim);
  float* ks = scratch<float>(ks_buf_, n * C * kv);
  float* vs = scratch<float>(vs_buf_, n * C * kv);
  float* os = scratch<float>(os_buf_, n * C * dim);
  float* o = scratch<float>(o_buf_, n * dim);
  float* t = scratch<float>(t_buf_, n * dim);
  float* gate = scratch<float>(gate_buf_, n * F);
  float* up = scratch<float>(up_buf_, n * F);
  float* logits = scratch<float>(logits_buf_, n * V);
  int32_t* ids = scratch<int32_t>(ids_buf_, n);
  int64_t* pos = scratch<int64_t>(pos_buf_, n);
  int32_t* idx = scratch<int32_t>(idx_buf_, 2 * n * (C + 1));
  logits_host_.resize(static_cast<size_t>(n * V));
  std::vector<int32_t> host_ids(static_cast<size_t>(n));
  std::vector<int32_t> host_idx(static_cast<size_t>(2 * n * (C + 1)));
  std::vector<int64_t> seg(static_cast<size_t>(n + 1));
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));

  for (int64_t cb = 0; cb < C; ++cb) {
    const int64_t S = cb + 1;  // steps each row attends to
    // x = input cb (+ the embedding of code cb−1).
    for (int64_t i = 0; i < n; ++i) host_idx[static_cast<size_t>(i)] = static_cast<int32_t>(i * C + cb);
    // Gather indices: [0, n) the inputs; [n, n + n·S) the keys (row i's step s at s·n + i); then the
    // queries (row i repeated S times) and the kept outputs (row i's last).
    int32_t* key_idx = host_idx.data() + n;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t s = 0; s < S; ++s) key_idx[i * S + s] = static_cast<int32_t>(s * n + i);
    int32_t* q_idx = key_idx + n * S;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t s = 0; s < S; ++s) q_idx[i * S + s] = static_cast<int32_t>(i);
    int32_t* o_idx = q_idx + n * S;
    for (int64_t i = 0; i < n; ++i) o_idx[i] = static_cast<int32_t>(i * S + cb);
    const int64_t n_idx = n + 2 * n * S + n;
    be_.upload(idx, host_idx.data(), static_cast<size_t>(n_idx) * sizeof(int32_t));
    be_.gather_rows(in, dim, idx, n, x);
    if (cb > 0) {
      be_.upload(ids, host_ids.data(), static_cast<size_t>(n) * sizeof(int32_t));
      be_.embedding(w.codebooks[static_cast<size_t>(cb - 1)].embedding, ids, n, t);
      be_.add(x, t, n * dim);
    }
    std::vector<int64_t> host_pos(static_cast<size_t>(n), cb);
    be_.upload(pos, host_pos.data(), static_cast<size_t>(n) * sizeof(int64_t));
    for (int64_t i = 0; i <= n; ++i) seg[static_cast<size_t>(i)] = i * S;
    SegmentAttention sa;
    sa.seg = seg;
    sa.n_heads = H;
    sa.n_kv_heads = G;
    sa.head_dim = hd;
    sa.scale = scale;
    sa.causal = true;

    for (int64_t l = 0; l < L; ++l) {
      const DepthLayerWeights& lw = w.layers[static_cast<size_t>(l)];
      float* kl = kstore + l * C * n * kv;
      float* vl = vstore + l * C * n * kv;
      float* k_new = kl + cb * n * kv;
      float* v_new = vl + cb * n * kv;
      be_.rms_norm(x, lw.attn_norm.ptr(), n, dim, eps, a);
      const TensorView* qkv[] = {&lw.q, &lw.k, &lw.v};
      float* qkv_out[] = {q, k_new, v_new};
      be_.matmul_shared(a, n, qkv, qkv_out);
      be_.qk_norm_rope(q, k_new, lw.q_norm.ptr(), lw.k_norm.ptr(), n, H, G, hd, eps, pos, w.inv_freq.ptr());
      be_.gather_rows(kl, kv, idx + n, n * S, ks);
      be_.gather_rows(vl, kv, idx + n, n * S, vs);
      be_.gather_rows(q, dim, idx + n + n * S, n * S, qs);
      be_.segment_attention(qs, ks, vs, sa, os);
      be_.gather_rows(os, dim, idx + n + 2 * n * S, n, o);
      be_.matmul(o, n, lw.out, t);
      be_.add(x, t, n * dim);
      be_.rms_norm(x, lw.ffn_norm.ptr(), n, dim, eps, a);
      be_.matmul_swiglu(a, n, lw.w1, lw.w3, gate, up);
      be_.matmul(gate, n, lw.w2, t);
      be_.add(x, t, n * dim);
    }
    // Codebook cb's logits, down to the host for the caller's choice.
    const DepthCodebookWeights& cw = w.codebooks[static_cast<size_t>(cb)];
    be_.rms_norm(x, cw.norm.ptr(), n, dim, eps, a);
    be_.matmul(a, n, cw.head, logits);
    be_.download(logits_host_.data(), logits, logits_host_.size() * sizeof(float));
    for (int64_t i = 0; i < n; ++i) {
      const int32_t code = choose(i, cb, logits_host_.data() + i * V);
      LFM_CHECK(code >= 0 && code < V, "depth decoder: code ", code, " chosen for codebook ", cb, " is outside [0, ",
                V, ")");
      host_ids[static_cast<size_t>(i)] = code;
      codes[i * C + cb] = code;
    }
  }
}

}  // namespace lfm
