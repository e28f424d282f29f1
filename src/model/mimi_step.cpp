// MimiDecoder's batched step: frames of several streams through the quantizer's projections, the
// upsample, the decoder transformer and the SEANet decoder, each stream carrying what its next
// frames read of the past (MimiState). Activations are host float32 rows [time, channels], every
// stream's rows one after another; a step's matmuls take every stream's rows at once.
//
// Bit-exactness of streaming: every output element is computed by the same operations in the same
// order whatever the chunking: a conv's im2col row reads the carried context where decode() reads
// its own earlier rows (the same values), a transposed conv's partial sums are added in ascending
// input order either way, and attention walks the same keys in ascending position.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "model/mimi_impl.h"

namespace lfm {

namespace {

using Rows = MimiRows;

// torch's nn.ELU (alpha 1): x for x > 0, e^x − 1 otherwise.
void elu(std::vector<float>& x) {
  for (float& a : x) a = a > 0.0f ? a : std::expm1(a);
}

// y = causal conv(x): im2col rows [T, kernel · in] from (each stream's carried context ‖ its rows),
// one matmul for every stream, + bias. The context becomes the last context() inputs.
void conv(Backend& be, const MimiConv& c, std::span<std::vector<float>* const> ctx, const Rows& x, Rows& y,
          std::vector<float>& col, std::vector<float>& ext) {
  const int64_t total = x.total(), ctxn = c.context(), in = c.in;
  y.n = x.n;
  y.width = c.out;
  y.v.resize(static_cast<size_t>(total * c.out));
  const float* src = x.v.data();
  if (c.kernel == 1) {
    be.matmul(src, total, c.w, y.v.data());
  } else {
    col.resize(static_cast<size_t>(total * c.kernel * in));
    int64_t row = 0;
    for (size_t i = 0; i < x.n.size(); ++i) {
      const int64_t n = x.n[i];
      std::vector<float>& h = *ctx[i];  // [ctxn, in]
      ext.resize(static_cast<size_t>((ctxn + n) * in));
      std::copy(h.begin(), h.end(), ext.begin());
      std::copy(src, src + n * in, ext.begin() + ctxn * in);
      // Output t reads inputs t − ctxn + j·dilation, row t + j·dilation of ext.
      for (int64_t t = 0; t < n; ++t)
        for (int64_t j = 0; j < c.kernel; ++j)
          std::memcpy(col.data() + ((row + t) * c.kernel + j) * in, ext.data() + (t + j * c.dilation) * in,
                      static_cast<size_t>(in) * sizeof(float));
      std::copy(ext.end() - ctxn * in, ext.end(), h.begin());
      src += n * in;
      row += n;
    }
    be.matmul(col.data(), total, c.w, y.v.data());
  }
  if (!c.bias.empty()) be.add_bias(y.v.data(), c.bias.ptr(), total, c.out);
}

// y = causal transposed conv(x): the taps' products (one matmul, or per channel for the depthwise
// upsample) overlap-added onto each stream's carried partial sums in ascending input order; the
// first n · stride rows are final (+ bias), the next kernel − stride are carried.
void conv_tr(Backend& be, const MimiConvTr& c, std::span<std::vector<float>* const> tails, const Rows& x, Rows& y,
             std::vector<float>& prod, std::vector<float>& acc) {
  const int64_t total = x.total(), K = c.kernel, s = c.stride, out = c.out, tail = c.tail();
  if (!c.depthwise) {
    prod.resize(static_cast<size_t>(total * K * out));
    be.matmul(x.v.data(), total, c.w, prod.data());
  }
  y.n.resize(x.n.size());
  y.width = out;
  y.v.resize(static_cast<size_t>(total * s * out));
  int64_t row = 0;
  float* dst = y.v.data();
  for (size_t i = 0; i < x.n.size(); ++i) {
    const int64_t n = x.n[i];
    std::vector<float>& carried = *tails[i];  // [tail, out]
    acc.assign(static_cast<size_t>((n * s + tail) * out), 0.0f);
    std::copy(carried.begin(), carried.end(), acc.begin());
    for (int64_t t = 0; t < n; ++t) {
      for (int64_t j = 0; j < K; ++j) {
        float* a = acc.data() + (t * s + j) * out;
        if (c.depthwise) {
          const float* xr = x.v.data() + (row + t) * out;
          for (int64_t o = 0; o < out; ++o) a[o] += xr[o] * c.taps[static_cast<size_t>(o * K + j)];
        } else {
          const float* p = prod.data() + ((row + t) * K + j) * out;
          for (int64_t o = 0; o < out; ++o) a[o] += p[o];
        }
      }
    }
    std::copy(acc.begin(), acc.begin() + n * s * out, dst);
    std::copy(acc.begin() + n * s * out, acc.end(), carried.begin());
    y.n[i] = n * s;
    dst += n * s * out;
    row += n;
  }
  if (!c.bias.empty()) be.add_bias(y.v.data(), c.bias.ptr(), total * s, out);
}

// Causal attention of each stream's new rows over its kept keys and its new ones, within the
// window (keys at positions p − window < j ≤ p; window 0: all). q [R, H, hd]; k, v [R, KV, hd];
// out [R, H, hd]. Each stream's kept keys become the last window − 1 rows.
void attention(const MimiConfig& cfg, int64_t window, const std::vector<MimiState*>& states, const std::vector<int64_t>& n,
               size_t layer, const float* q, const float* k, const float* v, float* out, MimiScratch& s) {
  const int64_t H = cfg.num_attention_heads, KV = cfg.num_key_value_heads, hd = cfg.head_dim, kw = KV * hd;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  std::vector<float>&keys = s.keys, &values = s.values, &w = s.w;
  int64_t row = 0;
  for (size_t i = 0; i < states.size(); ++i) {
    MimiState& st = *states[i];
    std::vector<float>& kept_k = st.keys[layer];
    std::vector<float>& kept_v = st.values[layer];
    const int64_t kept = static_cast<int64_t>(kept_k.size()) / kw, rows = n[i];
    keys = kept_k;
    keys.insert(keys.end(), k + row * kw, k + (row + rows) * kw);
    values = kept_v;
    values.insert(values.end(), v + row * kw, v + (row + rows) * kw);
    // keys[m] is at position st.position − kept + m; new row r at st.position + r.
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t self = kept + r, first = window > 0 ? std::max<int64_t>(0, self - window + 1) : 0;
      w.resize(static_cast<size_t>(self - first + 1));
      for (int64_t h = 0; h < H; ++h) {
        const int64_t g = h / (H / KV);
        const float* qr = q + ((row + r) * H + h) * hd;
        float m = -INFINITY;
        for (int64_t j = first; j <= self; ++j) {
          const float* kr = keys.data() + j * kw + g * hd;
          float dot = 0.0f;
          for (int64_t e = 0; e < hd; ++e) dot += qr[e] * kr[e];
          w[static_cast<size_t>(j - first)] = dot * scale;
          m = std::max(m, dot * scale);
        }
        float sum = 0.0f;
        for (float& a : w) sum += (a = std::exp(a - m));
        float* o = out + ((row + r) * H + h) * hd;
        std::fill(o, o + hd, 0.0f);
        for (int64_t j = first; j <= self; ++j) {
          const float p = w[static_cast<size_t>(j - first)] / sum;
          const float* vr = values.data() + j * kw + g * hd;
          for (int64_t e = 0; e < hd; ++e) o[e] += p * vr[e];
        }
      }
    }
    const int64_t all = kept + rows, keep = window > 0 ? std::min(all, window - 1) : all;
    kept_k.assign(keys.end() - keep * kw, keys.end());
    kept_v.assign(values.end() - keep * kw, values.end());
    row += rows;
  }
}

}  // namespace

