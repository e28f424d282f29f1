// The device-neutral row ops of the Backend interface (issue 36): the row, MoE, encoder, segment
// and speech-encoder ops a model runs between the big ops, on every CPU backend (and the fake
// device where noted) against plain loops written here. The device side (memory, the factory,
// Forward over a device backend) is in device_neutral_test.cpp.
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

}  // namespace
}  // namespace lfm
