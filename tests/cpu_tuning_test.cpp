// The CPU-model tuning (kernels/cpu_features.h): which machines skip the one-token GEMV's
// software prefetch and widen the few-token kernel's weights in registers, and the environment
// overrides with their errors. (The kernels' results do not depend on it: SimdKernelsTest runs
// both ways.)
#include <gtest/gtest.h>

#include "core/error.h"
#include "kernels/cpu_features.h"

namespace lfm {
namespace {

CpuFeatures cpu(const char* vendor, int family, bool avx512) {
  CpuFeatures f;
  f.vendor = vendor;
  f.family = family;
  f.avx2 = f.fma = f.f16c = true;
  f.avx512f = avx512;
  return f;
}

TEST(CpuTuning, OnlyZen4WidensTheFewTokenWeightsInRegisters) {
  EXPECT_TRUE(choose_cpu_tuning(cpu("AuthenticAMD", 25, true), nullptr).few_widen_in_registers);
  EXPECT_FALSE(choose_cpu_tuning(cpu("AuthenticAMD", 26, true), nullptr).few_widen_in_registers);
  EXPECT_FALSE(choose_cpu_tuning(cpu("GenuineIntel", 6, true), nullptr).few_widen_in_registers);
  EXPECT_FALSE(choose_cpu_tuning(cpu("AuthenticAMD", 25, true), nullptr, "buffer").few_widen_in_registers);
  EXPECT_TRUE(choose_cpu_tuning(cpu("GenuineIntel", 6, true), nullptr, "registers").few_widen_in_registers);
  EXPECT_THROW(choose_cpu_tuning(CpuFeatures{}, nullptr, "1"), Error);
}

TEST(CpuTuning, OnlyZen4WidensWholeF16PanelsForThePrefillGemm) {
  EXPECT_TRUE(choose_cpu_tuning(cpu("AuthenticAMD", 25, true), nullptr).gemm_widen_f16_panels);
  EXPECT_FALSE(choose_cpu_tuning(cpu("AuthenticAMD", 26, true), nullptr).gemm_widen_f16_panels);
  EXPECT_FALSE(choose_cpu_tuning(cpu("AuthenticAMD", 25, true), nullptr, nullptr, "tiles").gemm_widen_f16_panels);
  EXPECT_TRUE(choose_cpu_tuning(cpu("GenuineIntel", 6, true), nullptr, nullptr, "panels").gemm_widen_f16_panels);
  EXPECT_THROW(choose_cpu_tuning(CpuFeatures{}, nullptr, nullptr, "yes"), Error);
}

TEST(CpuTuning, OnlyZen4StreamsTheOneTokenGemvWithoutSoftwarePrefetch) {
  EXPECT_FALSE(choose_cpu_tuning(cpu("AuthenticAMD", 25, true), nullptr).chunk_gemv_prefetch);   // Zen 4
  EXPECT_TRUE(choose_cpu_tuning(cpu("AuthenticAMD", 25, false), nullptr).chunk_gemv_prefetch);   // Zen 3
  EXPECT_TRUE(choose_cpu_tuning(cpu("AuthenticAMD", 26, true), nullptr).chunk_gemv_prefetch);    // Zen 5
  EXPECT_TRUE(choose_cpu_tuning(cpu("AuthenticAMD", 23, false), nullptr).chunk_gemv_prefetch);   // Zen 2
  EXPECT_TRUE(choose_cpu_tuning(cpu("GenuineIntel", 6, true), nullptr).chunk_gemv_prefetch);     // Xeon
  EXPECT_TRUE(choose_cpu_tuning(CpuFeatures{}, nullptr).chunk_gemv_prefetch);                    // unknown
}

TEST(CpuTuning, TheEnvironmentOverridesTheDefaultAndNamesABadValue) {
  EXPECT_TRUE(choose_cpu_tuning(cpu("AuthenticAMD", 25, true), "1").chunk_gemv_prefetch);
  EXPECT_FALSE(choose_cpu_tuning(cpu("GenuineIntel", 6, true), "0").chunk_gemv_prefetch);
  EXPECT_FALSE(choose_cpu_tuning(cpu("AuthenticAMD", 25, true), "").chunk_gemv_prefetch);  // empty: unset
  try {
    choose_cpu_tuning(CpuFeatures{}, "yes");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("LFM_GEMV_PREFETCH='yes'"), std::string::npos) << e.what();
  }
}

TEST(CpuTuning, TheDetectedCpuHasAFamilyWhereCpuidNamesAVendor) {
  const CpuFeatures& f = cpu_features();
  if (f.vendor.empty()) GTEST_SKIP() << "no CPUID vendor here";
  EXPECT_GT(f.family, 0) << f.vendor;
}

}  // namespace
}  // namespace lfm
