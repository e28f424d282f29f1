#include "engine/step_budget.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace lfm {

namespace {

// Solves a x = b for a symmetric positive definite N×N a (Gaussian elimination with partial
// pivoting); false when a is singular.
template <int N>
bool solve(double (&a)[N][N], double (&b)[N], double (&x)[N]) {
  for (int c = 0; c < N; ++c) {
    int p = c;
    for (int r = c + 1; r < N; ++r)
      if (std::fabs(a[r][c]) > std::fabs(a[p][c])) p = r;
    if (!(std::fabs(a[p][c]) > 0)) return false;
    if (p != c) {
      for (int k = 0; k < N; ++k) std::swap(a[p][k], a[c][k]);
      std::swap(b[p], b[c]);
    }
    for (int r = c + 1; r < N; ++r) {
      const double f = a[r][c] / a[c][c];
      for (int k = c; k < N; ++k) a[r][k] -= f * a[c][k];
      b[r] -= f * b[c];
    }
  }
  for (int c = N - 1; c >= 0; --c) {
    double s = b[c];
    for (int k = c + 1; k < N; ++k) s -= a[c][k] * x[k];
    x[c] = s / a[c][c];
  }
  for (int c = 0; c < N; ++c)
    if (!std::isfinite(x[c])) return false;
  return true;
}

// A weak pull of the extra cost of a prompt token towards zero, as if every step had also shown
// a fraction of a prompt token costing no more than a decode token: negligible next to the prompt
// tokens of real steps, but when no step has had any (or too few to separate the two kinds) the
// two kinds of token get one cost instead of an arbitrary split.
constexpr double kPromptRidge = 0.1;
// The same for prompt_fixed, as if every step had also shown a thousandth of a step with a prompt
// costing nothing more once: when every step carries a prompt (or none does) the fixed cost is
// the steps' fixed cost, not split between the two.
constexpr double kPromptFixedRidge = 0.001;
// Keeps the equations solvable when a feature has not varied (relative to its own scale).
constexpr double kTinyRidge = 1e-9;
// Fewest steps before the fit is used.
constexpr int64_t kMinSteps = 4;

}  // namespace

StepCostModel::StepCostModel(double decay) : decay_(decay) {
  LFM_CHECK(decay > 0 && decay <= 1, "step cost model: decay must be in (0, 1], got ", decay);
}

void StepCostModel::observe(int64_t decode_tokens, int64_t prompt_tokens, double seconds) {
  if (!(seconds >= 0) || !std::isfinite(seconds) || decode_tokens < 0 || prompt_tokens < 0) return;
  if (ready()) {
    const double predicted = cost().predict(decode_tokens, prompt_tokens);
    if (predicted > 0) {
      const double e = (seconds - predicted) / predicted;
      err_w_ = err_w_ * decay_ + 1.0;
      err_sq_ = err_sq_ * decay_ + e * e;
    }
  }
  const double x[kFeatures] = {1.0, static_cast<double>(decode_tokens + prompt_tokens),
                               static_cast<double>(prompt_tokens), prompt_tokens > 0 ? 1.0 : 0.0};
  w_ = w_ * decay_ + 1.0;
  for (int i = 0; i < kFeatures; ++i) {
    for (int j = 0; j < kFeatures; ++j) sxx_[i][j] = sxx_[i][j] * decay_ + x[i] * x[j];
    sxy_[i] = sxy_[i] * decay_ + x[i] * seconds;
  }
  ++steps_;
}

StepCost StepCostModel::cost() const {
  if (w_ <= 0) return {};
  double a[kFeatures][kFeatures], b[kFeatures], t[kFeatures] = {};
  for (int i = 0; i < kFeatures; ++i) {
    for (int j = 0; j < kFeatures; ++j) a[i][j] = sxx_[i][j];
    b[i] = sxy_[i];
    a[i][i] += kTinyRidge * (sxx_[i][i] + w_);
  }
  a[2][2] += kPromptRidge * w_;
  a[3][3] += kPromptFixedRidge * w_;
  if (!solve(a, b, t)) return {};
  return {t[0], t[1], t[1] + t[2], err_w_ > 0 ? std::sqrt(err_sq_ / err_w_) : 0.0, t[3]};
}

bool StepCostModel::ready() const {
  if (steps_ < kMinSteps) return false;
  // Steps of (nearly) one size say nothing about the cost per token.
  const double mean = sxx_[0][1] / w_;
  const double var = sxx_[1][1] / w_ - mean * mean;
  if (!(var >= 0.25)) return false;
  const StepCost c = cost();
  return c.per_decode > 0 && c.per_prompt > 0;
}

int64_t prompt_token_budget(const StepCost* cost, int64_t decode_tokens, double target_seconds, int64_t min_tokens,
                            int64_t max_tokens) {
  const int64_t lo = std::min(min_tokens, max_tokens);
  if (!cost || !(cost->per_prompt > 0)) return lo;
  // predict(d, p) × (1 + margin) ≤ target, for the largest p > 0 (a prompt_fixed fitted below
  // zero, noise, counts as zero: the budget errs towards the target).
  const double room = (target_seconds / (1.0 + kSpreadMargin * cost->spread) - cost->predict(decode_tokens, 0) -
                       std::max(cost->prompt_fixed, 0.0)) /
                      cost->per_prompt;
  if (!(room > static_cast<double>(lo))) return lo;  // also NaN
  if (room >= static_cast<double>(max_tokens)) return max_tokens;
  // A millionth of a token of slack, so a target met exactly is not lost to rounding.
  return std::max(lo, static_cast<int64_t>(std::floor(room + 1e-6)));
}

}  // namespace lfm
