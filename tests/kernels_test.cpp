// Kernel tests: every backend op against a plain float64 computation written here, on random
// inputs of awkward sizes, and the batch/thread independence that ragged batching relies on.
// The state ops (K/V write, paged attention, short conv) are in kernels_state_test.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <chrono>
#include <mutex>
#include <random>
#include <thread>

#include "core/thread_pool.h"
#include "kernels/backend.h"
#include "kernels/cpu_backend.h"
#include "test_util.h"
#include "kernels/dequant.h"
#include "kernels/reference_ops.h"

namespace lfm {
namespace {

using test::randn;

// Every test runs on the portable reference backend and on each SIMD backend the CPU has.
class KernelsTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (!isa_supported(parse_isa(GetParam()))) GTEST_SKIP() << "CPU lacks " << GetParam();
    be_ = make_backend_for(parse_isa(GetParam()), pool_);
  }
  ThreadPool pool_{3};
  std::unique_ptr<Backend> be_;
};

TEST_P(KernelsTest, MatmulAllPlainTypesAwkwardSizes) {
  for (auto [n, out, in] : {std::tuple{1, 1, 1}, {3, 17, 33}, {7, 5, 129}, {2, 64, 7}}) {
    const auto x = randn(n * in, 1);
    const auto wf = randn(out * in, 2);
    for (DType dt : {DType::F32, DType::F16, DType::BF16}) {
      std::vector<uint16_t> w16(out * in);
      const void* data = wf.data();
      std::vector<float> wdec(wf);  // the values the kernel should see after decoding
      if (dt != DType::F32) {
        for (int i = 0; i < out * in; ++i) {
          w16[i] = dt == DType::F16 ? f32_to_f16(wf[i]) : f32_to_bf16(wf[i]);
          wdec[i] = dt == DType::F16 ? f16_to_f32(w16[i]) : bf16_to_f32(w16[i]);
        }
        data = w16.data();
      }
      TensorView w{dt, {out, in}, data, dtype_row_bytes(dt, int64_t(out) * in)};
      std::vector<float> y(n * out);
      be_->matmul(x.data(), n, w, y.data());
      for (int i = 0; i < n; ++i)
        for (int j = 0; j < out; ++j) {
          double s = 0;
          for (int k = 0; k < in; ++k) s += double(x[i * in + k]) * wdec[j * in + k];
          EXPECT_NEAR(y[i * out + j], s, 1e-5 * (1 + std::sqrt(double(in)))) << dtype_name(dt) << " " << i << "," << j;
        }
    }
  }
}

TEST_P(KernelsTest, MatmulRowsIndependentOfBatchAndThreads) {
  const int in = 100, out = 37;
  const auto x = randn(9 * in, 3);
  const auto wf = randn(out * in, 4);
  TensorView w{DType::F32, {out, in}, wf.data(), wf.size() * 4};
  std::vector<float> all(9 * out), one(out);
  be_->matmul(x.data(), 9, w, all.data());
  ThreadPool single(1);
  auto be1 = make_backend_for(parse_isa(GetParam()), single);
  for (int i = 0; i < 9; ++i) {
    be1->matmul(x.data() + i * in, 1, w, one.data());
    EXPECT_EQ(std::memcmp(one.data(), all.data() + i * out, out * 4), 0) << "row " << i;
  }
}

TEST_P(KernelsTest, RmsNorm) {
  for (int dim : {1, 7, 64, 129}) {
    const auto x = randn(3 * dim, 5, 3.0f);
    const auto w = randn(dim, 6);
    std::vector<float> y(3 * dim);
    be_->rms_norm(x.data(), w.data(), 3, dim, 1e-5f, y.data());
    for (int r = 0; r < 3; ++r) {
      double ss = 0;
      for (int i = 0; i < dim; ++i) ss += double(x[r * dim + i]) * x[r * dim + i];
      const double inv = 1.0 / std::sqrt(ss / dim + 1e-5);
      for (int i = 0; i < dim; ++i) EXPECT_NEAR(y[r * dim + i], w[i] * x[r * dim + i] * inv, 1e-5);
    }
    std::vector<float> inplace(x);
    be_->rms_norm(inplace.data(), w.data(), 3, dim, 1e-5f, inplace.data());
    EXPECT_EQ(inplace, y);
  }
}

TEST_P(KernelsTest, RopeNeoxRotatesHalves) {
  const int hd = 12, heads = 3, n = 4;
  auto x = randn(n * heads * hd, 7);
  const auto orig = x;
  std::vector<float> inv(hd / 2);
  for (int j = 0; j < hd / 2; ++j) inv[j] = 1.0f / std::pow(10000.0f, 2.0f * j / hd);
  const std::vector<int64_t> pos = {0, 5, 17, 1000};
  be_->rope_neox(x.data(), n, heads, hd, pos.data(), inv.data());
  for (int t = 0; t < n; ++t)
    for (int h = 0; h < heads; ++h)
      for (int j = 0; j < hd / 2; ++j) {
        const float* o = orig.data() + (t * heads + h) * hd;
        const double a = double(pos[t]) * inv[j];
        EXPECT_NEAR(x[(t * heads + h) * hd + j], o[j] * std::cos(a) - o[j + hd / 2] * std::sin(a), 2e-4);
        EXPECT_NEAR(x[(t * heads + h) * hd + j + hd / 2], o[j + hd / 2] * std::cos(a) + o[j] * std::sin(a), 2e-4);
      }
}

