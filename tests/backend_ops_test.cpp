// The device-neutral parts of the Backend interface (issue 36): the row and MoE ops a model runs
// between the big ops, on every CPU backend against plain loops written here; host DeviceMemory;
// a state cache that moves its bytes only through the memory it was given; the backend factory
// and `--device`; and a Forward over a backend whose memory the host must not read directly,
// which has to give the same logits as the plain run.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <numeric>
#include <random>

#include "core/error.h"
#include "core/thread_pool.h"
#include "engine/sampler.h"
#include "kernels/backend_factory.h"
#include "kernels/cpu_backend.h"
#include "kernels/reference_backend.h"
#include "model/forward.h"
#include "model/model.h"
#include "fake_device_backend.h"
#include "model_test_util.h"
#include "test_util.h"

namespace lfm {
namespace {

using test::randn;

class BackendOpsTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (!isa_supported(parse_isa(GetParam()))) GTEST_SKIP() << "CPU lacks " << GetParam();
    be_ = make_backend_for(parse_isa(GetParam()), pool_);
  }
  ThreadPool pool_{2};
  std::unique_ptr<Backend> be_;
};

TEST_P(BackendOpsTest, RowOpsMatchPlainLoops) {
  const int64_t rows = 5, cols = 37, lda = 3 * cols;
  const auto a = randn(rows * lda, 1), b = randn(rows * cols, 2), bias = randn(cols, 3);
  // mul_rows: strided inputs (the conv's B and x inside its [T, 3d] projection), in place too.
  std::vector<float> out(rows * cols, -1.0f);
  be_->mul_rows(a.data(), lda, a.data() + 2 * cols, lda, rows, cols, out.data(), cols);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) ASSERT_EQ(out[r * cols + c], a[r * lda + c] * a[r * lda + 2 * cols + c]);
  std::vector<float> inplace = b;
  be_->mul_rows(a.data() + cols, lda, inplace.data(), cols, rows, cols, inplace.data(), cols);
  for (int64_t i = 0; i < rows * cols; ++i) ASSERT_EQ(inplace[i], a[(i / cols) * lda + cols + i % cols] * b[i]);
  // mul_rows with ldb = 0: every row times the one row `bias`
  be_->mul_rows(b.data(), cols, bias.data(), 0, rows, cols, out.data(), cols);
  for (int64_t i = 0; i < rows * cols; ++i) ASSERT_EQ(out[i], b[i] * bias[i % cols]);
  // add_bias
  std::vector<float> y = b;
  be_->add_bias(y.data(), bias.data(), rows, cols);
  for (int64_t i = 0; i < rows * cols; ++i) ASSERT_EQ(y[i], b[i] + bias[i % cols]);
  // gather_rows: repeated and out-of-order rows
  const std::vector<int32_t> index = {4, 0, 4, 2};
  std::vector<float> g(index.size() * cols);
  be_->gather_rows(b.data(), cols, index.data(), static_cast<int64_t>(index.size()), g.data());
  for (size_t i = 0; i < index.size(); ++i)
    for (int64_t c = 0; c < cols; ++c) ASSERT_EQ(g[i * cols + c], b[index[i] * cols + c]);
}

TEST_P(BackendOpsTest, MoeRouteChoosesByBiasAndWeighsByScore) {
  // Two tokens, five experts, k = 2. Token 0: the bias lifts expert 4 over expert 1; token 1:
  // expert 2 first, then a tie between experts 1 and 3 keeps the lower one.
  const std::vector<float> logits = {2.0f, 1.0f, -1.0f, 0.5f, 0.9f,  //
                                     -2.0f, 0.7f, 0.9f, 0.7f, -3.0f};
  const std::vector<float> bias = {0.0f, 0.0f, 0.0f, 0.0f, 0.5f};
  std::vector<int32_t> experts(4);
  std::vector<float> weights(4);
  auto sig = [](float x) { return 1.0f / (1.0f + std::exp(-x)); };
  be_->moe_route(logits.data(), 2, 5, 2, bias.data(), true, 2.5f, experts.data(), weights.data());
  EXPECT_EQ(experts, (std::vector<int32_t>{0, 4, 1, 2}));
  const float s00 = sig(2.0f), s04 = sig(0.9f), s11 = sig(0.7f), s12 = sig(0.9f);
  EXPECT_FLOAT_EQ(weights[0], s00 / (s00 + s04 + 1e-6f) * 2.5f);
  EXPECT_FLOAT_EQ(weights[1], s04 / (s00 + s04 + 1e-6f) * 2.5f);
  EXPECT_FLOAT_EQ(weights[2], s11 / (s12 + s11 + 1e-6f) * 2.5f);
  EXPECT_FLOAT_EQ(weights[3], s12 / (s12 + s11 + 1e-6f) * 2.5f);
  // Without the bias and without normalisation: experts 0 and 1, weights the plain scores.
  be_->moe_route(logits.data(), 2, 5, 2, nullptr, false, 1.0f, experts.data(), weights.data());
  EXPECT_EQ(experts[0], 0);
  EXPECT_EQ(experts[1], 1);
  EXPECT_FLOAT_EQ(weights[0], sig(2.0f));
  EXPECT_FLOAT_EQ(weights[1], sig(1.0f));
  EXPECT_THROW(be_->moe_route(logits.data(), 2, 5, 6, nullptr, false, 1.0f, experts.data(), weights.data()), Error);
}

