// The best candidates of one row of logits, on the host: Backend::top_candidates' reference, and
// the sampler's first step on a row it holds (most rows need no sort of the whole vocabulary).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
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

// An unsigned key in the floats' order (a larger float, a larger key), -0 as +0.
inline uint32_t float_order_key(float v) {
  uint32_t b;
  v += 0.0f;  // -0 + 0 = +0
  std::memcpy(&b, &v, 4);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

// (value, id) pairs `v`, built in id order, sorted as a comparison sort by value (largest first)
// then id would: equal values (-0 as +0) by lower id. Where there are many, a stable radix sort
// of the values' order keys: one pass counts all four bytes' digits, then a scatter pass a byte
// (skipped where every key has the same digit), 256 write streams each. `scratch` is reused.
template <typename Pairs>
void sort_by_value(Pairs& v, Pairs& scratch) {
  auto better = [](const auto& a, const auto& b) { return a.first > b.first || (a.first == b.first && a.second < b.second); };
  if (v.size() < 4096) return std::sort(v.begin(), v.end(), better);
  auto key = [](float x) { return ~float_order_key(x); };  // ascending keys: descending values
  uint32_t count[4][257] = {};
  for (const auto& c : v) {
    const uint32_t k = key(c.first);
    for (int d = 0; d < 4; ++d) ++count[d][((k >> (8 * d)) & 0xFF) + 1];
  }
  scratch.resize(v.size());
  for (int d = 0; d < 4; ++d) {
    uint32_t* start = count[d];
    if (std::any_of(start + 1, start + 257, [&](uint32_t n) { return n == v.size(); })) continue;
    for (int b = 0; b < 256; ++b) start[b + 1] += start[b];
    for (const auto& c : v) scratch[start[(key(c.first) >> (8 * d)) & 0xFF]++] = c;
    v.swap(scratch);
  }
}

// best [n] = the n largest x[i] over the ids i with allowed(i), largest first, equal values by
// lower id (-0 counted as +0), then {-inf, -1}. Returns the tail: Σ exp(x/t − best/t) over the
// allowed ids not in best (float exps summed in double, in a fixed order; 0 when t = 0). `all`
// is scratch. A histogram of the values' top 12 key bits finds the bin the n-th value falls in,
// so only the ids from that bin up are sorted (a few hundred for most rows, not the vocabulary).
template <typename Allowed>
float select_top_candidates(const float* x, int64_t vocab, Allowed allowed, int64_t n, float t, Candidate* best,
                            std::vector<Candidate>& all) {
  constexpr int kBinShift = 20, kBins = 1 << (32 - kBinShift);
  auto better = [](const Candidate& a, const Candidate& b) { return a.value > b.value || (a.value == b.value && a.id < b.id); };
  uint32_t count[kBins] = {};
  int64_t n_allowed = 0;
  float top_value = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < vocab; ++i)
    if (allowed(i)) {
      ++count[float_order_key(x[i]) >> kBinShift];
      ++n_allowed;
      top_value = std::max(top_value, x[i] + 0.0f);
    }
  const size_t m = static_cast<size_t>(std::min<int64_t>(n_allowed, n));
  // The lowest bin whose ids, with those of every bin above, number at least m.
  uint32_t cut = kBins;
  for (uint64_t above = 0; cut > 0 && above < m;) above += count[--cut];
  // The ids from the cut's bin up are sorted; those below it go straight to the tail, in id order.
  all.clear();
  double sum = 0;
  const bool tail = t > 0 && m > 0;
  const float top = top_value / t;
  for (int64_t i = 0; i < vocab; ++i) {
    if (!allowed(i)) continue;
    const float v = x[i] + 0.0f;
    if (float_order_key(v) >> kBinShift >= cut)
      all.push_back({v, static_cast<int32_t>(i)});
    else if (tail)
      sum += std::exp(v / t - top);
  }
  if (m < all.size()) std::nth_element(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(m), all.end(), better);
  std::sort(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(m), better);
  std::copy(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(m), best);
  std::fill(best + m, best + n, Candidate{-std::numeric_limits<float>::infinity(), -1});
  if (tail) {  // the cut bin's ids past the m best, by id
    std::sort(all.begin() + static_cast<std::ptrdiff_t>(m), all.end(),
              [](const Candidate& a, const Candidate& b) { return a.id < b.id; });
    for (size_t i = m; i < all.size(); ++i) sum += std::exp(all[i].value / t - top);
  }
  return static_cast<float>(sum);
}

}  // namespace lfm
