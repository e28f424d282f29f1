// The CPU backend this machine should use: the best SIMD level it supports (AVX-512, AVX2), or
// the plain reference backend; LFM_ISA lowers the level (see cpu_features.h).
#pragma once

#include <memory>

#include "kernels/backend.h"
#include "kernels/cpu/simd_backends.h"
#include "kernels/cpu_features.h"

namespace lfm {

class ThreadPool;

std::unique_ptr<Backend> make_cpu_backend(ThreadPool& pool);

}  // namespace lfm