TEST_P(BackendOpsTest, MoeCombineSumsChoicesInOrder) {
  const int64_t rows = 3, k = 2, cols = 19;
  const auto x = randn(rows * k * cols, 4), w = randn(rows * k, 5);
  const std::vector<int32_t> src = {5, 0, 1, 3, 2, 4};
  std::vector<float> out(rows * cols, 7.0f);  // overwritten, not added to
  be_->moe_combine(x.data(), src.data(), w.data(), rows, k, cols, out.data());
  for (int64_t t = 0; t < rows; ++t)
    for (int64_t c = 0; c < cols; ++c) {
      float want = 0.0f;
      for (int64_t j = 0; j < k; ++j) want += w[t * k + j] * x[src[t * k + j] * cols + c];
      ASSERT_EQ(out[t * cols + c], want);
    }
}

// moe_group lists each expert's tokens in token order; moe_matmul gives each expert's rows the
// bits one matmul on them gives, skipping experts without rows. On every CPU backend and on the
// fake device (which reads the groups inside the op, as a GPU does).
void check_moe_group_and_matmul(Backend& be, DeviceMemory& mem) {
  const int64_t rows = 4, k = 2, E = 5, cols = 24, out = 9;
  // Token t's choices (ascending); expert 2 is never chosen.
  const std::vector<int32_t> choice = {0, 3, 1, 4, 0, 1, 3, 4};
  const std::vector<int32_t> want_first = {0, 2, 4, 4, 6, 8};
  const std::vector<int32_t> want_index = {0, 2, 1, 2, 0, 3, 1, 3};
  const std::vector<int32_t> want_src = {0, 4, 2, 6, 1, 3, 5, 7};
  auto put = [&](const auto& v) {
    DeviceBuffer b = mem.allocate(v.size() * sizeof(v[0]));
    mem.upload(b.data(), v.data(), v.size() * sizeof(v[0]));
    return b;
  };
  auto get = [&](const DeviceBuffer& b, auto& v) { mem.download(v.data(), b.data(), v.size() * sizeof(v[0])); };
  DeviceBuffer dc = put(choice), df = mem.allocate((E + 1) * 4), di = mem.allocate(rows * k * 4),
               ds = mem.allocate(rows * k * 4);
  be.moe_group(dc.as<int32_t>(), rows, k, E, df.as<int32_t>(), di.as<int32_t>(), ds.as<int32_t>());
  std::vector<int32_t> first(E + 1), index(rows * k), src(rows * k);
  get(df, first), get(di, index), get(ds, src);
  EXPECT_EQ(first, want_first);
  EXPECT_EQ(index, want_index);
  EXPECT_EQ(src, want_src);

  std::vector<std::vector<float>> wdata;
  std::vector<TensorView> views(E);
  std::vector<const TensorView*> ws;
  for (int64_t e = 0; e < E; ++e) {
    wdata.push_back(randn(out * cols, 60 + e));
    views[e].dtype = DType::F32;
    views[e].shape = {out, cols};
    views[e].data = wdata.back().data();
    views[e].nbytes = wdata.back().size() * sizeof(float);
  }
  for (const TensorView& v : views) ws.push_back(&v);
  const int64_t R = rows * k;
  const auto x = randn(R * cols, 70);
  DeviceBuffer dx = put(x), dy = mem.allocate(R * out * 4), dsep = mem.allocate(R * out * 4);
  be.moe_matmul(dx.as<float>(), df.as<int32_t>(), ws, R, dy.as<float>());
  for (int64_t e = 0; e < E; ++e)
    if (want_first[e + 1] > want_first[e])
      be.matmul(dx.as<float>() + want_first[e] * cols, want_first[e + 1] - want_first[e], *ws[e],
                dsep.as<float>() + want_first[e] * out);
  std::vector<float> got(R * out), sep(R * out);
  get(dy, got), get(dsep, sep);
  EXPECT_EQ(got, sep);
  // Against plain loops.
  for (int64_t e = 0; e < E; ++e)
    for (int64_t r = want_first[e]; r < want_first[e + 1]; ++r)
      for (int64_t o = 0; o < out; ++o) {
        double acc = 0;
        for (int64_t c = 0; c < cols; ++c) acc += static_cast<double>(x[r * cols + c]) * wdata[e][o * cols + c];
        ASSERT_NEAR(got[r * out + o], acc, 1e-4) << "expert " << e << " row " << r;
      }
}

TEST_P(BackendOpsTest, MoeGroupAndGroupedMatmulMatchPerExpertMatmuls) { check_moe_group_and_matmul(*be_, *be_); }

TEST(DeviceNeutralForward, MoeGroupAndGroupedMatmulOnADevice) {
  ThreadPool pool(2);
  for (bool replay : {false, true}) {
    test::FakeDeviceBackend dev(pool, replay);
    check_moe_group_and_matmul(dev, dev);
  }
}

INSTANTIATE_TEST_SUITE_P(Isa, BackendOpsTest, ::testing::ValuesIn(test::all_isas()));

