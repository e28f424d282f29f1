#include "cli/version.h"

#include <string>

#include "kernels/backend_factory.h"
#include "kernels/cpu_features.h"
#include "lfm_build_info.h"  // generated at build time (cmake/build_info.cmake)

namespace lfm::cli {

std::string version_text() {
  std::string t = "lfm " LFM_BUILD_VERSION " (commit " LFM_BUILD_COMMIT ")\n";
  t += "build: " + std::string(*LFM_BUILD_TYPE ? LFM_BUILD_TYPE : "no CMAKE_BUILD_TYPE");
#if defined(__clang__)
  t += ", clang " __clang_version__;
#elif defined(__GNUC__)
  t += ", g++ " __VERSION__;
#endif
  t += ", C++" + std::to_string(__cplusplus / 100 % 100) + "\n";
  // The SIMD kernels are compiled for every level in one binary and chosen at run time
  // (kernels/cpu_features.h); LFM_ISA lowers the choice.
#if (defined(__x86_64__) || defined(__i386__)) && !defined(LFM_REFERENCE_KERNELS_ONLY)
  t += "backend cpu: kernels for generic, avx2, avx512 (AMX and AVX-512 BF16 matmuls where the CPU has them)\n";
#else
  t += "backend cpu: generic kernels only\n";
#endif
#ifdef LFM_HAVE_CUDA
  t += "backend cuda: built for sm_" LFM_BUILD_CUDA_ARCHS "; ";
  std::string why;
  t += cuda_device_available(&why) ? std::string("a GPU is available here\n") : "not usable here: " + why + "\n";
#else
  t += "backend cuda: not built (no nvcc at configure time, or -DLFM_CUDA=OFF)\n";
#endif
  const CpuFeatures& f = cpu_features();
  t += "this CPU: " + std::string(isa_name(selected_isa())) + " kernels (" + f.describe() + "); " +
       (f.vendor.empty() ? std::string("vendor unknown") : f.vendor + " family " + std::to_string(f.family) +
                                                                " model " + std::to_string(f.model)) +
       "; one-token GEMV prefetch " + (cpu_tuning().chunk_gemv_prefetch ? "on" : "off") +
       " (LFM_GEMV_PREFETCH), few-token widening in " + (cpu_tuning().few_widen_in_registers ? "registers" : "a buffer") +
       " (LFM_FEW_WIDEN), F16 prefill widening per " + (cpu_tuning().gemm_widen_f16_panels ? "panel" : "tile") +
       " (LFM_GEMM_WIDEN)\n";
  return t;
}

}  // namespace lfm::cli