TEST_P(KernelsTest, SwigluSoftmaxElementwise) {
  const auto g = randn(37, 14, 4.0f), u = randn(37, 15);
  std::vector<float> out(37);
  be_->swiglu(g.data(), u.data(), 37, out.data());
  for (int i = 0; i < 37; ++i) EXPECT_NEAR(out[i], g[i] / (1 + std::exp(-double(g[i]))) * u[i], 1e-5);
  auto s = randn(19, 16, 10.0f);
  be_->softmax(s.data(), 19);
  double total = 0;
  for (float p : s) total += p;
  EXPECT_NEAR(total, 1.0, 1e-6);
}

INSTANTIATE_TEST_SUITE_P(Isa, KernelsTest, ::testing::ValuesIn(test::all_isas()));

TEST(ThreadPoolTest, CoversRangeExactlyOnce) {
  ThreadPool pool(4);
  for (int64_t n : {0, 1, 3, 4, 5, 1000}) {
    std::vector<int> hits(n, 0);
    pool.parallel_for(n, 1, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) ++hits[i];
    });
    for (int64_t i = 0; i < n; ++i) EXPECT_EQ(hits[i], 1);
  }
}

TEST(ThreadPoolTest, BalancedCoversEveryChunkExactlyOnce) {
  for (int threads : {1, 2, 3, 4}) {
    ThreadPool pool(threads);
    for (int64_t n : {0, 1, 5, 7, 64, 1001})
      for (int64_t chunk : {1, 3, 16, 5000}) {
        std::vector<int> hits(static_cast<size_t>(n), 0);
        std::mutex mu;
        std::vector<std::pair<int64_t, int64_t>> calls;
        pool.parallel_for_balanced(n, chunk, [&](int64_t b, int64_t e) {
          for (int64_t i = b; i < e; ++i) ++hits[static_cast<size_t>(i)];
          std::lock_guard<std::mutex> lock(mu);
          calls.emplace_back(b, e);
        });
        for (int64_t i = 0; i < n; ++i) EXPECT_EQ(hits[static_cast<size_t>(i)], 1) << threads << " " << n << " " << chunk;
        // One call per chunk, each a whole chunk (the last may be short).
        EXPECT_EQ(static_cast<int64_t>(calls.size()), (n + chunk - 1) / chunk);
        for (auto [b, e] : calls) {
          EXPECT_EQ(b % chunk, 0);
          EXPECT_EQ(e, std::min(n, b + chunk));
        }
      }
  }
}

TEST(ThreadPoolTest, BalancedHandsASlowThreadsChunksToTheOthers) {
  // The caller (thread 0) owns chunks 0..3 and stalls in its first; the worker finishes its own
  // share and takes the caller's last chunks from the far end.
  ThreadPool pool(2);
  if (pool.size() < 2) GTEST_SKIP() << "no worker thread";
  const auto caller = std::this_thread::get_id();
  std::mutex mu;
  std::vector<std::thread::id> by(8);
  pool.parallel_for_balanced(8, 1, [&](int64_t b, int64_t) {
    if (b == 0) std::this_thread::sleep_for(std::chrono::milliseconds(200));
    std::lock_guard<std::mutex> lock(mu);
    by[static_cast<size_t>(b)] = std::this_thread::get_id();
  });
  EXPECT_EQ(by[0], caller);
  for (int k = 4; k < 8; ++k) EXPECT_NE(by[static_cast<size_t>(k)], caller) << k;  // the worker's own share
  EXPECT_NE(by[3], caller);  // taken from the stalled caller's share
}

TEST(DTypeTest, HalfConversionsRoundTrip) {
  for (float f : {0.0f, -0.0f, 1.0f, -2.5f, 65504.0f, 6.1035156e-05f, 5.9604645e-08f, 0.0009765625f})
    EXPECT_EQ(f16_to_f32(f32_to_f16(f)), f) << f;
  EXPECT_EQ(f32_to_f16(1e6f), 0x7c00);             // overflow to inf
  EXPECT_EQ(f16_to_f32(0x3555), 0.333251953125f);  // nearest f16 to 1/3
  EXPECT_EQ(f32_to_f16(1.0f / 3.0f), 0x3555);
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(3.140625f)), 3.140625f);
  EXPECT_EQ(f32_to_bf16(1.00390625f), 0x3f80);  // tie rounds to even
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(std::nanf("")))));
}

}  // namespace
}  // namespace lfm