// The encoder ops (vision tower) against plain double-precision loops, on awkward sizes.
TEST_P(BackendOpsTest, EncoderOpsMatchPlainLoops) {
  const int64_t rows = 7, dim = 45;
  const auto x = randn(rows * dim, 11), w = randn(dim, 12), b = randn(dim, 13);
  std::vector<float> out(rows * dim);
  be_->layer_norm(x.data(), w.data(), b.data(), rows, dim, 1e-6f, out.data());
  for (int64_t r = 0; r < rows; ++r) {
    double mean = 0, var = 0;
    for (int64_t i = 0; i < dim; ++i) mean += x[r * dim + i];
    mean /= dim;
    for (int64_t i = 0; i < dim; ++i) var += (x[r * dim + i] - mean) * (x[r * dim + i] - mean);
    var /= dim;
    for (int64_t i = 0; i < dim; ++i)
      ASSERT_NEAR(out[r * dim + i], (x[r * dim + i] - mean) / std::sqrt(var + 1e-6) * w[i] + b[i], 1e-5);
  }
  std::vector<float> g(x.size());
  for (bool approx : {false, true}) {
    be_->gelu(x.data(), static_cast<int64_t>(x.size()), approx, g.data());
    for (size_t i = 0; i < x.size(); ++i) {
      const double v = x[i];
      const double want = approx ? 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)))
                                 : 0.5 * v * (1 + std::erf(v / std::sqrt(2.0)));
      ASSERT_NEAR(g[i], want, 1e-6) << (approx ? "tanh" : "erf") << " at " << v;
    }
  }
}

// Segment attention against a plain double-precision loop: MHA and GQA, bidirectional and
// causal, with and without key limits, over segments of awkward lengths (one of a single row,
// one longer than two SIMD blocks): rows never see another segment's keys.
TEST_P(BackendOpsTest, SegmentAttentionMatchesPlainLoops) {
  const std::vector<int64_t> seg = {0, 5, 6, 19, 56};
  const int64_t T = seg.back();
  struct Case {
    int64_t heads, kv_heads, hd;
    bool causal;
    std::vector<int64_t> key_end;
  };
  const std::vector<Case> cases = {{3, 3, 20, false, {}},         {4, 2, 16, false, {}},
                                   {4, 2, 16, true, {}},          {6, 3, 9, false, {3, 6, 12, 50}},
                                   {4, 1, 16, true, {5, 6, 19, 40}}};
  for (const Case& c : cases) {
    SCOPED_TRACE(testing::Message() << c.heads << "/" << c.kv_heads << " heads, hd " << c.hd
                                    << (c.causal ? ", causal" : "") << (c.key_end.empty() ? "" : ", key limits"));
    const int64_t qs = c.heads * c.hd, ks = c.kv_heads * c.hd;
    const auto q = randn(T * qs, 14), k = randn(T * ks, 15), v = randn(T * ks, 16);
    std::vector<float> att(T * qs);
    const SegmentAttention a{seg, c.key_end, c.heads, c.kv_heads, c.hd, 0.25f, c.causal};
    be_->segment_attention(q.data(), k.data(), v.data(), a, att.data());
    for (size_t s = 0; s + 1 < seg.size(); ++s)
      for (int64_t r = seg[s]; r < seg[s + 1]; ++r)
        for (int64_t h = 0; h < c.heads; ++h) {
          const int64_t g = h / (c.heads / c.kv_heads);
          int64_t end = c.key_end.empty() ? seg[s + 1] : c.key_end[s];
          if (c.causal) end = std::min(end, r + 1);
          std::vector<double> p;
          double mx = -1e300, sum = 0;
          for (int64_t j = seg[s]; j < end; ++j) {
            double d = 0;
            for (int64_t e = 0; e < c.hd; ++e) d += double(q[r * qs + h * c.hd + e]) * k[j * ks + g * c.hd + e];
            p.push_back(d * 0.25);
            mx = std::max(mx, p.back());
          }
          for (double& e : p) sum += (e = std::exp(e - mx));
          for (int64_t e = 0; e < c.hd; ++e) {
            double want = 0;
            for (int64_t j = seg[s]; j < end; ++j) want += p[j - seg[s]] / sum * v[j * ks + g * c.hd + e];
            ASSERT_NEAR(att[r * qs + h * c.hd + e], want, 1e-5) << "row " << r << " head " << h;
          }
        }
  }
  const auto q = randn(6 * 16, 1);
  std::vector<float> att(6 * 16);
  EXPECT_THROW(be_->segment_attention(q.data(), q.data(), q.data(), SegmentAttention{std::vector<int64_t>{0, 3, 3}, {}, 1, 1, 16, 1.0f, false},
                                      att.data()),
               Error);
  const std::vector<int64_t> two = {0, 3, 6}, bad_keys = {3, 3};  // segment 1's keys end at its start
  EXPECT_THROW(be_->segment_attention(q.data(), q.data(), q.data(), SegmentAttention{two, bad_keys, 1, 1, 16, 1.0f, false}, att.data()),
               Error);
  EXPECT_THROW(be_->segment_attention(q.data(), q.data(), q.data(), SegmentAttention{two, {}, 3, 2, 16, 1.0f, false}, att.data()),
               Error);  // 3 heads over 2 kv heads
}

