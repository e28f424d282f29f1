// The AVX2 matmul against the reference on random inputs of awkward sizes, for every weight
// type, plus the property ragged batching relies on: a row's result is bitwise the same
// whatever the batch size and thread count.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "core/thread_pool.h"
#include "kernels/avx2_backend.h"
#include "kernels/dequant.h"
#include "convert/quant.h"
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

class Avx2KernelsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cpu_has_avx2_fma_f16c()) GTEST_SKIP() << "CPU lacks AVX2/FMA/F16C";
  }
  ThreadPool pool_{3};
  ReferenceBackend ref_{pool_};
  Avx2Backend avx_{pool_};
};

TEST_F(Avx2KernelsTest, MatchesReferenceForEveryType) {
  const DType types[] = {DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q4_1,
                         DType::Q5_0, DType::Q5_1, DType::Q4_K, DType::Q5_K, DType::Q6_K};
  for (DType dt : types) {
    if (!dtype_encodable(dt)) continue;
    const int64_t blk = dtype_traits(dt).block_elems;
    for (auto [n, out, in] : {std::tuple<int64_t, int64_t, int64_t>{1, 3, 1}, {5, 7, 9}, {6, 33, 41}, {9, 130, 77}}) {
      const int64_t K = (in + blk - 1) / blk * blk;  // quantized rows need whole blocks
      const Weight w = make_weight(dt, out, K, 100 + out);
      const auto x = randn(n * K, 200 + n);
      std::vector<float> a(n * out), b(n * out);
      ref_.matmul(x.data(), n, w.view, a.data());
      avx_.matmul(x.data(), n, w.view, b.data());
      for (int64_t i = 0; i < n * out; ++i)
        ASSERT_NEAR(a[i], b[i], 2e-5 * std::sqrt(double(K)) * (1 + std::abs(a[i])))
            << dtype_name(dt) << " n=" << n << " out=" << out << " in=" << K << " at " << i;
    }
  }
}

TEST_F(Avx2KernelsTest, RowsBitwiseIndependentOfBatchAndThreads) {
  for (DType dt : {DType::F32, DType::BF16, DType::F16}) {
    const int64_t out = 67, in = 203, n = 11;
    const Weight w = make_weight(dt, out, in, 7);
    const auto x = randn(n * in, 8);
    std::vector<float> all(n * out), one(out);
    avx_.matmul(x.data(), n, w.view, all.data());
    ThreadPool single(1);
    Avx2Backend avx1(single);
    for (int64_t i = 0; i < n; ++i) {
      avx1.matmul(x.data() + i * in, 1, w.view, one.data());
      EXPECT_EQ(std::memcmp(one.data(), all.data() + i * out, out * 4), 0) << dtype_name(dt) << " row " << i;
    }
    // A sub-batch in the middle (rows 3..7) equals the same rows of the full batch.
    std::vector<float> mid(5 * out);
    avx_.matmul(x.data() + 3 * in, 5, w.view, mid.data());
    EXPECT_EQ(std::memcmp(mid.data(), all.data() + 3 * out, mid.size() * 4), 0) << dtype_name(dt);
  }
}

}  // namespace
}  // namespace lfm
