// The step cost model and the prompt-token budget behind --itl-target-ms, on synthetic timings
// (deterministic: no clock is read).
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "core/error.h"
#include "engine/step_budget.h"

namespace lfm {
namespace {

// Steps of the kinds the engine runs: decode-only, prefill-only and mixed, of varied sizes.
template <typename F>
void feed(StepCostModel& m, int n, F seconds, uint32_t seed = 7) {
  std::mt19937 rng(seed);
  for (int i = 0; i < n; ++i) {
    const int kind = static_cast<int>(rng() % 3);
    const int64_t d = kind == 1 ? 0 : 1 + static_cast<int64_t>(rng() % 32);
    const int64_t p = kind == 0 ? 0 : 1 + static_cast<int64_t>(rng() % 512);
    m.observe(d, p, seconds(d, p, rng));
  }
}

// Within a fraction of a percent: the fit is regularised (weakly), not exact.
TEST(StepCostModel, RecoversLinearCosts) {
  StepCostModel m;
  feed(m, 200, [](int64_t d, int64_t p, std::mt19937&) { return 0.004 + 0.0010 * d + 0.0006 * p; });
  ASSERT_TRUE(m.ready());
  const StepCost c = m.cost();
  EXPECT_NEAR(c.fixed, 0.004, 2e-5);
  EXPECT_NEAR(c.per_decode, 0.0010, 2e-6);
  EXPECT_NEAR(c.per_prompt, 0.0006, 2e-7);
  EXPECT_NEAR(c.predict(10, 100), 0.004 + 0.010 + 0.060, 1e-5);
  EXPECT_NEAR(c.prompt_fixed, 0.0, 2e-5);
  EXPECT_LT(c.spread, 0.01);
}

// A GPU with CUDA graphs: decode-only steps replay a recorded graph, a step with a prompt chunk
// launches its kernels one by one and pays that once, whatever its size. The fit finds the
// step's extra fixed cost, and the budget leaves room for it.
TEST(StepCostModel, AStepCarryingAPromptMayCostMoreOnceForIt) {
  auto gpu = [](int64_t d, int64_t p, std::mt19937&) {
    return 0.0009 + 0.00002 * d + 0.000004 * p + (p > 0 ? 0.0006 : 0.0);
  };
  StepCostModel m;
  feed(m, 300, gpu);
  ASSERT_TRUE(m.ready());
  const StepCost c = m.cost();
  EXPECT_NEAR(c.fixed, 0.0009, 3e-5);
  EXPECT_NEAR(c.prompt_fixed, 0.0006, 3e-5);
  EXPECT_NEAR(c.per_decode, 0.00002, 1e-6);
  EXPECT_NEAR(c.per_prompt, 0.000004, 2e-7);
  EXPECT_LT(c.spread, 0.02);
  std::mt19937 rng;
  for (auto [d, p] : {std::pair<int64_t, int64_t>{64, 0}, {64, 1}, {1, 300}, {0, 40}})
    EXPECT_NEAR(c.predict(d, p), gpu(d, p, rng), 2e-5) << d << " decode, " << p << " prompt tokens";
  // 64 decoders: 2.18 ms; a 3 ms target leaves 0.82 ms, of which 0.6 go to carrying a prompt at
  // all: 55 prompt tokens, not the 205 the step's per-token costs alone would allow.
  const int64_t budget = prompt_token_budget(&c, 64, 0.003, 1, 1000);
  EXPECT_GE(budget, 50);
  EXPECT_LE(budget, 60);
}

TEST(StepCostModel, NoisyTimingsGiveCloseCosts) {
  StepCostModel m;
  feed(m, 400, [](int64_t d, int64_t p, std::mt19937& rng) {
    const double noise = 1.0 + 0.1 * (static_cast<double>(rng() % 1001) / 1000.0 - 0.5);  // ±5%
    return (0.02 + 0.003 * d + 0.002 * p) * noise;
  });
  ASSERT_TRUE(m.ready());
  const StepCost c = m.cost();
  EXPECT_NEAR(c.per_decode, 0.003, 0.0006);
  EXPECT_NEAR(c.per_prompt, 0.002, 0.0002);
  EXPECT_NEAR(c.predict(32, 0), 0.02 + 0.096, 0.012);
  // Uniform ±5% has a root mean square of 2.9%; predictions from a fit to a few dozen noisy
  // steps (mostly large ones) stray further on small steps, but of that order.
  EXPECT_GT(c.spread, 0.025);
  EXPECT_LT(c.spread, 0.08);
}

TEST(StepCostModel, NotReadyUntilStepsOfDifferentSizes) {
  StepCostModel m;
  EXPECT_FALSE(m.ready());
  for (int i = 0; i < 50; ++i) m.observe(8, 0, 0.05);  // one size: the cost per token is unknown
  EXPECT_FALSE(m.ready());
  m.observe(16, 0, 0.09);
  m.observe(4, 0, 0.03);
  EXPECT_TRUE(m.ready());
}

TEST(StepCostModel, PromptTokensCostLikeDecodeTokensUntilTheStepsTellThemApart) {
  StepCostModel m;
  for (int i = 0; i < 40; ++i) m.observe(1 + i % 16, 0, 0.01 + 0.002 * (1 + i % 16));  // no prompt tokens seen
  ASSERT_TRUE(m.ready());
  const StepCost c = m.cost();
  EXPECT_NEAR(c.per_decode, 0.002, 1e-6);
  EXPECT_NEAR(c.per_prompt, c.per_decode, 1e-9);
  EXPECT_EQ(c.prompt_fixed, 0.0);
}

TEST(StepCostModel, FollowsAMachineThatSlowsDown) {
  StepCostModel m(0.95);
  feed(m, 200, [](int64_t d, int64_t p, std::mt19937&) { return 0.004 + 0.001 * d + 0.0005 * p; });
  feed(m, 300, [](int64_t d, int64_t p, std::mt19937&) { return 0.008 + 0.002 * d + 0.001 * p; }, 11);
  const StepCost c = m.cost();
  EXPECT_NEAR(c.per_decode, 0.002, 1e-5);
  EXPECT_NEAR(c.per_prompt, 0.001, 1e-5);
}

TEST(StepCostModel, IgnoresTimingsThatAreNotDurations) {
  StepCostModel m;
  feed(m, 50, [](int64_t d, int64_t p, std::mt19937&) { return 0.004 + 0.001 * d + 0.0005 * p; });
  const int64_t n = m.steps();
  m.observe(4, 4, std::nan(""));
  m.observe(4, 4, -1.0);
  m.observe(4, 4, INFINITY);
  EXPECT_EQ(m.steps(), n);
  EXPECT_NEAR(m.cost().per_prompt, 0.0005, 1e-7);
}

TEST(StepCostModel, RejectsABadDecay) {
  EXPECT_THROW(StepCostModel(0.0), Error);
  EXPECT_THROW(StepCostModel(1.5), Error);
}

TEST(PromptTokenBudget, IsWhatTheTargetLeavesAfterTheDecodeTokens) {
  const StepCost c{0.010, 0.002, 0.001};  // 32 decoders: 74 ms
  EXPECT_EQ(prompt_token_budget(&c, 32, 0.100, 16, 512), 26);
  EXPECT_EQ(prompt_token_budget(&c, 32, 0.1745, 16, 512), 100);
  EXPECT_EQ(prompt_token_budget(&c, 0, 0.100, 16, 512), 90);
}

TEST(PromptTokenBudget, LeavesAMarginForTheSpreadOfStepTimes) {
  const StepCost c{0.010, 0.002, 0.001, 0.1};  // steps stray 10% from the fit
  // 0.1745 s / (1 + 1.65 × 0.1) = 0.14979 s: 75 prompt tokens after 74 ms of decode tokens.
  EXPECT_EQ(prompt_token_budget(&c, 32, 0.1745, 16, 512), 75);
}

TEST(PromptTokenBudget, CountsTheFixedCostOfCarryingAPrompt) {
  StepCost c{0.010, 0.002, 0.001};
  c.prompt_fixed = 0.005;  // 74 ms for 32 decoders, 5 ms more with any prompt tokens
  EXPECT_EQ(prompt_token_budget(&c, 32, 0.100, 16, 512), 21);
  EXPECT_EQ(prompt_token_budget(&c, 32, 0.080, 1, 512), 1);  // 1 ms past the target: the minimum
  c.prompt_fixed = -0.005;  // fitted below zero: counts as zero
  EXPECT_EQ(prompt_token_budget(&c, 32, 0.100, 16, 512), 26);
}

TEST(PromptTokenBudget, KeepsTheMinimumWhenTheDecodeTokensAloneExceedTheTarget) {
  const StepCost c{0.010, 0.002, 0.001};
  EXPECT_EQ(prompt_token_budget(&c, 64, 0.100, 16, 512), 16);
  EXPECT_EQ(prompt_token_budget(&c, 32, 0.080, 16, 512), 16);  // 6 fit, the minimum is 16
}

TEST(PromptTokenBudget, StaysWithinTheMaximum) {
  const StepCost c{0.010, 0.002, 0.001};
  EXPECT_EQ(prompt_token_budget(&c, 1, 10.0, 16, 512), 512);
  EXPECT_EQ(prompt_token_budget(&c, 1, 10.0, 16, 8), 8);  // a minimum past the maximum gives the maximum
  EXPECT_EQ(prompt_token_budget(&c, 64, 0.1, 16, 8), 8);
}

TEST(PromptTokenBudget, WithoutAFitGivesTheMinimum) {
  EXPECT_EQ(prompt_token_budget(nullptr, 8, 0.1, 16, 512), 16);
  const StepCost flat{0.01, 0.0, 0.0};  // a zero cost per token predicts nothing useful
  EXPECT_EQ(prompt_token_budget(&flat, 8, 0.1, 16, 512), 16);
}

}  // namespace
}  // namespace lfm