// Segment conv (a text encoder's short conv, no state) against a plain loop: causal and centred
// taps, odd and even kernels, with and without bias; rows outside a segment count as zero.
TEST_P(BackendOpsTest, SegmentConvMatchesPlainLoops) {
  const std::vector<int64_t> seg = {0, 1, 4, 21, 23};
  const int64_t T = seg.back(), dim = 37;
  for (const int64_t kernel : {3, 4, 1})
    for (const int64_t left : {kernel - 1, kernel / 2})
      for (const bool with_bias : {false, true}) {
        SCOPED_TRACE(testing::Message() << "kernel " << kernel << ", left " << left << (with_bias ? ", bias" : ""));
        const auto u = randn(T * dim, 21), w = randn(dim * kernel, 22), bias = randn(dim, 23);
        std::vector<float> out(T * dim, NAN);
        be_->segment_conv(u.data(), seg, dim, kernel, left, w.data(), with_bias ? bias.data() : nullptr, out.data());
        for (size_t s = 0; s + 1 < seg.size(); ++s)
          for (int64_t r = seg[s]; r < seg[s + 1]; ++r)
            for (int64_t c = 0; c < dim; ++c) {
              double want = with_bias ? bias[c] : 0.0;
              for (int64_t j = 0; j < kernel; ++j) {
                const int64_t src = r - left + j;
                if (src >= seg[s] && src < seg[s + 1]) want += double(w[c * kernel + j]) * u[src * dim + c];
              }
              ASSERT_NEAR(out[r * dim + c], want, 1e-5) << "row " << r << " channel " << c;
            }
      }
  std::vector<float> out(4 * dim);
  const auto u = randn(4 * dim, 1), w = randn(dim * 3, 2);
  EXPECT_THROW(be_->segment_conv(u.data(), std::vector<int64_t>{0, 2, 2, 4}, dim, 3, 1, w.data(), nullptr, out.data()),
               Error);
  EXPECT_THROW(be_->segment_conv(u.data(), std::vector<int64_t>{0, 4}, dim, 3, 3, w.data(), nullptr, out.data()), Error);
}

// The speech encoder's ops (activation, glu, conv2d, rel_pos_attention) against plain
// double-precision loops written here, on awkward sizes: images and segments of one row, of odd
// sizes, a position table reaching further than the longest segment needs. The inputs go through
// the backend's memory (a device's, where the host cannot read it).
void check_speech_ops(Backend& be) {
  auto put = [&](const std::vector<float>& v) {
    DeviceBuffer b = be.allocate(v.size() * sizeof(float));
    be.upload(b.data(), v.data(), v.size() * sizeof(float));
    return b;
  };
  auto get = [&](const DeviceBuffer& b, size_t n) {
    std::vector<float> v(n);
    be.download(v.data(), b.data(), n * sizeof(float));
    return v;
  };
  {  // activation and glu
    const int64_t rows = 7, cols = 37;
    const auto x = randn(rows * 2 * cols, 41, 3.0f);
    DeviceBuffer dx = put(x), dout = be.allocate(x.size() * sizeof(float));
    be.activation(dx.as<float>(), rows * 2 * cols, Activation::kRelu, dout.as<float>());
    auto got = get(dout, x.size());
    for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(got[i], std::max(x[i], 0.0f)) << i;
    be.activation(dx.as<float>(), rows * 2 * cols, Activation::kSilu, dout.as<float>());
    got = get(dout, x.size());
    for (size_t i = 0; i < x.size(); ++i) ASSERT_NEAR(got[i], x[i] / (1 + std::exp(-double(x[i]))), 1e-6) << i;
    be.activation(dout.as<float>(), rows * 2 * cols, Activation::kRelu, dout.as<float>());  // in place
    for (float& v : got) v = std::max(v, 0.0f);
    EXPECT_EQ(get(dout, x.size()), got);
    be.glu(dx.as<float>(), rows, cols, dout.as<float>());
    got = get(dout, rows * cols);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c)
        ASSERT_NEAR(got[r * cols + c], x[r * 2 * cols + c] / (1 + std::exp(-double(x[r * 2 * cols + cols + c]))), 1e-6);
  }
  // conv2d: images of 1, 2, 9 and 4 rows, width 13; single input channel and depthwise; strides
  // 1 and 2; pads 0 and 1; kernels 3 and 1.
  const std::vector<int64_t> seg = {0, 1, 3, 12, 16};
  const int64_t W = 13, C = 5;
  struct ConvCase {
    bool depthwise;
    int64_t kernel, stride, pad;
  };
  for (const ConvCase& cc : {ConvCase{false, 3, 2, 1}, ConvCase{true, 3, 2, 1}, ConvCase{true, 3, 1, 1},
                             ConvCase{false, 3, 1, 0}, ConvCase{true, 1, 2, 0}})
    for (const bool with_bias : {true, false}) {
      SCOPED_TRACE(testing::Message() << (cc.depthwise ? "depthwise" : "one input channel") << ", kernel " << cc.kernel
                                      << ", stride " << cc.stride << ", pad " << cc.pad << (with_bias ? ", bias" : ""));
      const Conv2d shape{seg, W, C, cc.depthwise, cc.kernel, cc.stride, cc.pad};
      const int64_t cin = shape.in_channels(), Wo = shape.out_width(), K = cc.kernel;
      if (cc.pad == 0 && cc.kernel == 3) {  // the one-row image has no output row: refused
        EXPECT_THROW(check_conv2d(shape, "test"), Error);
        continue;
      }
      const auto x = randn(seg.back() * W * cin, 43), w = randn(C * K * K, 44), bias = randn(C, 45);
      const int64_t rows = check_conv2d(shape, "test");
      DeviceBuffer dx = put(x), dw = put(w), db = put(bias), dout = be.allocate(rows * Wo * C * sizeof(float));
      be.conv2d(dx.as<float>(), shape, dw.as<float>(), with_bias ? db.as<float>() : nullptr, dout.as<float>());
      const auto got = get(dout, rows * Wo * C);
      int64_t at = 0;
      for (size_t s = 0; s + 1 < seg.size(); ++s) {
        const int64_t h = seg[s + 1] - seg[s];
        for (int64_t o = 0; o < shape.out_rows(h); ++o, ++at)
          for (int64_t p = 0; p < Wo; ++p)
            for (int64_t c = 0; c < C; ++c) {
              double want = with_bias ? bias[c] : 0.0;
              for (int64_t a = 0; a < K; ++a)
                for (int64_t b = 0; b < K; ++b) {
                  const int64_t r = o * cc.stride - cc.pad + a, col = p * cc.stride - cc.pad + b;
                  if (r >= 0 && r < h && col >= 0 && col < W)
                    want += double(w[(c * K + a) * K + b]) * x[((seg[s] + r) * W + col) * cin + (cc.depthwise ? c : 0)];
                }
              ASSERT_NEAR(got[(at * Wo + p) * C + c], want, 1e-5) << "image " << s << " row " << o << " col " << p;
            }
      }
      EXPECT_EQ(at, rows);
    }
  // rel_pos_attention: segments of 1, 6, 19 and 45 rows (more than one task of rows on the SIMD
  // backends), head_dim 9 and 16, a table reaching exactly as far as needed and further.
  const std::vector<int64_t> aseg = {0, 1, 7, 26, 71};
  const int64_t T = aseg.back();
  for (const int64_t hd : {9, 16})
    for (const int64_t p0 : {44, 47}) {
      SCOPED_TRACE(testing::Message() << "head_dim " << hd << ", P0 " << p0);
      const int64_t H = 3, stride = H * hd;
      const auto q = randn(T * stride, 46), k = randn(T * stride, 47), v = randn(T * stride, 48);
      const auto pos = randn((2 * p0 + 1) * stride, 49), u = randn(stride, 50), vb = randn(stride, 51);
      const RelPosAttention a{aseg, H, hd, p0, 0.3f};
      DeviceBuffer dq = put(q), dk = put(k), dv = put(v), dp = put(pos), du = put(u), dvb = put(vb),
                   dout = be.allocate(T * stride * sizeof(float));
      be.rel_pos_attention(dq.as<float>(), dk.as<float>(), dv.as<float>(), dp.as<float>(), du.as<float>(),
                           dvb.as<float>(), a, dout.as<float>());
      const auto got = get(dout, T * stride);
      for (size_t s = 0; s + 1 < aseg.size(); ++s)
        for (int64_t r = aseg[s]; r < aseg[s + 1]; ++r)
          for (int64_t h = 0; h < H; ++h) {
            std::vector<double> sc;
            double mx = -1e300, sum = 0;
            for (int64_t j = aseg[s]; j < aseg[s + 1]; ++j) {
              const int64_t m = p0 - ((r - aseg[s]) - (j - aseg[s]));
              double ac = 0, bd = 0;
              for (int64_t e = 0; e < hd; ++e) {
                const double qe = q[r * stride + h * hd + e];
                ac += (qe + u[h * hd + e]) * k[j * stride + h * hd + e];
                bd += (qe + vb[h * hd + e]) * pos[m * stride + h * hd + e];
              }
              sc.push_back((ac + bd) * 0.3);
              mx = std::max(mx, sc.back());
            }
            for (double& e : sc) sum += (e = std::exp(e - mx));
            for (int64_t e = 0; e < hd; ++e) {
              double want = 0;
              for (int64_t j = aseg[s]; j < aseg[s + 1]; ++j)
                want += sc[j - aseg[s]] / sum * v[j * stride + h * hd + e];
              ASSERT_NEAR(got[r * stride + h * hd + e], want, 1e-5) << "row " << r << " head " << h;
            }
          }
    }
  const auto q = randn(71 * 16, 1);
  DeviceBuffer dq = put(q), dout = be.allocate(q.size() * sizeof(float));
  const float* dqp = dq.as<float>();
  const RelPosAttention short_table{aseg, 1, 16, 43, 1.0f};  // the 45-row segment needs 44
  EXPECT_THROW(be.rel_pos_attention(dqp, dqp, dqp, dqp, dqp, dqp, short_table, dout.as<float>()), Error);
  const std::vector<int64_t> empty_seg = {0, 3, 3};
  const RelPosAttention empty{empty_seg, 1, 16, 5, 1.0f};
  EXPECT_THROW(be.rel_pos_attention(dqp, dqp, dqp, dqp, dqp, dqp, empty, dout.as<float>()), Error);
}

