// The CUDA emulator (tests/cuda_emu/) keeps CUDA's execution rules: barriers that wait for every
// live thread of a block and release without those that returned, warp shuffles and ballots,
// graphs that replay what they captured; and it refuses what a GPU refuses or would fault on.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "cuda_emu/emu_probes.h"

namespace lfm_emu_probe {
namespace {

TEST(CudaEmu, BlockReductionsThroughShufflesAndBarriers) {
  std::vector<float> x(1000);
  std::iota(x.begin(), x.end(), 1.0f);
  const auto sums = block_sums(x, 256);
  ASSERT_EQ(sums.size(), 4u);
  const float want[] = {32896.0f, 98432.0f, 163968.0f, 205204.0f};  // 1..256, 257..512, 513..768, 769..1000
  for (int b = 0; b < 4; ++b) EXPECT_EQ(sums[static_cast<size_t>(b)], want[b]) << "block " << b;
}

// warp_reduce's and warp_reduce_each's one-exchange forms give the bits of the shuffles they
// stand for, on every lane: floats of mixed magnitudes, where another order of additions rounds
// differently.
TEST(CudaEmu, WarpReductionsInOneExchangeAreTheButterflysBits) {
  std::mt19937 rng(7);
  std::vector<float> x(96);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  for (float& v : x) v = std::ldexp(unit(rng), static_cast<int>(rng() % 24) - 12);
  const auto r = warp_reductions(x);
  ASSERT_EQ(r.size(), 7 * x.size());
  auto bits = [&](size_t i, int k) { return std::bit_cast<uint32_t>(r[7 * i + static_cast<size_t>(k)]); };
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_EQ(bits(i, 0), bits(i, 2)) << "sum, thread " << i;
    EXPECT_EQ(bits(i, 1), bits(i, 3)) << "max, thread " << i;
    EXPECT_EQ(bits(i, 4), bits(i, 2)) << "first of two sums, thread " << i;
    EXPECT_EQ(bits(i, 5), bits(i, 6)) << "second of two sums, thread " << i;
  }
  float plain = 0;  // and the butterfly is not merely the lanes' sum in order (the check can fail)
  for (size_t i = 0; i < 32; ++i) plain += x[i];
  EXPECT_NE(std::bit_cast<uint32_t>(plain), std::bit_cast<uint32_t>(r[0]));
}

TEST(CudaEmu, ABarrierReleasesWithoutThreadsThatReturned) {
  const auto seen = early_exit_barrier(128, 45);
  ASSERT_EQ(seen.size(), 45u);
  for (int v : seen) EXPECT_EQ(v, 45);
}

TEST(CudaEmu, BallotsAndBroadcastsSeeTheirWarp) {
  const auto b = ballots(96, 3);
  ASSERT_EQ(b.size(), 3u);
  for (unsigned v : b) EXPECT_EQ(v, 0x49249249u);
  const auto s = broadcasts(64, 5);
  for (size_t i = 0; i < s.size(); ++i) EXPECT_EQ(s[i], i < 32 ? 5 : 37) << i;
}

TEST(CudaEmu, FaultsAreReportedNamingTheKernel) {
  EXPECT_NE(divergent_barrier_error().find("deadlock"), std::string::npos);
  EXPECT_NE(divergent_barrier_error().find("divergent_kernel"), std::string::npos);
  const std::string oob = write_past_end_error();
  EXPECT_NE(oob.find("fill_kernel wrote past the end of a 400-byte allocation"), std::string::npos) << oob;
  EXPECT_NE(oversized_block_error().find("blocks (2048,1,1)"), std::string::npos);
}

// The cost model's trace counts what a profiler would: bytes asked for, distinct 32-byte sectors
// and the bytes of them used. Consecutive floats fill their sectors; floats 8 apart use 4 bytes of
// each (12.5%): the efficiency checks of cost_model_test.cpp can fail.
TEST(CudaEmu, TheTraceCountsTheSectorsAKernelTouches) {
  const auto dense = strided_read_trace(64, 1);
  EXPECT_EQ(dense, (std::vector<uint64_t>{256, 8, 256, 8, 1, 1}));
  const auto strided = strided_read_trace(64, 8);
  EXPECT_EQ(strided, (std::vector<uint64_t>{256, 64, 256, 8, 1, 1}));
}

// A kernel launched with programmatic dependent launch may start before the kernel ahead of it
// has finished, so its threads must not touch global memory before LFM_GRID_DEPENDENCY_WAIT: the
// emulator fails a launch whose thread announces an access before its wait, naming the kernel.
TEST(CudaEmu, ProgrammaticLaunchesMustWaitBeforeTheirAccesses) {
  EXPECT_EQ(pdl_read_error(false), "");
  const std::string e = pdl_read_error(true);
  EXPECT_NE(e.find("before LFM_GRID_DEPENDENCY_WAIT"), std::string::npos) << e;
  EXPECT_NE(e.find("pdl_double_kernel"), std::string::npos) << e;
}

TEST(CudaEmu, GraphsReplayWhatTheyCaptured) {
  EXPECT_EQ(graph_replays(3, 2.5f), 7.5f);
  EXPECT_TRUE(sync_in_capture_refused());
}

// The emulated tensor-core tiles: one tf32 product is the float sum, in k order, of the inputs'
// tf32 parts (what emu_wmma.h promises), and the three-term split the tensor-core attention uses
// is float32-accurate where one product is not.
TEST(CudaEmu, WmmaTilesMultiplyTf32PartsAndThreeTermsAreFloatAccurate) {
  std::mt19937 rng(71);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> a(128), b(128);
  for (float& x : a) x = nd(rng);
  for (float& x : b) x = nd(rng);
  const auto got = wmma_products(a, b);
  ASSERT_EQ(got.size(), 512u);
  const auto tf32 = [](float x) {  // to nearest (ties away): the 19 bits a tensor core reads
    return std::bit_cast<float>((std::bit_cast<uint32_t>(x) + 0x1000u) & 0xFFFFE000u);
  };
  double worst_one = 0, worst_three = 0;
  for (int m = 0; m < 16; ++m)
    for (int n = 0; n < 16; ++n) {
      float s = 0;
      double exact = 0, mag = 0;
      for (int k = 0; k < 8; ++k) {
        s += tf32(a[m * 8 + k]) * tf32(b[k * 16 + n]);
        exact += static_cast<double>(a[m * 8 + k]) * b[k * 16 + n];
        mag += std::fabs(static_cast<double>(a[m * 8 + k]) * b[k * 16 + n]);
      }
      ASSERT_EQ(got[m * 16 + n], s) << m << "," << n;
      worst_one = std::max(worst_one, std::fabs(got[m * 16 + n] - exact) / mag);
      worst_three = std::max(worst_three, std::fabs(got[256 + m * 16 + n] - exact) / mag);
    }
  EXPECT_LT(worst_three, 1e-6) << "three terms";
  EXPECT_GT(worst_one, 1e-5) << "one tf32 product is not float32-accurate: the split is what makes it so";
}

}  // namespace
}  // namespace lfm_emu_probe
