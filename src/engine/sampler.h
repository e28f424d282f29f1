// Token selection for one request, from one logits row per step:
//   allowed ids → logit_bias → repetition / presence / frequency penalties → greedy (temperature 0)
//   or temperature → top-k → softmax → min-p → top-p → a draw from the request's own generator.
// The generator is seeded per request (a given seed, or a random one), so the same request with
// the same seed gives the same tokens whatever else is in the batch. Logprobs are those of the
// model's own distribution (log-softmax of the raw logits), as vLLM reports by default.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <random>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kernels/sampling_types.h"

namespace lfm {

struct SamplingParams {
  float temperature = 0.0f;         // 0: greedy (argmax)
  int top_k = 0;                    // 0: off
  float top_p = 1.0f;               // 1: off
  float min_p = 0.0f;               // 0: off
  float repetition_penalty = 1.0f;  // > 1 discourages ids seen in the prompt or output (HF/vLLM rule)
  float presence_penalty = 0.0f;    // subtracted once from ids present in the output (OpenAI rule)
  float frequency_penalty = 0.0f;   // subtracted per occurrence in the output (OpenAI rule)
  std::vector<std::pair<int32_t, float>> logit_bias;  // added to those ids' logits
  std::optional<uint64_t> seed;     // unset: a random seed
  int top_logprobs = 0;             // alternatives reported per token (0 to 20)
  bool logprobs = false;            // report the chosen token's logprob

  // Throws lfm::Error naming the first bad field (ids are checked against `vocab`).
  void validate(int64_t vocab) const;
};

struct TokenLogprob {
  int32_t token = -1;
  float logprob = 0;
};

// A distribution over token ids after the request's processing: (probability, id), the
// probabilities summing to one, most likely first. Empty for a greedy choice.
using TokenProbs = std::vector<std::pair<float, int32_t>>;

struct SampleResult {
  int32_t token = -1;
  float logprob = 0;                // when logprobs or top_logprobs were asked for
  std::vector<TokenLogprob> top;    // top_logprobs alternatives, most likely first
};

class Sampler {
 public:
  // `prompt` feeds the repetition penalty; `allowed` (optional, size >= vocab) marks the ids that
  // may be chosen (e.g. those the tokenizer can decode).
  Sampler(const SamplingParams& p, std::span<const int32_t> prompt, int64_t vocab,
          const std::vector<uint8_t>* allowed = nullptr);

  // Chooses the next token from logits[vocab] and records it as output. With `dist`, also the
  // distribution it was drawn from (empty when greedy): a draft model's q for verification.
  SampleResult sample(const float* logits, TokenProbs* dist = nullptr);

  // Sampling from the step's summary of the row (Backend::top_candidates over the row after
  // logit_edits): `best` its candidates, best first (id -1 past the allowed ids), `tail` the mass
  // exp(l/T - best/T) of the allowed ids not among them. The same token as sample() on the whole
  // row with the same seed (up to the tail's summation order); `full_row` writes the whole row
  // after the edits into its argument, and is called only when the choice depends on ids past
  // the candidates (a draw in the tail, a top-p or min-p boundary beyond them; under a grammar,
  // no candidate its step mask allows, or a draw that depends on how much of the tail it allows).
  // A request with logprobs (no edits then) also needs its row's logsumexp
  // (Backend::logsumexp_rows): the logprobs are then those finish() computes from the row.
  SampleResult sample_shortlist(std::span<const Candidate> best, float tail,
                                const std::function<void(float*)>& full_row,
                                double logsumexp = std::numeric_limits<double>::quiet_NaN());
  bool wants_logprobs() const { return p_.logprobs || p_.top_logprobs > 0; }
  // Whether the request changes logits before choosing (bias, repetition or presence/frequency
  // penalty): what logit_edits lists.
  bool edits_logits() const;
  // Whether sample_shortlist can serve this request with `n` candidates: top_k within n, not
  // plain greedy (argmax_rows serves that), and with logprobs only without edits (bias,
  // penalties) and with top_logprobs within n.
  bool samples_from_shortlist(int64_t n) const;
  // This step's changes to the raw logits (bias, repetition and presence/frequency penalties) as
  // Backend::edit_logits edits of row 0, one per id, replacing `out`.
  void logit_edits(std::vector<LogitEdit>& out) const;
  // The temperature of the candidates' tail mass (Backend::top_candidates), 0 where the tail
  // cannot matter (greedy, or top_k within the `n` candidates): no exps over the rest of the row.
  // (Under a grammar the k best allowed ids may reach past the candidates: the tail is needed.)
  float tail_temperature(int64_t n) const {
    return p_.top_k > 0 && p_.top_k <= n && !masked_ ? 0.0f : p_.temperature;
  }