TEST_P(BackendOpsTest, SpeechEncoderOpsMatchPlainLoops) { check_speech_ops(*be_); }

TEST(DeviceNeutralForward, SpeechEncoderOpsOnADevice) {
  ThreadPool pool(2);
  for (bool replay : {false, true}) {
    test::FakeDeviceBackend dev(pool, replay);
    check_speech_ops(dev);
  }
}

TEST(DeviceMemory, HostMemoryAllocatesZeroedAndMovesBytes) {
  DeviceMemory& mem = host_memory();
  EXPECT_TRUE(mem.host_memory());
  DeviceBuffer buf = mem.allocate(1000);
  ASSERT_NE(buf.data(), nullptr);
  EXPECT_EQ(buf.size(), 1000u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(buf.data()) % 64, 0u);
  for (size_t i = 0; i < 1000; ++i) ASSERT_EQ(buf.as<uint8_t>()[i], 0);
  std::vector<uint8_t> src(100), back(100);
  std::iota(src.begin(), src.end(), 1);
  mem.upload(buf.data(), src.data(), 100);
  mem.copy(buf.as<uint8_t>() + 200, buf.data(), 100);
  mem.fill_zero(buf.data(), 50);
  mem.download(back.data(), buf.as<uint8_t>() + 200, 100);
  EXPECT_EQ(back, src);
  EXPECT_EQ(buf.as<uint8_t>()[49], 0);
  EXPECT_EQ(buf.as<uint8_t>()[50], 51);
  ensure_capacity(mem, buf, 500);  // big enough: kept
  EXPECT_EQ(buf.size(), 1000u);
  ensure_capacity(mem, buf, 5000);
  EXPECT_GE(buf.size(), 5000u);
  EXPECT_EQ(mem.allocate(0).size(), 0u);
}

