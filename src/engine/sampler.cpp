#include "engine/sampler.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace lfm {

int32_t argmax(const float* x, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i)
    if (x[i] > x[best]) best = i;
  return static_cast<int32_t>(best);
}

void SamplingParams::validate(int64_t vocab) const {
  LFM_CHECK(std::isfinite(temperature) && temperature >= 0 && temperature <= 100,
            "sampling: temperature must be in [0, 100], got ", temperature);
  LFM_CHECK(top_k >= 0, "sampling: top_k must be >= 0, got ", top_k);
  LFM_CHECK(top_p > 0 && top_p <= 1, "sampling: top_p must be in (0, 1], got ", top_p);
  LFM_CHECK(min_p >= 0 && min_p < 1, "sampling: min_p must be in [0, 1), got ", min_p);
  LFM_CHECK(std::isfinite(repetition_penalty) && repetition_penalty > 0 && repetition_penalty <= 100,
            "sampling: repetition_penalty must be in (0, 100], got ", repetition_penalty);
  LFM_CHECK(presence_penalty >= -2 && presence_penalty <= 2, "sampling: presence_penalty must be in [-2, 2], got ",
            presence_penalty);
  LFM_CHECK(frequency_penalty >= -2 && frequency_penalty <= 2,
            "sampling: frequency_penalty must be in [-2, 2], got ", frequency_penalty);
  LFM_CHECK(top_logprobs >= 0 && top_logprobs <= 20, "sampling: top_logprobs must be in [0, 20], got ",
            top_logprobs);
  for (const auto& [id, bias] : logit_bias) {
    LFM_CHECK(id >= 0 && id < vocab, "sampling: logit_bias token id ", id, " is outside the vocabulary [0, ", vocab,
              ")");
    LFM_CHECK(bias >= -100 && bias <= 100, "sampling: logit_bias for token ", id, " must be in [-100, 100], got ",
              bias);
  }
}

Sampler::Sampler(const SamplingParams& p, std::span<const int32_t> prompt, int64_t vocab,
                 const std::vector<uint8_t>* allowed)
    : p_(p), vocab_(vocab), allowed_(allowed), rng_(p.seed ? *p.seed : std::random_device{}()) {
  p_.validate(vocab);
  LFM_CHECK(!allowed || static_cast<int64_t>(allowed->size()) >= vocab, "sampling: allowed-id mask of ",
            allowed ? allowed->size() : 0, " entries for a vocabulary of ", vocab);
  if (p_.repetition_penalty != 1.0f) {
    seen_.assign(static_cast<size_t>(vocab), 0);
    for (int32_t t : prompt)
      if (t >= 0 && t < vocab) seen_[t] = 1;
  }
  work_.resize(static_cast<size_t>(vocab));
}

void Sampler::process(const float* logits) {
  float* w = work_.data();
  std::copy(logits, logits + vocab_, w);
  for (const auto& [id, bias] : p_.logit_bias) w[id] += bias;
  if (p_.repetition_penalty != 1.0f)
    for (int64_t i = 0; i < vocab_; ++i)
      if (seen_[i]) w[i] = w[i] > 0 ? w[i] / p_.repetition_penalty : w[i] * p_.repetition_penalty;
  if (p_.presence_penalty != 0.0f || p_.frequency_penalty != 0.0f)
    for (const auto& [id, n] : out_count_) w[id] -= p_.presence_penalty + p_.frequency_penalty * static_cast<float>(n);
}

int32_t Sampler::greedy_choice() const {
  const float* w = work_.data();
  int64_t best = -1;
  for (int64_t i = 0; i < vocab_; ++i)
    if (allowed(i) && (best < 0 || w[i] > w[best])) best = i;
  LFM_CHECK(best >= 0, "sampling: no token is allowed");
  return static_cast<int32_t>(best);
}

void Sampler::distribution() {
  const float* w = work_.data();
  cand_.clear();
  for (int64_t i = 0; i < vocab_; ++i)
    if (allowed(i)) cand_.push_back({w[i] / p_.temperature, static_cast<int32_t>(i)});
  LFM_CHECK(!cand_.empty(), "sampling: no token is allowed");
  auto by_logit = [](const auto& a, const auto& b) { return a.first > b.first || (a.first == b.first && a.second < b.second); };
  size_t keep = cand_.size();
  if (p_.top_k > 0 && static_cast<size_t>(p_.top_k) < keep) {
    keep = static_cast<size_t>(p_.top_k);
    std::partial_sort(cand_.begin(), cand_.begin() + static_cast<std::ptrdiff_t>(keep), cand_.end(), by_logit);
  } else {
    std::sort(cand_.begin(), cand_.end(), by_logit);
  }
  cand_.resize(keep);
  // Softmax over the kept candidates (sorted, largest first).
  const float mx = cand_[0].first;
  double sum = 0;
  for (auto& c : cand_) {
    c.first = std::exp(c.first - mx);
    sum += c.first;
  }
  for (auto& c : cand_) c.first = static_cast<float>(c.first / sum);
  if (p_.min_p > 0) {
    const float floor = cand_[0].first * p_.min_p;
    while (cand_.size() > 1 && cand_.back().first < floor) cand_.pop_back();
  }
  if (p_.top_p < 1) {
    double acc = 0;
    size_t n = 0;
    while (n < cand_.size()) {
      acc += cand_[n++].first;
      if (acc >= p_.top_p) break;
    }
    cand_.resize(n);
  }
  double total = 0;
  for (const auto& c : cand_) total += c.first;
  for (auto& c : cand_) c.first = static_cast<float>(c.first / total);
}