  // Speculative decoding: the token at a position where a drafter proposed `draft`, drawn from
  // its distribution `q` (null: the drafter always proposes it, as prompt lookup does). Greedy:
  // the greedy choice, accepted when it is the draft. Sampled: the standard rejection rule:
  // accept the draft with probability min(1, p(draft) / q(draft)), else draw from the
  // normalised max(0, p - q); the token is then distributed exactly as sample()'s. Records it.
  SampleResult verify(const float* logits, int32_t draft, const TokenProbs* q, bool& accepted);

  // A copy for drafting ahead (same history and settings) with its own generator, seeded from
  // this one's: drafts never disturb this sampler, and a fixed seed still fixes everything.
  Sampler fork();

  // Whether the choice is the argmax of the raw logits over the allowed ids (greedy, no bias,
  // penalties or logprobs): then the backend may choose (Backend::argmax_rows) and `accept`
  // records its choice, the same token sample() would give.
  bool plain_greedy() const;
  // Constrained decoding: from now on every choice is also limited to the ids set in a per-step
  // bitset (grammar/grammar_matcher.h), given before each sample() / verify() by set_step_mask.
  void use_step_masks() { masked_ = true; }
  void set_step_mask(const uint64_t* bits) { step_mask_ = bits; }
  bool greedy() const { return p_.temperature == 0.0f; }
  SampleResult accept(int32_t token);

 private:
  // Processed logits (bias, penalties) into work_.
  void process(const float* logits);
  int32_t greedy_choice() const;
  // The processed distribution (temperature, top-k, min-p, top-p) of work_ into cand_, normalised.
  void distribution();
  // cand_ (logit / T, best first) shaped into the distribution to draw from: top-k, softmax,
  // min-p, top-p, normalised. `tail`: the mass exp(l/T - best/T) of the allowed ids not in cand_.
  // Returns the tail's share of the result (0: none), or nullopt when the result depends on ids
  // past cand_.
  std::optional<double> shape(double tail);
  // The token from a row's best candidates (see sample_shortlist).
  int32_t from_candidates(std::span<const Candidate> best, float tail, const std::function<void(float*)>& full_row);
  // The id at u ∈ [0, 1) of the cumulative distribution (probs then a tail of share `rest`), or
  // nullopt when it falls in the tail.
  static std::optional<int32_t> draw(const TokenProbs& probs, double u, double rest = 0);
  double uniform() { return std::uniform_real_distribution<double>(0.0, 1.0)(rng_); }
  void mark_seen(int32_t token) {
    if (!seen_.empty() && !seen_[token]) seen_[token] = 1, seen_ids_.push_back(token);
  }
  SampleResult finish(const float* logits, int32_t token);  // logprobs, then records the token
  SampleResult finish_from_candidates(std::span<const Candidate> best, int32_t token, double logsumexp);
  bool allowed(int64_t i) const {
    return (!allowed_ || (*allowed_)[i]) && (!step_mask_ || ((step_mask_[i >> 6] >> (i & 63)) & 1));
  }

  SamplingParams p_;
  int64_t vocab_;
  const std::vector<uint8_t>* allowed_;
  bool masked_ = false;
  const uint64_t* step_mask_ = nullptr;
  std::mt19937_64 rng_;
  std::vector<uint8_t> seen_;                       // in prompt or output (repetition penalty)
  std::vector<int32_t> seen_ids_;                   // the ids set in seen_
  std::unordered_map<int32_t, int32_t> out_count_;  // output occurrences (presence/frequency)
  std::vector<float> work_;
  TokenProbs cand_, residual_, sort_scratch_;
  std::vector<Candidate> best_, scratch_;  // sample()'s candidates of the row it holds
};

// Index of the largest value; the lowest index wins ties.
int32_t argmax(const float* x, int64_t n);

}  // namespace lfm