void MimiDecoder::Impl::step(Backend& be, std::span<const Item> items, MimiScratch& sc, Trace* trace) const {
  const int64_t d = cfg.hidden_size, cd = cfg.codebook_dim;
  Rows& x = sc.x;
  x.n.clear();
  x.width = d;
  for (const Item& it : items) x.n.push_back(static_cast<int64_t>(it.codes.size()) / kCodebooks);
  const int64_t frames = x.total();

  // Quantizer: codebook 0's row through the semantic projection, the sum of codebooks 1..7's rows
  // (added in codebook order, as the residual quantizer's decode) through the acoustic one.
  std::vector<float>&sem = sc.sem, &ac = sc.ac;
  sem.resize(static_cast<size_t>(frames * cd));
  ac.resize(static_cast<size_t>(frames * cd));
  int64_t f = 0;
  for (const Item& it : items)
    for (size_t r = 0; r < it.codes.size(); r += kCodebooks, ++f) {
      const float* row0 = codebooks[0].data() + static_cast<int64_t>(it.codes[r]) * cd;
      std::copy(row0, row0 + cd, sem.begin() + f * cd);
      float* a = ac.data() + f * cd;
      const float* row1 = codebooks[1].data() + static_cast<int64_t>(it.codes[r + 1]) * cd;
      std::copy(row1, row1 + cd, a);
      for (int64_t c = 2; c < kCodebooks; ++c) {
        const float* rc = codebooks[static_cast<size_t>(c)].data() + static_cast<int64_t>(it.codes[r + static_cast<size_t>(c)]) * cd;
        for (int64_t e = 0; e < cd; ++e) a[e] += rc[e];
      }
    }
  if (trace) {
    trace->semantic.insert(trace->semantic.end(), sem.begin(), sem.end());
    trace->acoustic.insert(trace->acoustic.end(), ac.begin(), ac.end());
    trace->seanet.resize(trs.size() + 1);
  }
  x.v.resize(static_cast<size_t>(frames * d));
  std::vector<float>& tmp = sc.tmp;
  tmp.resize(static_cast<size_t>(frames * d));
  be.matmul(sem.data(), frames, semantic_proj, x.v.data());
  be.matmul(ac.data(), frames, acoustic_proj, tmp.data());
  be.add(x.v.data(), tmp.data(), frames * d);
  if (trace) trace->quantized.insert(trace->quantized.end(), x.v.begin(), x.v.end());

  // Upsample to the transformer's rate.
  std::vector<MimiState*> states;
  std::vector<std::vector<float>*> tails;
  for (const Item& it : items) {
    states.push_back(it.state);
    tails.push_back(&it.state->up_tail);
  }
  Rows& u = sc.u;
  conv_tr(be, upsample, tails, x, u, sc.prod, sc.acc);
  if (trace) trace->upsampled.insert(trace->upsampled.end(), u.v.begin(), u.v.end());

  // The decoder transformer over u's rows [R, d].
  const int64_t R = u.total(), H = cfg.num_attention_heads, KV = cfg.num_key_value_heads, hd = cfg.head_dim;
  std::vector<int64_t> pos(static_cast<size_t>(R));
  {
    int64_t r = 0;
    for (size_t i = 0; i < items.size(); ++i)
      for (int64_t k = 0; k < u.n[i]; ++k) pos[static_cast<size_t>(r++)] = states[i]->position + k;
  }
  std::vector<float>&h = sc.h, &q = sc.q, &kk = sc.k, &vv = sc.v, &att = sc.att, &o = sc.o, &mid = sc.mid;
  h.resize(static_cast<size_t>(R * d));
  q.resize(static_cast<size_t>(R * H * hd));
  kk.resize(static_cast<size_t>(R * KV * hd));
  vv.resize(static_cast<size_t>(R * KV * hd));
  att.resize(static_cast<size_t>(R * H * hd));
  o.resize(static_cast<size_t>(R * d));
  mid.resize(static_cast<size_t>(R * cfg.intermediate_size));
  const float eps = static_cast<float>(cfg.norm_eps);
  for (size_t l = 0; l < layers.size(); ++l) {
    const MimiLayer& L = layers[l];
    be.layer_norm(u.v.data(), L.ln1_w.ptr(), L.ln1_b.ptr(), R, d, eps, h.data());
    be.matmul(h.data(), R, L.q, q.data());
    be.matmul(h.data(), R, L.k, kk.data());
    be.matmul(h.data(), R, L.v, vv.data());
    be.rope_neox(q.data(), R, H, hd, pos.data(), inv_freq.ptr());
    be.rope_neox(kk.data(), R, KV, hd, pos.data(), inv_freq.ptr());
    attention(cfg, cfg.sliding_window, states, u.n, l, q.data(), kk.data(), vv.data(), att.data(), sc);
    be.matmul(att.data(), R, L.o, o.data());
    be.mul_rows(o.data(), d, L.attn_scale.ptr(), 0, R, d, o.data(), d);
    be.add(u.v.data(), o.data(), R * d);
    be.layer_norm(u.v.data(), L.ln2_w.ptr(), L.ln2_b.ptr(), R, d, eps, h.data());
    be.matmul(h.data(), R, L.fc1, mid.data());
    be.gelu(mid.data(), R * cfg.intermediate_size, false, mid.data());
    be.matmul(mid.data(), R, L.fc2, o.data());
    be.mul_rows(o.data(), d, L.mlp_scale.ptr(), 0, R, d, o.data(), d);
    be.add(u.v.data(), o.data(), R * d);
  }
  for (size_t i = 0; i < items.size(); ++i) states[i]->position += u.n[i];
  if (trace) trace->transformed.insert(trace->transformed.end(), u.v.begin(), u.v.end());

  // SEANet decoder.
  size_t ci = 0, ti = 0;
  auto ctx_of = [&](size_t which) {
    std::vector<std::vector<float>*> c;
    for (MimiState* s : states) c.push_back(&s->conv_ctx[which]);
    return c;
  };
  Rows &a = sc.a, &b = sc.b, &c1 = sc.c;
  std::vector<float>&col = sc.col, &ext = sc.ext;
  conv(be, convs[ci], ctx_of(ci), u, a, col, ext);
  ++ci;
  if (trace) trace->seanet[0].insert(trace->seanet[0].end(), a.v.begin(), a.v.end());
  for (size_t r = 0; r < trs.size(); ++r) {
    elu(a.v);
    std::vector<std::vector<float>*> tt;
    for (MimiState* s : states) tt.push_back(&s->tr_tail[ti]);
    conv_tr(be, trs[ti], tt, a, b, sc.prod, sc.acc);
    ++ti;
    std::swap(a, b);
    for (int64_t j = 0; j < cfg.num_residual_layers; ++j) {
      b = a;  // the residual block's input, kept for its sum
      elu(b.v);
      conv(be, convs[ci], ctx_of(ci), b, c1, col, ext);
      ++ci;
      elu(c1.v);
      conv(be, convs[ci], ctx_of(ci), c1, b, col, ext);
      ++ci;
      be.add(a.v.data(), b.v.data(), static_cast<int64_t>(a.v.size()));
    }
    if (trace) trace->seanet[r + 1].insert(trace->seanet[r + 1].end(), a.v.begin(), a.v.end());
  }
  elu(a.v);
  conv(be, convs[ci], ctx_of(ci), a, b, col, ext);
  const float* s = b.v.data();
  for (size_t i = 0; i < items.size(); ++i) {
    items[i].samples->insert(items[i].samples->end(), s, s + b.n[i]);
    s += b.n[i];
    states[i]->frames += x.n[i];
  }
}

}  // namespace lfm
