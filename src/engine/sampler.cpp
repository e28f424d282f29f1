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

Sampler::Sampler(const SamplerParams& p) : p_(p), rng_(p.seed) {
  LFM_CHECK(p.temperature >= 0, "sampler: temperature must be >= 0, got ", p.temperature);
  LFM_CHECK(p.top_k >= 0, "sampler: top_k must be >= 0, got ", p.top_k);
  LFM_CHECK(p.top_p > 0 && p.top_p <= 1, "sampler: top_p must be in (0, 1], got ", p.top_p);
  LFM_CHECK(p.min_p >= 0 && p.min_p < 1, "sampler: min_p must be in [0, 1), got ", p.min_p);
}

int32_t Sampler::sample(const float* logits, int64_t vocab) {
  auto ok = [&](int64_t i) { return allowed_.empty() || (i < static_cast<int64_t>(allowed_.size()) && allowed_[i]); };
  if (p_.temperature == 0.0f) {
    if (allowed_.empty()) return argmax(logits, vocab);
    int64_t best = -1;
    for (int64_t i = 0; i < vocab; ++i)
      if (ok(i) && (best < 0 || logits[i] > logits[best])) best = i;
    LFM_CHECK(best >= 0, "sampler: no token is allowed");
    return static_cast<int32_t>(best);
  }
  cand_.clear();
  for (int64_t i = 0; i < vocab; ++i)
    if (ok(i)) cand_.push_back({logits[i] / p_.temperature, static_cast<int32_t>(i)});
  LFM_CHECK(!cand_.empty(), "sampler: no token is allowed");
  auto by_logit = [](const auto& a, const auto& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  };
  size_t keep = cand_.size();
  if (p_.top_k > 0 && static_cast<size_t>(p_.top_k) < keep) {
    keep = p_.top_k;
    std::partial_sort(cand_.begin(), cand_.begin() + keep, cand_.end(), by_logit);
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
  double r = std::uniform_real_distribution<double>(0.0, total)(rng_);
  for (const auto& c : cand_) {
    r -= c.first;
    if (r <= 0) return c.second;
  }
  return cand_.back().second;
}

}  // namespace lfm
