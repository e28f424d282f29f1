// The sampling ops (Backend::edit_logits, top_candidates, logsumexp_rows) against plain loops written
// here: on every CPU backend, the fake device and (tests/cuda) the GPU. Awkward vocabularies, ties
// at the cut (values rounded to halves), both zeros, an allowed-id mask, fewer allowed ids than
// candidates, listed rows out of order, and n = 1, 7 and 256.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "kernels/backend.h"

namespace lfm::test {

inline void check_sampling_ops(Backend& be) {
  auto put = [&](const auto& v) {
    DeviceBuffer b = be.allocate(v.size() * sizeof(v[0]));
    be.upload(b.data(), v.data(), v.size() * sizeof(v[0]));
    return b;
  };
  auto get = [&](const DeviceBuffer& b, auto& v) { be.download(v.data(), b.data(), v.size() * sizeof(v[0])); };
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  for (const int64_t vocab : {int64_t{300}, int64_t{70001}}) {
    const int64_t rows = 5;
    std::vector<float> logits(static_cast<size_t>(rows * vocab));
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t i = 0; i < vocab; ++i) {
        float v = normal(rng);
        if (r % 2 == 1) v = std::round(v * 2) / 2;  // many equal values: ties at the cut
        if (r == 3 && i % 5 == 0) v = (i % 10 == 0) ? -0.0f : 0.0f;
        logits[static_cast<size_t>(r * vocab + i)] = v;
      }
    // Edits: distinct (row, id), every kind of change, penalties on both signs.
    std::vector<LogitEdit> edits;
    for (int64_t k = 0; k < 40; ++k)
      edits.push_back({static_cast<int32_t>(k % rows), static_cast<int32_t>((k * 7919) % vocab),
                       k % 3 == 0 ? 1.5f : 0.0f, k % 2 == 0 ? 1.3f : 1.0f, k % 4 == 1 ? 0.75f : 0.0f});
    std::vector<float> want = logits;
    for (const LogitEdit& e : edits) {
      float& w = want[static_cast<size_t>(e.row * vocab + e.id)];
      w += e.add;
      if (e.penalty != 1.0f) w = w > 0 ? w / e.penalty : w * e.penalty;
      w -= e.sub;
    }
    // Padding among them (id kPaddingEdit, with values that would change a logit): no effect.
    for (int64_t k = 0; k < 9; ++k)
      edits.insert(edits.begin() + static_cast<std::ptrdiff_t>(k * 4),
                   LogitEdit{static_cast<int32_t>(k % rows), kPaddingEdit, 3.0f, 2.0f, 1.0f});
    DeviceBuffer dl = put(logits), de = put(edits);
    be.edit_logits(dl.as<float>(), vocab, de.as<LogitEdit>(), static_cast<int64_t>(edits.size()));
    std::vector<float> edited(logits.size());
    get(dl, edited);
    ASSERT_EQ(0, std::memcmp(edited.data(), want.data(), want.size() * sizeof(float))) << "edit_logits, vocab " << vocab;

    std::vector<uint8_t> allowed(static_cast<size_t>(vocab), 1), few(static_cast<size_t>(vocab), 0);
    for (int64_t i = 0; i < vocab; i += 3) allowed[static_cast<size_t>(i)] = 0;
    for (int64_t i = 0; i < 5; ++i) few[static_cast<size_t>(i * vocab / 5 + 1)] = 1;
    const std::vector<CandidateRow> listed = {{3, 0.7f}, {0, 1.0f}, {4, 0.0f}, {1, 1.9f}, {2, 0.3f}};
    DeviceBuffer dr = put(listed), da = put(allowed), df = put(few);
    for (const int64_t n : {int64_t{1}, int64_t{7}, Backend::kMaxCandidates})
      for (int mask = 0; mask < 3; ++mask) {
        const auto count = static_cast<int64_t>(listed.size());
        const std::vector<uint8_t>* flags = mask == 0 ? nullptr : mask == 1 ? &allowed : &few;
        DeviceBuffer db = be.allocate(static_cast<size_t>(count * n) * sizeof(Candidate)),
                     dt = be.allocate(static_cast<size_t>(count) * sizeof(float));
        be.top_candidates(dl.as<float>(), vocab, dr.as<CandidateRow>(), count,
                          mask == 0 ? nullptr : mask == 1 ? da.as<uint8_t>() : df.as<uint8_t>(), n,
                          db.as<Candidate>(), dt.as<float>());
        std::vector<Candidate> best(static_cast<size_t>(count * n));
        std::vector<float> tail(static_cast<size_t>(count));
        get(db, best), get(dt, tail);
        for (int64_t r = 0; r < count; ++r) {
          const float* x = want.data() + listed[r].row * vocab;
          std::vector<std::pair<float, int32_t>> all;
          for (int64_t i = 0; i < vocab; ++i)
            if (!flags || (*flags)[static_cast<size_t>(i)]) all.push_back({x[i] + 0.0f, static_cast<int32_t>(i)});
          std::sort(all.begin(), all.end(),
                    [](const auto& a, const auto& b) { return a.first > b.first || (a.first == b.first && a.second < b.second); });
          const std::string where = "vocab " + std::to_string(vocab) + " n " + std::to_string(n) + " mask " +
                                    std::to_string(mask) + " listed row " + std::to_string(r);
          for (int64_t j = 0; j < n; ++j) {
            const Candidate& c = best[static_cast<size_t>(r * n + j)];
            if (j < static_cast<int64_t>(all.size())) {
              ASSERT_EQ(c.id, all[static_cast<size_t>(j)].second) << where << " rank " << j;
              ASSERT_EQ(0, std::memcmp(&c.value, &all[static_cast<size_t>(j)].first, sizeof(float)))
                  << where << " rank " << j << ": " << c.value;
            } else {
              ASSERT_EQ(c.id, -1) << where << " rank " << j;
              ASSERT_EQ(c.value, -std::numeric_limits<float>::infinity()) << where;
            }
          }
          double sum = 0;
          const float t = listed[r].temperature;
          if (t > 0)
            for (size_t j = static_cast<size_t>(n); j < all.size(); ++j)
              sum += std::exp(static_cast<double>(all[j].first / t - all[0].first / t));
          ASSERT_NEAR(tail[static_cast<size_t>(r)], sum, 1e-5 * sum + 1e-30) << where;
        }
      }
    // logsumexp_rows over every id of listed rows (out of order, one twice): the float differences
    // exps summed in long double here, in double in any order there.
    const std::vector<int32_t> lse_rows = {4, 1, 1, 0};
    DeviceBuffer dlr = put(lse_rows), dlse = be.allocate(lse_rows.size() * sizeof(double));
    be.logsumexp_rows(dl.as<float>(), vocab, dlr.as<int32_t>(), static_cast<int64_t>(lse_rows.size()), dlse.as<double>());
    std::vector<double> lse(lse_rows.size());
    get(dlse, lse);
    for (size_t k = 0; k < lse_rows.size(); ++k) {
      const float* x = want.data() + lse_rows[k] * vocab;
      const float m = *std::max_element(x, x + vocab);
      long double sum = 0;
      for (int64_t i = 0; i < vocab; ++i) sum += std::exp(static_cast<long double>(x[i] - m));  // a float difference
      ASSERT_NEAR(lse[k], static_cast<double>(m + std::log(sum)), 1e-12) << "logsumexp_rows, vocab " << vocab << " row " << lse_rows[k];
    }
  }
}

}  // namespace lfm::test
