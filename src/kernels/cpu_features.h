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
  std::string describe() const;  // "avx2 fma f16c avx512f ..." (only what is present)
};

const CpuFeatures& cpu_features();
// Whether the CPU (and OS) can run kernels of that level:
//   avx2   = AVX2 + FMA + F16C (Haswell, Zen 1 and later);
//   avx512 = AVX-512 F/BW/VL/DQ + VNNI + FMA + F16C (Ice Lake, Sapphire Rapids, Zen 4 and later).
bool isa_supported(Isa isa);
// The best supported level, lowered by LFM_ISA when set (an unknown value is an error).
Isa selected_isa();
// Parses "generic" / "avx2" / "avx512"; throws lfm::Error on anything else.
Isa parse_isa(const std::string& name);

}  // namespace lfm
