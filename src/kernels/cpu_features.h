// What this CPU can run, detected once at startup, and which SIMD level the kernels use.
// LFM_ISA=generic|avx2|avx512 (environment) lowers the level, e.g. to test the portable path on
// a machine that has more; asking for more than the CPU has falls back to the best it supports.
#pragma once

#include <string>

namespace lfm {

enum class Isa : int { kGeneric = 0, kAvx2 = 1, kAvx512 = 2 };
const char* isa_name(Isa isa);  // "generic", "avx2", "avx512"

struct CpuFeatures {
  bool avx2 = false, fma = false, f16c = false;
  bool avx512f = false, avx512bw = false, avx512vl = false, avx512dq = false;
  bool avx512vnni = false, avx512bf16 = false, avxvnni = false;
  // CPUID's vendor string ("AuthenticAMD", "GenuineIntel"; empty off x86) and display family
  // and model (base plus extended fields: Zen 4 is AMD family 25, Zen 5 family 26).
  std::string vendor;
  int family = 0, model = 0;
  std::string describe() const;  // "avx2 fma f16c avx512f ..." (only what is present)
};

const CpuFeatures& cpu_features();

// Choices that depend on the CPU's microarchitecture rather than on its instruction set; they
// never change a result, only how fast the kernels stream (bench/RESULTS.md has the measurements).
struct CpuTuning {
  // Whether the one-token GEMV over kChunks16 panels (F32/F16/BF16 weights; simd_matmul.inc)
  // asks for the chunks ahead with software prefetches. Off on AMD Zen 4 (AVX-512, family 25),
  // whose hardware prefetcher streams one panel at a time faster without them; on elsewhere.
  bool chunk_gemv_prefetch = true;
  // Whether the few-token kernel (2-16 tokens; simd_matmul_few.inc) widens F16/BF16 weights in
  // registers as its tiles load them, rather than once per block into an L1 buffer whose stores
  // bound it on Zen 4. On for Zen 4 only, like the above.
  bool few_widen_in_registers = false;
  // Whether the prefill GEMM (5+ tokens, past the few-token kernel) over F16 chunks widens each
  // L2-sized panel to float32 once before its token tiles, rather than converting each weight
  // vector in every tile (VCVTPH2PS is slow on Zen 4; BF16's shift-widening measured level either
  // way, so it stays in the tiles). On for Zen 4 only (LFM_GEMM_WIDEN=tiles|panels overrides).
  bool gemm_widen_f16_panels = false;
};
// The tuning for a CPU, with LFM_GEMV_PREFETCH=0|1, LFM_FEW_WIDEN=buffer|registers and
// LFM_GEMM_WIDEN=tiles|panels (null or empty: unset) overriding the defaults; any other value is
// an error naming it.
CpuTuning choose_cpu_tuning(const CpuFeatures& f, const char* env_gemv_prefetch, const char* env_few_widen = nullptr,
                            const char* env_gemm_widen = nullptr);
// choose_cpu_tuning for this CPU and environment, chosen once; the kernels read it per call.
const CpuTuning& cpu_tuning();
// Replaces it (tests running a kernel both ways; not while kernels run on other threads).
void set_cpu_tuning(const CpuTuning& t);
// Whether the CPU (and OS) can run kernels of that level:
//   avx2   = AVX2 + FMA + F16C (Haswell, Zen 1 and later);
//   avx512 = AVX-512 F/BW/VL/DQ + VNNI + FMA + F16C (Ice Lake, Sapphire Rapids, Zen 4 and later).
bool isa_supported(Isa isa);
// The best supported level, lowered by LFM_ISA when set (an unknown value is an error).
Isa selected_isa();
// Parses "generic" / "avx2" / "avx512"; throws lfm::Error on anything else.
Isa parse_isa(const std::string& name);

}  // namespace lfm
