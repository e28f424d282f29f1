// The fixture of the CUDA backend's tests (tests/cuda/*_test.cpp): the backend under test (a GPU,
// or the CPU emulator of the CUDA runtime: gpu_under_test.h) beside the reference CPU backend, with
// helpers to move vectors up and down and to make a GPU-prepared matrix of any weight type.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "convert/quant.h"
#include "core/thread_pool.h"
#include "gpu_under_test.h"
#include "kernels/reference_backend.h"
#include "kernels/weight_set.h"
#include "test_util.h"

namespace lfm {

class CudaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (!test::gpu_present(&why)) GTEST_SKIP() << why;
    gpu_ = test::make_gpu_backend(pool_);
    ref_ = make_reference_backend(pool_);
  }
  // Host floats (or ints) into a new device buffer, and back.
  template <typename T>
  DeviceBuffer up(const std::vector<T>& v) {
    DeviceBuffer b = gpu_->allocate(v.size() * sizeof(T));
    gpu_->upload(b.data(), v.data(), v.size() * sizeof(T));
    return b;
  }
  template <typename T>
  std::vector<T> down(const DeviceBuffer& b, size_t n) {
    std::vector<T> v(n);
    gpu_->download(v.data(), b.data(), n * sizeof(T));
    return v;
  }
  static double rel_err(const std::vector<float>& a, const std::vector<float>& b) {
    double worst = 0, scale = 1e-6;
    for (float x : b) scale = std::max(scale, static_cast<double>(std::fabs(x)));
    if (a.size() != b.size()) return INFINITY;
    for (size_t i = 0; i < a.size(); ++i) {
      const double d = std::fabs(static_cast<double>(a[i]) - b[i]);
      if (std::isnan(d)) return INFINITY;
      worst = std::max(worst, d);
    }
    return worst / scale;
  }
  ThreadPool pool_{2};
  std::unique_ptr<Backend> gpu_, ref_;
};

// A matrix of `type` from random floats, as stored, in a view the GPU has prepared.
struct GpuMatrix {
  std::vector<uint8_t> bytes;
  TensorView view;
  std::unique_ptr<PreparedWeights> prepared;
};
inline GpuMatrix make_matrix(Backend& be, DType type, int64_t rows, int64_t cols, uint64_t seed) {
  GpuMatrix m;
  const auto f = test::randn(rows * cols, seed, 0.5f);
  m.bytes.resize(dtype_row_bytes(type, cols) * rows);
  for (int64_t r = 0; r < rows; ++r)
    quantize_row(type, f.data() + r * cols, m.bytes.data() + r * dtype_row_bytes(type, cols), cols);
  m.view.dtype = type;
  m.view.shape = {rows, cols};
  m.view.data = m.bytes.data();
  m.view.nbytes = m.bytes.size();
  WeightSet set;
  set.matrices.push_back(&m.view);
  m.prepared = be.prepare_weights(set);
  return m;
}

}  // namespace lfm
