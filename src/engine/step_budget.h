// The per-step prompt-token budget behind --itl-target-ms. While requests decode, every step
// delays their next token by its whole duration, so the prompt tokens that join a step are what
// the inter-token latency target leaves once the decode tokens are paid for. The step's duration
// is predicted by a linear cost model, fitted online from the steps the engine actually runs:
//   seconds ≈ fixed + per_token × (decode + prompt tokens) + extra_per_prompt × prompt tokens
//             + prompt_fixed × [the step carries prompt tokens]
// (decode rows also compute logits and attend over whole contexts, prompt rows share a chunk, so
// the two kinds may cost differently; the extra term lets the data say so and is pulled towards
// zero when the steps seen cannot tell the two apart). prompt_fixed is what a step pays once for
// carrying a prompt at all: on a GPU with CUDA graphs a decode-only step replays a recorded graph
// while one with a prompt chunk launches its kernels one by one; on a CPU it fits near zero, and
// it too is pulled towards zero until steps with and without prompts tell it apart. Recent steps
// weigh more (exponential decay), so the fit follows a machine whose speed changes (other load,
// thermal limits).
// Nothing here reads a clock: the engine passes the timings, and tests pass synthetic ones.
#pragma once

#include <cstdint>

namespace lfm {

struct StepCost {
  double fixed = 0;         // seconds per step whatever it holds
  double per_decode = 0;    // seconds per decode (or verification) token
  double per_prompt = 0;    // seconds per prompt token
  // How far recent steps strayed from the fit, relative to what it predicted (root mean square):
  // other load on the machine, and whatever the linear model misses.
  double spread = 0;
  double prompt_fixed = 0;  // seconds more for a step that carries any prompt tokens
  double predict(int64_t decode_tokens, int64_t prompt_tokens) const {
    return fixed + per_decode * static_cast<double>(decode_tokens) + per_prompt * static_cast<double>(prompt_tokens) +
           (prompt_tokens > 0 ? prompt_fixed : 0.0);
  }
};

class StepCostModel {
 public:
  // `decay`: the weight a step keeps per later step (in (0, 1]; 1: all steps weigh alike).
  explicit StepCostModel(double decay = 0.97);

  void observe(int64_t decode_tokens, int64_t prompt_tokens, double seconds);
  // True once the steps seen determine a positive cost per token: at least a few steps, of
  // different sizes.
  bool ready() const;
  // The current fit (meaningful when ready()).
  StepCost cost() const;
  int64_t steps() const { return steps_; }

 private:
  double decay_;
  int64_t steps_ = 0;
  // Decayed sums of the normal equations over features x = (1, tokens, prompt tokens, [any
  // prompt tokens]).
  static constexpr int kFeatures = 4;
  double w_ = 0;                          // Σ weight
  double sxx_[kFeatures][kFeatures] = {};  // Σ weight · x xᵀ
  double sxy_[kFeatures] = {};             // Σ weight · x · seconds
  // Decayed sums of the squared relative errors of the fit's predictions, made before each step
  // joined it.
  double err_w_ = 0, err_sq_ = 0;
};

// The prompt tokens a step with `decode_tokens` decode tokens may take so that its predicted
// duration (prompt_fixed included), with a margin of kSpreadMargin × the fit's spread, stays
// within `target_seconds`: the largest such count, but at least `min_tokens` (so prefill always progresses, even when the
// decode tokens alone exceed the target) and at most `max_tokens`. Without a usable fit (`cost`
// null) the step gets `min_tokens`.
// The margin aims at the steps' 95th percentile rather than their mean (were the errors normal):
// the target bounds the inter-token latency streams see, not its average.
inline constexpr double kSpreadMargin = 1.65;
int64_t prompt_token_budget(const StepCost* cost, int64_t decode_tokens, double target_seconds, int64_t min_tokens,
                            int64_t max_tokens);

}  // namespace lfm