// Host memory that counts what goes through it.
class CountingMemory : public DeviceMemory {
 public:
  DeviceBuffer allocate(size_t bytes) override {
    allocated += bytes;
    return DeviceMemory::allocate(bytes);
  }
  void copy(void* dst, const void* src, size_t bytes) override {
    ++copies;
    DeviceMemory::copy(dst, src, bytes);
  }
  void fill_zero(void* dst, size_t bytes) override {
    ++zeroings;
    DeviceMemory::fill_zero(dst, bytes);
  }
  size_t allocated = 0;
  int copies = 0, zeroings = 0;
};

TEST(DeviceMemory, StateCacheKeepsItsPoolsInTheMemoryItIsGiven) {
  StateShape shape;
  shape.attn_layers = 1;
  shape.kv_heads = 2;
  shape.head_dim = 4;
  shape.conv_layers = 2;
  shape.conv_dim = 8;
  shape.conv_kernel = 3;
  StateCacheOptions opt;
  opt.block_tokens = 4;
  opt.n_blocks = 8;
  opt.n_slots = 2;
  CountingMemory mem;
  StateCache cache(shape, opt, mem);
  EXPECT_EQ(mem.allocated, cache.bytes().total());
  Sequence* a = cache.open(16);
  EXPECT_EQ(mem.zeroings, 2);  // the slot's state in each conv layer
  // A full block enters the prefix cache; a new sequence over it restores the conv snapshot
  // through the memory (one copy per conv layer).
  const std::vector<int32_t> toks = {1, 2, 3, 4, 5};
  ASSERT_TRUE(cache.reserve(*a, 5));
  cache.run(*a, 0, 5);
  cache.commit(*a, toks);
  Sequence* b = cache.open(16);
  EXPECT_EQ(cache.attach_prefix(*b, toks), 4);
  EXPECT_EQ(mem.copies, 2);
}

// The fake device's memory is sealed outside its ops, so host code that reads device memory
// directly (which a GPU forbids) crashes in the fake-device tests instead of passing by accident.
TEST(FakeDeviceBackendDeathTest, HostCannotReadItsMemoryOutsideOps) {
  ThreadPool pool(1);
  test::FakeDeviceBackend be(pool);
  DeviceBuffer b = be.allocate(16 * sizeof(float));
  const std::vector<float> host(16, 1.5f);
  be.upload(b.data(), host.data(), 16 * sizeof(float));
  std::vector<float> back(16);
  be.download(back.data(), b.data(), 16 * sizeof(float));
  EXPECT_EQ(back, host);
  EXPECT_DEATH(
      {
        volatile float f = *b.as<float>();
        (void)f;
      },
      "");
}

TEST(BackendFactory, ParsesDevicesAndExplainsAMissingGpu) {
  EXPECT_EQ(parse_device("cpu"), DeviceKind::kCpu);
  EXPECT_EQ(parse_device("CUDA"), DeviceKind::kCuda);
  EXPECT_EQ(parse_device("auto"), DeviceKind::kAuto);
  try {
    parse_device("tpu");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'tpu'"), std::string::npos) << e.what();
  }
  ThreadPool pool(1);
  EXPECT_TRUE(make_backend(DeviceKind::kCpu, pool)->host_memory());
  std::string why;
  if (cuda_device_available(&why)) GTEST_SKIP() << "this machine has a GPU";
  EXPECT_FALSE(why.empty());
  EXPECT_TRUE(make_backend(DeviceKind::kAuto, pool)->host_memory());  // auto falls back to the CPU
  try {
    make_backend(DeviceKind::kCuda, pool);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("--device cuda"), std::string::npos) << msg;
    EXPECT_NE(msg.find(why), std::string::npos) << msg;
  }
}

TEST(BackendFactory, CliRefusesCudaWithoutAGpuAndBadDevices) {
  std::string why;
  if (cuda_device_available(&why)) GTEST_SKIP() << "this machine has a GPU";
  const std::string model = test::fixture_dir("lfm2_a_fullattnidxs_tied_f32");
  const auto r = test::run_lfm("logits -m " + model + " --ids 1,2,3 --device cuda");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("--device cuda"), std::string::npos) << r.out;
  const auto bad = test::run_lfm("logits -m " + model + " --ids 1,2,3 --device tpu");
  EXPECT_NE(bad.code, 0);
  EXPECT_NE(bad.out.find("'tpu' is not a device"), std::string::npos) << bad.out;
  const auto cpu = test::run_lfm("logits -m " + model + " --ids 1,2,3 --device cpu --json");
  EXPECT_EQ(cpu.code, 0) << cpu.out;
}

