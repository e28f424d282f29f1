// Choosing a sampled token from a 65,536-id row: Sampler::sample on a row it holds (its best
// candidates first, the whole row sorted only when the choice depends on ids past them) against
// the device's path (Backend::top_candidates, then Sampler::sample_shortlist, fetching the row
// when needed). Rows shaped like a trained model's (Zipf-like: a few likely ids) or flat (random
// weights, where most draws reach past the candidates). `whole_rows`: the share of rows fetched.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "core/thread_pool.h"
#include "engine/sampler.h"
#include "kernels/reference_backend.h"
#include "kernels/top_candidates.h"

namespace lfm {
namespace {

constexpr int64_t kVocab = 65536;

// state.range(0): 0 flat (normal logits), 1 peaked (logit = -1.2 · ln(rank), ranks shuffled).
std::vector<std::vector<float>> rows(int64_t shape) {
  std::mt19937 rng(5);
  std::vector<std::vector<float>> out;
  for (int r = 0; r < 8; ++r) {
    std::vector<float> x(kVocab);
    if (shape == 0) {
      std::normal_distribution<float> normal;
      for (float& v : x) v = normal(rng);
    } else {
      std::vector<int32_t> rank(kVocab);
      std::iota(rank.begin(), rank.end(), 1);
      std::shuffle(rank.begin(), rank.end(), rng);
      for (int64_t i = 0; i < kVocab; ++i) x[i] = -1.2f * std::log(static_cast<float>(rank[i]));
    }
    out.push_back(std::move(x));
  }
  return out;
}

SamplingParams params(int64_t kind) {
  SamplingParams p;
  p.temperature = kind == 0 ? 1.0f : 0.8f;  // 0: pure temperature; 1: with top-p 0.95
  if (kind == 1) p.top_p = 0.95f;
  p.seed = 7;
  return p;
}

void BM_SampleWholeRow(benchmark::State& state) {
  const auto data = rows(state.range(0));
  Sampler s(params(state.range(1)), {}, kVocab);
  size_t i = 0;
  for (auto _ : state) benchmark::DoNotOptimize(s.sample(data[i++ % data.size()].data()).token);
}

void BM_SampleFromCandidates(benchmark::State& state) {
  const auto data = rows(state.range(0));
  const SamplingParams p = params(state.range(1));
  Sampler s(p, {}, kVocab);
  ThreadPool pool(1);
  ReferenceBackend be(pool);
  std::vector<Candidate> best(Backend::kMaxCandidates);
  float tail = 0;
  const CandidateRow listed{0, p.temperature};
  size_t i = 0;
  int64_t fetched = 0;
  for (auto _ : state) {
    const std::vector<float>& row = data[i++ % data.size()];
    be.top_candidates(row.data(), kVocab, &listed, 1, nullptr, Backend::kMaxCandidates, best.data(), &tail);
    benchmark::DoNotOptimize(s.sample_shortlist(best, tail, [&](float* dst) {
      ++fetched;
      std::copy(row.begin(), row.end(), dst);
    }).token);
  }
  state.counters["whole_rows"] = benchmark::Counter(static_cast<double>(fetched), benchmark::Counter::kAvgIterations);
}

// The selection alone (select_top_candidates: 256 best of 65,536 and the tail at temperature 1).
void BM_SelectTopCandidates(benchmark::State& state) {
  const auto data = rows(state.range(0));
  std::vector<Candidate> best(Backend::kMaxCandidates), scratch;
  size_t i = 0;
  for (auto _ : state)
    benchmark::DoNotOptimize(select_top_candidates(
        data[i++ % data.size()].data(), kVocab, [](int64_t) { return true; }, Backend::kMaxCandidates, 1.0f,
        best.data(), scratch));
}

// Args: (row shape: 0 flat, 1 peaked), (request: 0 temperature 1, 1 temperature 0.8 + top-p 0.95).
BENCHMARK(BM_SampleWholeRow)->ArgsProduct({{0, 1}, {0, 1}})->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_SampleFromCandidates)->ArgsProduct({{0, 1}, {0, 1}})->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_SelectTopCandidates)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace lfm