int32_t Sampler::draw(const TokenProbs& probs) {
  double total = 0;
  for (const auto& c : probs) total += c.first;
  double r = std::uniform_real_distribution<double>(0.0, total)(rng_);
  for (const auto& c : probs) {
    r -= c.first;
    if (r <= 0) return c.second;
  }
  return probs.back().second;
}

SampleResult Sampler::sample(const float* logits, TokenProbs* dist) {
  process(logits);
  if (dist) dist->clear();
  if (p_.temperature == 0.0f) return finish(logits, greedy_choice());
  distribution();
  if (dist) *dist = cand_;
  return finish(logits, draw(cand_));
}

SampleResult Sampler::verify(const float* logits, int32_t draft, const TokenProbs* q, bool& accepted) {
  process(logits);
  if (p_.temperature == 0.0f) {
    const int32_t t = greedy_choice();
    accepted = t == draft;
    return finish(logits, t);
  }
  distribution();
  // q as a dense row (work_ is free once the distribution is built): q[id], 0 elsewhere.
  float* qd_of = work_.data();
  std::fill(work_.begin(), work_.end(), 0.0f);
  if (q)
    for (const auto& c : *q) qd_of[c.second] = c.first;
  else
    qd_of[draft] = 1.0f;
  double pd = 0;
  for (const auto& c : cand_)
    if (c.second == draft) pd = c.first;
  const double qd = qd_of[draft];
  const double u = std::uniform_real_distribution<double>(0.0, 1.0)(rng_);
  accepted = qd > 0 && u * qd < pd;
  if (accepted) return finish(logits, draft);
  // The residual max(0, p - q) over p's support (outside it p is 0).
  residual_.clear();
  for (const auto& c : cand_) {
    const double rest = static_cast<double>(c.first) - qd_of[c.second];
    if (rest > 0) residual_.push_back({static_cast<float>(rest), c.second});
  }
  return finish(logits, draw(residual_.empty() ? cand_ : residual_));
}

Sampler Sampler::fork() {
  Sampler copy = *this;
  copy.rng_.seed(rng_());
  copy.step_mask_ = nullptr;  // a drafter's choices are not constrained (verification is)
  return copy;
}

SampleResult Sampler::finish(const float* logits, int32_t token) {
  SampleResult res;
  res.token = token;
  if (p_.logprobs || p_.top_logprobs > 0) {
    // log-softmax of the raw logits over the whole vocabulary.
    const float mx = *std::max_element(logits, logits + vocab_);
    double sum = 0;
    for (int64_t i = 0; i < vocab_; ++i) sum += std::exp(static_cast<double>(logits[i] - mx));
    const double lse = mx + std::log(sum);
    res.logprob = static_cast<float>(logits[res.token] - lse);
    if (p_.top_logprobs > 0) {
      cand_.clear();  // alternatives among the allowed ids only (others have no text to show)
      for (int64_t i = 0; i < vocab_; ++i)
        if (!allowed_ || (*allowed_)[i]) cand_.push_back({logits[i], static_cast<int32_t>(i)});
      const size_t k = std::min(cand_.size(), static_cast<size_t>(p_.top_logprobs));
      std::partial_sort(cand_.begin(), cand_.begin() + static_cast<std::ptrdiff_t>(k), cand_.end(),
                        [](const auto& a, const auto& b) { return a.first > b.first || (a.first == b.first && a.second < b.second); });
      for (size_t i = 0; i < k; ++i) res.top.push_back({cand_[i].second, static_cast<float>(cand_[i].first - lse)});
    }
  }
  ++out_count_[res.token];
  if (!seen_.empty()) seen_[res.token] = 1;
  return res;
}

bool Sampler::plain_greedy() const {
  return !masked_ && p_.temperature == 0.0f && p_.logit_bias.empty() && p_.repetition_penalty == 1.0f &&
         p_.presence_penalty == 0.0f && p_.frequency_penalty == 0.0f && !p_.logprobs && p_.top_logprobs == 0;
}

SampleResult Sampler::accept(int32_t token) {
  LFM_CHECK(token >= 0 && token < vocab_, "sampling: no token is allowed");
  SampleResult res;
  res.token = token;
  ++out_count_[token];
  if (!seen_.empty()) seen_[token] = 1;
  return res;
}

}  // namespace lfm