// A fixture loaded for a fake device, its state cache and Forward, and three sequences each
// prefilled alone (their prompt logits kept in `prefill_logits`).
struct FakeDeviceDecoder {
  FakeDeviceDecoder(ThreadPool& pool, const std::string& name, bool replay) : dev(pool, replay) {
    LoadOptions opt;
    opt.backend = &dev;
    model = load_model(test::fixture_dir(name), opt);
    StatePlanOptions plan = test::f32_plan();
    plan.parallel = 4;
    cache = make_state_cache(*model, plan, dev);
    fwd = std::make_unique<Forward>(*model, dev, *cache);
    const std::vector<std::vector<int32_t>> prompts = {{1, 5, 9, 2}, {7, 3}, {4, 4, 4, 8, 9, 10, 11}};
    StepOutput out;
    for (const auto& p : prompts) {
      seqs.push_back(cache->open(64));
      BatchItem item{seqs.back(), p, false};
      fwd->step(std::span<const BatchItem>(&item, 1), out);
      prefill_logits.insert(prefill_logits.end(), out.logits.begin(), out.logits.end());
    }
  }
  test::FakeDeviceBackend dev;
  std::unique_ptr<Model> model;
  std::unique_ptr<StateCache> cache;
  std::unique_ptr<Forward> fwd;
  std::vector<Sequence*> seqs;
  std::vector<float> prefill_logits;
};

// Decode steps of a steady batch allocate no backend memory and move a fixed number of buffers
// (ids, positions, step descriptors up; ids or logits down): what a GPU needs to replay a captured
// step, and what keeps allocation out of the per-token path. Dense and MoE, greedy ids and logits.
TEST(DeviceNeutralForward, SteadyDecodeStepsAllocateNothing) {
  for (const std::string& name : {std::string("lfm2_c_layertypes_untied_convbias_f32"), std::string("lfm2moe_f_tied_expertbias_f32")}) {
    SCOPED_TRACE(name);
    ThreadPool pool(2);
    FakeDeviceDecoder run(pool, name, false);
    test::FakeDeviceBackend& dev = run.dev;
    StateCache* cache = run.cache.get();
    std::vector<Sequence*>& seqs = run.seqs;
    StepOutput out;
    for (bool argmax : {true, false}) {
      SCOPED_TRACE(argmax ? "greedy ids" : "logits");
      int allocs = 0, ups = 0, downs = 0;
      for (int step = 0; step < 10; ++step) {
        if (step == 3) {  // the first steps of this shape may size the buffers
          allocs = dev.allocations;
          ups = dev.uploads;
          downs = dev.downloads;
        }
        std::vector<int32_t> next(seqs.size());
        std::vector<BatchItem> items;
        for (size_t i = 0; i < seqs.size(); ++i) {
          next[i] = static_cast<int32_t>(10 + step + i);
          ASSERT_TRUE(cache->reserve(*seqs[i], 1));
          items.push_back({seqs[i], std::span<const int32_t>(&next[i], 1), false, argmax});
        }
        run.fwd->step(items, out);
      }
      EXPECT_EQ(dev.allocations, allocs) << "decode steps allocated backend memory";
      const int up_per_step = (dev.uploads - ups) / 7, down_per_step = (dev.downloads - downs) / 7;
      EXPECT_EQ((dev.uploads - ups) % 7, 0);
      EXPECT_EQ((dev.downloads - downs) % 7, 0);
      // Up: ids, positions, the rows whose logits are wanted; down: ids or logits. MoE layers
      // route and group on the backend: nothing more moves.
      EXPECT_EQ(up_per_step, 3) << "uploads per decode step";
      EXPECT_EQ(down_per_step, 1) << "downloads per decode step";
    }
  }
}

// With its ops queued and replayed (what the CUDA backend does with LFM_CUDA_GRAPHS=1), a device
// backend gives the same bits, and the decode steps of a steady batch are one recorded graph
// replayed: every value they depend on goes up through uploads (ids, positions, descriptors), so
// their ops and arguments repeat. Prefill steps run op by op.
TEST(DeviceNeutralForward, DecodeStepsReplayOneRecordedGraph) {
  for (const std::string& name : {std::string("lfm2_c_layertypes_untied_convbias_f32"), std::string("lfm2moe_f_tied_expertbias_f32")}) {
    SCOPED_TRACE(name);
    ThreadPool pool(2);
    auto run = [&](bool replay, ReplayQueue::Stats* stats) {
      FakeDeviceDecoder d(pool, name, replay);
      std::vector<Sequence*>& seqs = d.seqs;
      std::vector<float> seen = d.prefill_logits;  // then every step's greedy ids and logits
      StepOutput out;
      std::vector<int32_t> next = {2, 3, 4};
      for (int step = 0; step < 24; ++step) {  // greedy: each sequence takes its argmax
        const bool greedy_ids = step >= 12;
        std::vector<BatchItem> items;
        for (size_t i = 0; i < seqs.size(); ++i) items.push_back({seqs[i], std::span<const int32_t>(&next[i], 1), false, greedy_ids});
        d.fwd->step(items, out);
        for (size_t i = 0; i < seqs.size(); ++i) {
          next[i] = greedy_ids ? out.argmax[i] : argmax(out.row(i), out.vocab);
          seen.push_back(static_cast<float>(next[i]));
          if (!greedy_ids) seen.insert(seen.end(), out.row(i), out.row(i) + out.vocab);
        }
      }
      if (stats) *stats = d.dev.replay_stats();
      return seen;
    };
    ReplayQueue::Stats stats;
    const std::vector<float> plain = run(false, nullptr), replayed = run(true, &stats);
    EXPECT_EQ(plain, replayed);
    // 3 prefills and 2 × 12 decode steps: each decode shape (logits, greedy ids) is seen, recorded
    // and then replayed; MoE layers too (routing, grouping and the experts' matmuls stay on the
    // device). Steps whose attention reaches another power of two of key splits would make new
    // graphs, which these short sequences never do.
    EXPECT_EQ(stats.flushes, 27);
    EXPECT_GE(stats.replayed, 20) << stats.eager << " op by op, " << stats.recorded << " recorded";
    EXPECT_LE(stats.recorded, 2);
  }
}

