#include "kernels/cpu_features.h"

#include <cstdlib>
#include <cstring>

#if (defined(__x86_64__) || defined(__i386__))
#include <cpuid.h>
#endif

#include "core/error.h"

namespace lfm {

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::kGeneric: return "generic";
    case Isa::kAvx2: return "avx2";
    case Isa::kAvx512: return "avx512";
  }
  return "?";
}

std::string CpuFeatures::describe() const {
  std::string s;
  auto add = [&](bool on, const char* name) {
    if (!on) return;
    if (!s.empty()) s += ' ';
    s += name;
  };
  add(avx2, "avx2");
  add(fma, "fma");
  add(f16c, "f16c");
  add(avx512f, "avx512f");
  add(avx512bw, "avx512bw");
  add(avx512vl, "avx512vl");
  add(avx512dq, "avx512dq");
  add(avx512vnni, "avx512vnni");
  add(avx512bf16, "avx512bf16");
  add(avxvnni, "avxvnni");
  return s.empty() ? "none" : s;
}

const CpuFeatures& cpu_features() {
  static const CpuFeatures f = [] {
    CpuFeatures c;
#if (defined(__x86_64__) || defined(__i386__)) && !defined(LFM_REFERENCE_KERNELS_ONLY)
    // (The reference-only build has no use for them, and clang 14 knows neither "f16c" nor
    // "avxvnni" here.) libgcc's detection also checks that the OS saves the AVX / AVX-512 register state (XGETBV).
    __builtin_cpu_init();
    c.avx2 = __builtin_cpu_supports("avx2");
    c.fma = __builtin_cpu_supports("fma");
    c.f16c = __builtin_cpu_supports("f16c");
    c.avx512f = __builtin_cpu_supports("avx512f");
    c.avx512bw = __builtin_cpu_supports("avx512bw");
    c.avx512vl = __builtin_cpu_supports("avx512vl");
    c.avx512dq = __builtin_cpu_supports("avx512dq");
    c.avx512vnni = __builtin_cpu_supports("avx512vnni");
    c.avx512bf16 = __builtin_cpu_supports("avx512bf16");
    c.avxvnni = __builtin_cpu_supports("avxvnni");
#endif
#if defined(__x86_64__) || defined(__i386__)
    unsigned a = 0, b = 0, cx = 0, d = 0;
    if (__get_cpuid(0, &a, &b, &cx, &d)) {
      char v[13] = {};
      std::memcpy(v, &b, 4);
      std::memcpy(v + 4, &d, 4);
      std::memcpy(v + 8, &cx, 4);
      c.vendor = v;
    }
    if (__get_cpuid(1, &a, &b, &cx, &d)) {
      const int base_family = static_cast<int>((a >> 8) & 0xF), base_model = static_cast<int>((a >> 4) & 0xF);
      c.family = base_family == 0xF ? base_family + static_cast<int>((a >> 20) & 0xFF) : base_family;
      c.model = base_family == 0xF || base_family == 6 ? base_model | static_cast<int>((a >> 12) & 0xF0) : base_model;
    }
#endif
    return c;
  }();
  return f;
}

CpuTuning choose_cpu_tuning(const CpuFeatures& f, const char* env_gemv_prefetch, const char* env_few_widen,
                            const char* env_gemm_widen) {
  CpuTuning t;
  const bool zen4 = f.vendor == "AuthenticAMD" && f.family == 25 && f.avx512f;
  t.chunk_gemv_prefetch = !zen4;
  t.few_widen_in_registers = zen4;
  t.gemm_widen_f16_panels = zen4;
  if (env_gemv_prefetch && *env_gemv_prefetch) {
    const std::string v = env_gemv_prefetch;
    if (v != "0" && v != "1") fail("kernels: LFM_GEMV_PREFETCH='", v, "' is not 0 or 1");
    t.chunk_gemv_prefetch = v == "1";
  }
  if (env_few_widen && *env_few_widen) {
    const std::string v = env_few_widen;
    if (v != "buffer" && v != "registers") fail("kernels: LFM_FEW_WIDEN='", v, "' is not buffer or registers");
    t.few_widen_in_registers = v == "registers";
  }
  if (env_gemm_widen && *env_gemm_widen) {
    const std::string v = env_gemm_widen;
    if (v != "tiles" && v != "panels") fail("kernels: LFM_GEMM_WIDEN='", v, "' is not tiles or panels");
    t.gemm_widen_f16_panels = v == "panels";
  }
  return t;
}

namespace {
CpuTuning& tuning_slot() {
  static CpuTuning t = choose_cpu_tuning(cpu_features(), std::getenv("LFM_GEMV_PREFETCH"), std::getenv("LFM_FEW_WIDEN"),
                                         std::getenv("LFM_GEMM_WIDEN"));
  return t;
}
}  // namespace

const CpuTuning& cpu_tuning() { return tuning_slot(); }
void set_cpu_tuning(const CpuTuning& t) { tuning_slot() = t; }

bool isa_supported(Isa isa) {
#ifdef LFM_REFERENCE_KERNELS_ONLY
  // A build without the SIMD kernels (the fuzzing build: clang 14 rejects some of their
  // CPU-feature names) runs everything on the reference backend.
  if (isa != Isa::kGeneric) return false;
#endif
  const CpuFeatures& c = cpu_features();
  switch (isa) {
    case Isa::kGeneric: return true;
    case Isa::kAvx2: return c.avx2 && c.fma && c.f16c;
    case Isa::kAvx512:
      return c.avx2 && c.fma && c.f16c && c.avx512f && c.avx512bw && c.avx512vl && c.avx512dq && c.avx512vnni;
  }
  return false;
}

Isa parse_isa(const std::string& name) {
  if (name == "generic") return Isa::kGeneric;
  if (name == "avx2") return Isa::kAvx2;
  if (name == "avx512") return Isa::kAvx512;
  fail("kernels: LFM_ISA='", name, "' is not one of generic, avx2, avx512");
}

Isa selected_isa() {
  Isa best = Isa::kGeneric;
  for (Isa i : {Isa::kAvx2, Isa::kAvx512})
    if (isa_supported(i)) best = i;
  if (const char* env = std::getenv("LFM_ISA"); env && *env) {
    const Isa want = parse_isa(env);
    if (static_cast<int>(want) < static_cast<int>(best)) best = want;
  }
  return best;
}

}  // namespace lfm
