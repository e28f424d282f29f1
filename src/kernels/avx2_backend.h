// AVX2 + FMA + F16C CPU backend: overrides the hot op (matmul) and inherits the rest from the
// reference backend. Chosen at run time when the CPU supports those instructions.
#pragma once

#include "kernels/reference_backend.h"

namespace lfm {

class Avx2Backend : public ReferenceBackend {
 public:
  using ReferenceBackend::ReferenceBackend;
  const char* name() const override { return "cpu-avx2"; }
  void matmul(const float* x, int64_t n, const TensorView& w, float* y) override;
};

bool cpu_has_avx2_fma_f16c();

// The fastest backend this CPU supports (AVX2 when available, else the reference).
std::unique_ptr<Backend> make_cpu_backend(ThreadPool& pool);

}  // namespace lfm
