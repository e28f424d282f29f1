// The SIMD backends against the portable reference: matmul for every weight type on awkward
// sizes (stated tolerance: float32 reassociation, 2e-5·√K relative; for the int8 kernels also
// the activation rounding bound Σ_blocks amax/254 · Σ|w|), the SIMD row decoders
// bit-exact (a matmul with unit vectors reads back each decoded weight), and bitwise batch /
// thread / sub-batch invariance for every type. Each test runs on every SIMD level the CPU has.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "convert/quant.h"
#include "core/thread_pool.h"
#include "kernels/cpu_backend.h"
#include "kernels/dequant.h"
#include "kernels/reference_backend.h"
#include "test_util.h"

namespace lfm {
namespace {

using test::randn;

struct Weight {
  std::vector<uint8_t> bytes;
  TensorView view;
};

Weight make_weight(DType dt, int64_t out, int64_t in, uint64_t seed) {
  const auto f = randn(out * in, seed);
  Weight w;
  const size_t row = dtype_row_bytes(dt, in);
  w.bytes.resize(row * out);
  for (int64_t r = 0; r < out; ++r) quantize_row(dt, f.data() + r * in, w.bytes.data() + r * row, in);
  w.view = TensorView{dt, {out, in}, w.bytes.data(), w.bytes.size()};
  return w;
}

const DType kTypes[] = {DType::F32,  DType::F16,  DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q4_1,
                        DType::Q5_0, DType::Q5_1, DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::Q8_K};

// Types a backend multiplies with int8-quantized activations (the AVX-512 VNNI kernels).
bool integer_path(const std::string& isa, DType dt) {
  return isa == "avx512" && (dt == DType::Q4_0 || dt == DType::Q8_0);
}

// The most the int8 activation rounding can move y[t, j]: Σ over 32-blocks of
// (amax_block / 254) · Σ_block |w|, plus float32 reassociation (2e-5·√K relative).
double int8_bound(const float* x, const float* w, int64_t K, double ref) {
  double b = 0;
  for (int64_t k0 = 0; k0 < K; k0 += 32) {
    double amax = 0, wsum = 0;
    for (int64_t k = k0; k < k0 + 32; ++k) {
      amax = std::max(amax, std::abs(double(x[k])));
      wsum += std::abs(double(w[k]));
    }
    b += amax / 254.0 * wsum;
  }
  return 1.01 * b + 2e-5 * std::sqrt(double(K)) * (1 + std::abs(ref));
}

class SimdKernelsTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (!isa_supported(parse_isa(GetParam()))) GTEST_SKIP() << "CPU lacks " << GetParam();
    simd_ = make_backend_for(parse_isa(GetParam()), pool_);
  }
  ThreadPool pool_{3};
  ReferenceBackend ref_{pool_};
  std::unique_ptr<Backend> simd_;
};

TEST_P(SimdKernelsTest, MatmulMatchesReferenceForEveryType) {
  for (DType dt : kTypes) {
    const int64_t blk = dtype_traits(dt).block_elems;
    for (auto [n, out, in] : {std::tuple<int64_t, int64_t, int64_t>{1, 3, 1}, {5, 7, 9}, {6, 33, 41}, {9, 130, 77},
                              {4, 5, 300}, {17, 9, 520}}) {
      const int64_t K = (in + blk - 1) / blk * blk;  // quantized rows need whole blocks
      const Weight w = make_weight(dt, out, K, 100 + out);
      const auto x = randn(n * K, 200 + n);
      std::vector<float> a(n * out), b(n * out);
      ref_.matmul(x.data(), n, w.view, a.data());
      simd_->matmul(x.data(), n, w.view, b.data());
      std::vector<float> wrow(K);
      for (int64_t i = 0; i < n * out; ++i) {
        double tol = 2e-5 * std::sqrt(double(K)) * (1 + std::abs(a[i]));
        if (integer_path(GetParam(), dt)) {
          dequantize_row(dt, w.view.row(i % out), wrow.data(), K);
          tol = int8_bound(x.data() + (i / out) * K, wrow.data(), K, a[i]);
        }
        ASSERT_NEAR(a[i], b[i], tol) << dtype_name(dt) << " n=" << n << " out=" << out << " in=" << K << " at " << i;
      }
    }
  }
}

