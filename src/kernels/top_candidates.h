// The best candidates of one row of logits, on the host: Backend::top_candidates' reference, and
// the sampler's first step on a row it holds (most rows need no sort of the whole vocabulary).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "kernels/sampling_types.h"

namespace lfm {

// log Σ exp(x[i]) over i < n: the max m, then m + log Σ exp(double(x[i] − m)) in index order.
inline double row_logsumexp(const float* x, int64_t n) {
  const float m = *std::max_element(x, x + n);
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += std::exp(static_cast<double>(x[i] - m));
  return m + std::log(sum);
}

// best [n] = the n largest x[i] over the ids i with allowed(i), largest first, equal values by
// lower id (-0 counted as +0), then {-inf, -1}. Returns the tail: Σ exp(x/t − best/t) over the
// allowed ids not in best (float exps summed in double; 0 when t = 0). `all` is scratch.
template <typename Allowed>
float select_top_candidates(const float* x, int64_t vocab, Allowed allowed, int64_t n, float t, Candidate* best,
                            std::vector<Candidate>& all) {
  auto better = [](const Candidate& a, const Candidate& b) { return a.value > b.value || (a.value == b.value && a.id < b.id); };
  all.clear();
  for (int64_t i = 0; i < vocab; ++i)
    if (allowed(i)) all.push_back({x[i] + 0.0f, static_cast<int32_t>(i)});  // +0 + (-0) = +0
  const size_t m = std::min(all.size(), static_cast<size_t>(n));
  if (m < all.size()) std::nth_element(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(m), all.end(), better);
  std::sort(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(m), better);
  std::copy(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(m), best);
  std::fill(best + m, best + n, Candidate{-std::numeric_limits<float>::infinity(), -1});
  double sum = 0;
  if (t > 0 && m > 0) {
    const float top = best[0].value / t;
    for (size_t i = m; i < all.size(); ++i) sum += std::exp(all[i].value / t - top);
  }
  return static_cast<float>(sum);
}

}  // namespace lfm