TEST(DeviceNeutralForward, ADeviceBackendGivesTheSameLogitsAsTheHostOne) {
  for (const std::string& name : {std::string("lfm2_c_layertypes_untied_convbias_f32"), std::string("lfm2moe_f_tied_expertbias_f32")}) {
    ThreadPool pool(2);
    auto host_be = make_reference_backend(pool);
    auto host_model = load_model(test::fixture_dir(name));
    test::FakeDeviceBackend dev(pool);
    LoadOptions opt;
    opt.backend = &dev;
    auto dev_model = load_model(test::fixture_dir(name), opt);
    EXPECT_EQ(dev_model->prepared_for(), &dev);
    EXPECT_NE(dev_model->weights().final_norm.device, nullptr);
    const std::vector<int32_t> ids = {1, 5, 9, 2, 7, 3};
    const auto want = test::prompt_logits(*host_model, *host_be, ids);
    const int up0 = dev.uploads;
    const auto got = test::prompt_logits(*dev_model, dev, ids);
    ASSERT_EQ(got.size(), want.size());
    for (size_t p = 0; p < want.size(); ++p) ASSERT_EQ(got[p], want[p]) << name << " position " << p;
    EXPECT_GT(dev.uploads, up0);  // ids, positions, rows moved up
    EXPECT_GT(dev.downloads, 0);  // logits (and MoE choices) came down
    // The activation observer sees the same tensors through the device backend (downloaded).
    auto observed = [&](const Model& m, Backend& be) {
      std::map<std::string, std::vector<float>> seen;
      auto cache = make_state_cache(m, test::f32_plan(), be);
      Forward fwd(m, be, *cache);
      fwd.set_observer([&](const std::string& what, const float* data, int64_t rows, int64_t cols) {
        seen[what].assign(data, data + rows * cols);
      });
      StepOutput out;
      BatchItem item{cache->open(64), ids, true};
      fwd.step(std::span<const BatchItem>(&item, 1), out);
      return seen;
    };
    const auto host_seen = observed(*host_model, *host_be), dev_seen = observed(*dev_model, dev);
    EXPECT_GT(host_seen.size(), 10u);
    EXPECT_EQ(host_seen, dev_seen);
    // A host vector handed to an op is refused, naming the op.
    std::vector<float> host(8, 1.0f);
    EXPECT_THROW(dev.add(host.data(), host.data(), 8), Error);
    // A model prepared for one backend does not run on another.
    auto cache = make_state_cache(*dev_model, test::f32_plan());
    EXPECT_THROW(Forward(*dev_model, *host_be, *cache), Error);
  }
}

// argmax_only items get the argmax of the logits they would have had (among the allowed ids),
// on the host and on a device backend, beside items that still get their logits.
TEST(DeviceNeutralForward, GreedyIdsComputedByTheBackendMatchTheLogits) {
  const std::string name = "lfm2_c_layertypes_untied_convbias_f32";
  ThreadPool pool(2);
  test::FakeDeviceBackend dev(pool);
  LoadOptions opt;
  opt.backend = &dev;
  auto dev_model = load_model(test::fixture_dir(name), opt);
  auto host_model = load_model(test::fixture_dir(name));
  auto host_be = make_reference_backend(pool);
  const std::vector<std::vector<int32_t>> prompts = {{1, 5, 9}, {2, 7}, {3, 3, 3, 8}};
  const int64_t V = host_model->config().vocab_size;
  for (bool masked : {false, true}) {
    for (auto [model, be] : {std::pair<const Model*, Backend*>{host_model.get(), host_be.get()},
                             std::pair<const Model*, Backend*>{dev_model.get(), &dev}}) {
      // References: every item's logits.
      StatePlanOptions plan = test::f32_plan();
      plan.parallel = 3;
      auto ref_cache = make_state_cache(*model, plan, *be);
      Forward ref(*model, *be, *ref_cache);
      std::vector<BatchItem> all;
      for (const auto& p : prompts) all.push_back({ref_cache->open(64), p, false, false});
      StepOutput want;
      ref.step(all, want);
      std::vector<uint8_t> allowed(static_cast<size_t>(V), 1);
      if (masked)  // forbid item 0's favourite: the next best allowed id must come
        allowed[static_cast<size_t>(argmax(want.row(0), V))] = 0;
      auto cache = make_state_cache(*model, plan, *be);
      Forward fwd(*model, *be, *cache);
      fwd.set_allowed_tokens(allowed);
      std::vector<BatchItem> items;
      for (size_t i = 0; i < prompts.size(); ++i) items.push_back({cache->open(64), prompts[i], false, i != 1});
      StepOutput got;
      fwd.step(items, got);
      for (size_t i : {size_t{0}, size_t{2}}) {
        int64_t best = -1;
        for (int64_t t = 0; t < V; ++t)
          if (allowed[t] && (best < 0 || want.row(i)[t] > want.row(i)[best])) best = t;
        EXPECT_EQ(got.argmax[i], best) << be->name() << " item " << i << (masked ? " masked" : "");
      }
      EXPECT_EQ(got.argmax[1], -1);
      ASSERT_EQ(got.n_rows[1], 1);
      EXPECT_TRUE(std::equal(want.row(1), want.row(1) + V, got.row(1))) << be->name();
    }
  }
}

}  // namespace
}  // namespace lfm