TEST_P(SimdKernelsTest, DecodersAreBitExact) {
  // x = the identity: y[t, j] = w[j, t] exactly (one non-zero lane, the rest sum zeros).
  for (DType dt : kTypes) {
    if (integer_path(GetParam(), dt)) continue;  // multiplies quantized activations: no decode step
    const int64_t K = dtype_traits(dt).block_elems == 1 ? 72 : 256, out = 5;
    const Weight w = make_weight(dt, out, K, 31);
    std::vector<float> eye(K * K, 0.0f), y(K * out), dec(K);
    for (int64_t t = 0; t < K; ++t) eye[t * K + t] = 1.0f;
    simd_->matmul(eye.data(), K, w.view, y.data());
    for (int64_t j = 0; j < out; ++j) {
      dequantize_row(dt, w.view.row(j), dec.data(), K);
      for (int64_t t = 0; t < K; ++t)
        ASSERT_EQ(y[t * out + j], dec[t]) << dtype_name(dt) << " row " << j << " element " << t;
    }
  }
}

TEST_P(SimdKernelsTest, RowsBitwiseIndependentOfBatchAndThreads) {
  for (DType dt : kTypes) {
    const int64_t blk = dtype_traits(dt).block_elems;
    const int64_t out = 67, in = (203 + blk - 1) / blk * blk, n = 11;
    const Weight w = make_weight(dt, out, in, 7);
    const auto x = randn(n * in, 8);
    std::vector<float> all(n * out), one(out);
    simd_->matmul(x.data(), n, w.view, all.data());
    ThreadPool single(1);
    auto simd1 = make_backend_for(parse_isa(GetParam()), single);
    for (int64_t i = 0; i < n; ++i) {
      simd1->matmul(x.data() + i * in, 1, w.view, one.data());
      ASSERT_EQ(std::memcmp(one.data(), all.data() + i * out, out * 4), 0) << dtype_name(dt) << " row " << i;
    }
    // Sub-batches of every size in the middle equal the same rows of the full batch (fused and
    // panel paths meet here: few tokens read the weights directly, many through panels).
    for (int64_t len : {2, 4, 5, 8}) {
      std::vector<float> mid(len * out);
      simd_->matmul(x.data() + 2 * in, len, w.view, mid.data());
      ASSERT_EQ(std::memcmp(mid.data(), all.data() + 2 * out, mid.size() * 4), 0) << dtype_name(dt) << " len " << len;
    }
  }
}

TEST_P(SimdKernelsTest, ElementwiseOpsMatchReference) {
  const auto g = randn(1003, 14, 6.0f), u = randn(1003, 15);
  std::vector<float> a(1003), b(1003);
  ref_.swiglu(g.data(), u.data(), 1003, a.data());
  simd_->swiglu(g.data(), u.data(), 1003, b.data());
  for (int i = 0; i < 1003; ++i) ASSERT_NEAR(a[i], b[i], 2e-6 * (1 + std::abs(a[i]))) << i;
  // Extreme gates: silu saturates without NaN.
  const std::vector<float> ext = {-200.f, -90.f, -88.5f, -87.f, 0.f, 30.f, 88.5f, 200.f, -1e30f};
  const std::vector<float> one(ext.size(), 1.0f);
  std::vector<float> e(ext.size());
  simd_->swiglu(ext.data(), one.data(), static_cast<int64_t>(ext.size()), e.data());
  for (size_t i = 0; i < ext.size(); ++i) {
    EXPECT_FALSE(std::isnan(e[i])) << ext[i];
    EXPECT_NEAR(e[i], ext[i] > 0 ? ext[i] : 0.0f, 1e-3 * std::abs(ext[i]) + 1e-6) << ext[i];
  }
  for (int dim : {1, 7, 64, 129, 2048}) {
    const auto x = randn(3 * dim, 5, 3.0f), w = randn(dim, 6);
    std::vector<float> ra(3 * dim), rb(3 * dim);
    ref_.rms_norm(x.data(), w.data(), 3, dim, 1e-5f, ra.data());
    simd_->rms_norm(x.data(), w.data(), 3, dim, 1e-5f, rb.data());
    for (int i = 0; i < 3 * dim; ++i) ASSERT_NEAR(ra[i], rb[i], 2e-6 * (1 + std::abs(ra[i]))) << dim << " " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Isa, SimdKernelsTest, ::testing::Values("avx2", "avx512"));

}  // namespace
}  // namespace lfm
