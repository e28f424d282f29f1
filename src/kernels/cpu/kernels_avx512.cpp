// The AVX-512 backend (F, BW, VL, DQ, VNNI, with FMA and F16C). Every function here is compiled for that instruction set (the
// pragma below, after all headers, so shared inline and template code from headers keeps the
// baseline target and stays safe to link); make_cpu_backend only picks it when the CPU has it.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <mutex>
#include <span>
#include <utility>
#include <vector>

#include "core/aligned_buffer.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "kernels/cpu/bf16_pairs.h"
#include "kernels/cpu/packed_acts.h"
#include "kernels/cpu_features.h"
#include "kernels/cpu/simd_backends.h"
#include "kernels/dequant.h"
#include "kernels/quant_blocks.h"
#include "kernels/reference_backend.h"
#include "kernels/reference_ops.h"
#include "kernels/weight_pack.h"

#pragma GCC push_options
// GCC 12's avx512fintrin.h builds some results from a deliberately undefined register, which its
// own -Wuninitialized then reports (a known false positive in the header).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")

#include "kernels/cpu/simd_avx512.h"

namespace lfm::isa_avx512 {
using V = simd::Avx512;
#include "kernels/cpu/simd_decode.inc"
#include "kernels/cpu/simd_matmul.inc"
#include "kernels/cpu/simd_matmul_few.inc"
#include "kernels/cpu/simd_ops.inc"
#include "kernels/cpu/simd_encoder.inc"
#include "kernels/cpu/simd_attention.inc"
#include "kernels/cpu/simd_attention_drivers.inc"
#include "kernels/cpu/simd_conv.inc"
#define LFM_SIMD_VNNI 1
#define LFM_SIMD_PACKED 1
#define LFM_SIMD_BF16_PAIRS 1
#include "kernels/cpu/simd_q8.inc"
#include "kernels/cpu/simd_packed.inc"
#include "kernels/cpu/simd_backend.inc"
}  // namespace lfm::isa_avx512

namespace lfm {
float stream_read_avx512(const void* p, size_t n, size_t prefetch) {
  return isa_avx512::stream_read(static_cast<const uint8_t*>(p), n, prefetch);
}
std::unique_ptr<Backend> make_avx512_backend(ThreadPool& pool) {
  return std::make_unique<isa_avx512::SimdBackend>(pool, "cpu-avx512", Isa::kAvx512);
}
}  // namespace lfm

#pragma GCC diagnostic pop
#pragma GCC pop_options
