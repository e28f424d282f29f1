#include "cli/bench_runs.h"

#include "engine/sampler.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <random>
#include <utility>

#include "core/error.h"
#include "core/thread_pool.h"
#include "kernels/backend_factory.h"
#include "kernels/cpu_backend.h"
#include "model/forward.h"

namespace lfm::cli {

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::vector<int32_t> random_ids(std::mt19937& rng, int64_t vocab, int64_t n) {
  std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(vocab - 1));
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (auto& t : v) t = tok(rng);
  return v;
}

// Feeds `ids` to `seq` in steps of at most 512 tokens (untimed context building).
void feed(Forward& fwd, Sequence* seq, const std::vector<int32_t>& ids, size_t from, StepOutput& out) {
  for (size_t b = from; b < ids.size(); b += 512) {
    const size_t n = std::min<size_t>(512, ids.size() - b);
    BatchItem item{seq, std::span<const int32_t>(ids.data() + b, n), false};
    fwd.step(std::span<const BatchItem>(&item, 1), out);
  }
}

}  // namespace

double BenchResult::tokens_per_second(size_t i) const {
  const int64_t tokens = test.n_prompt > 0 ? test.n_prompt : test.n_gen * test.n_seqs;
  return samples_s[i] > 0 ? static_cast<double>(tokens) / samples_s[i] : 0.0;
}

double BenchResult::ceiling() const {
  double s = 0;
  for (double c : ceiling_samples) s += c;
  return ceiling_samples.empty() ? 0 : s / static_cast<double>(ceiling_samples.size());
}

double BenchResult::avg_ts() const {
  double s = 0;
  for (size_t i = 0; i < samples_s.size(); ++i) s += tokens_per_second(i);
  return samples_s.empty() ? 0 : s / static_cast<double>(samples_s.size());
}

double BenchResult::stddev_ts() const {
  if (samples_s.size() < 2) return 0;
  const double m = avg_ts();
  double v = 0;
  for (size_t i = 0; i < samples_s.size(); ++i) v += (tokens_per_second(i) - m) * (tokens_per_second(i) - m);
  return std::sqrt(v / static_cast<double>(samples_s.size() - 1));
}

double BenchResult::avg_s() const {
  double s = 0;
  for (double x : samples_s) s += x;
  return samples_s.empty() ? 0 : s / static_cast<double>(samples_s.size());
}

double BenchResult::stddev_s() const {
  if (samples_s.size() < 2) return 0;
  const double m = avg_s();
  double v = 0;
  for (double x : samples_s) v += (x - m) * (x - m);
  return std::sqrt(v / static_cast<double>(samples_s.size() - 1));
}

std::vector<BenchResult> run_bench_tests(const Model& model, const std::vector<BenchTest>& tests, int n_threads,
                                         int reps, const StatePlanOptions& plan_in, std::string* backend_name,
                                         double* ceiling_bytes_per_s, Backend* device_backend,
                                         BenchSampling sampling) {
  const ModelConfig& cfg = model.config();
  ThreadPool pool(n_threads);
  std::unique_ptr<Backend> cpu_backend = device_backend ? nullptr : make_backend(DeviceKind::kCpu, pool);
  Backend* backend = device_backend ? device_backend : cpu_backend.get();
  if (backend_name) *backend_name = backend->name();
  // The read-bandwidth ceiling: every weight byte once, with this many threads, where a forward
  // reads it (packed matrices from their copies, whose mapped originals stay released).
  const auto ranges = model.read_ranges();
  auto read_ceiling = [&](int passes) { return device_backend ? 0.0 : measure_read_bandwidth(pool, ranges, passes); };
  if (ceiling_bytes_per_s) *ceiling_bytes_per_s = read_ceiling(3);
  // One cache for every test: room for the deepest context plus each test's tokens.
  int64_t max_ctx = 1, max_seqs = 1;
  StatePlanOptions plan = plan_in;
  plan.prefix_cache = true;
  for (const BenchTest& t : tests) {
    max_ctx = std::max(max_ctx, t.n_depth + std::max(t.n_prompt, t.n_gen) + 1);
    max_seqs = std::max(max_seqs, t.n_seqs);
  }
  plan.ctx_size = max_ctx;
  plan.parallel = max_seqs + 1;
  plan.pad_rows = backend->decode_step_max_pad();
  const StateCacheOptions opt = plan_state_cache(cfg, plan);
  auto cache = std::make_unique<StateCache>(state_shape(cfg), opt, *backend);
  Forward fwd(model, *backend, *cache);
  const StateBytes sb = cache->bytes();
  StepOutput out;
  std::mt19937 rng(1234);
  std::vector<std::pair<int64_t, std::vector<int32_t>>> depth_prefixes;  // depth → its tokens, already cached
  auto context_of = [&](int64_t depth) -> const std::vector<int32_t>& {
    for (const auto& [d, ids] : depth_prefixes)
      if (d == depth) return ids;
    std::vector<int32_t> ids = random_ids(rng, cfg.vocab_size, depth);
    Sequence* s = cache->open(max_ctx);
    feed(fwd, s, ids, 0, out);
    cache->close(s);  // its full blocks stay in the prefix cache
    depth_prefixes.push_back({depth, std::move(ids)});
    return depth_prefixes.back().second;
  };
  // A fresh sequence holding exactly the depth context: the cached blocks of the depth prefix
  // (the most recently used, so the last to be evicted) plus its last partial block.
  auto start = [&](int64_t depth) {
    Sequence* s = cache->open(max_ctx);
    if (depth == 0) return s;
    const std::vector<int32_t>& ctx = context_of(depth);
    std::vector<int32_t> probe = ctx;
    probe.push_back(0);
    const int64_t reused = cache->attach_prefix(*s, probe);
    feed(fwd, s, ctx, static_cast<size_t>(reused), out);
    return s;
  };

  std::vector<BenchResult> results;
  for (const BenchTest& t : tests) {
    BenchResult r;
    r.test = t;
    r.n_threads = pool.size();
    if (t.n_gen > 0) {
      // Weights read per step, as the kernels stream them (packed copies' sizes): all but the
      // routed experts, and of those the share a step's tokens select (expected distinct
      // experts per layer for b tokens routed at random to k of E: E · (1 − (1 − k/E)^b)); plus
      // the KV cache.
      double weights = static_cast<double>(model.read_bytes());
      if (cfg.is_moe()) {
        const double k = static_cast<double>(cfg.n_experts_used), e = static_cast<double>(cfg.n_experts);
        const double share = 1.0 - std::pow(1.0 - k / e, static_cast<double>(t.n_seqs));
        weights -= static_cast<double>(model.expert_bytes()) * (1.0 - share);
      }
      r.bytes_per_step = weights + static_cast<double>(sb.kv_per_token) * static_cast<double>(t.n_seqs) *
                                       (static_cast<double>(t.n_depth) + static_cast<double>(t.n_gen) / 2.0);
    }
    // One untimed run first (rep -1), as llama-bench warms up: the first pass pays one-time costs
    // (a GPU's library heuristics and first launches, scratch growth) that steady use never does.
    for (int rep = -1; rep < reps; ++rep) {
      const bool timed = rep >= 0;
      if (t.n_prompt > 0) {
        Sequence* s = start(t.n_depth);
        const std::vector<int32_t> ids = random_ids(rng, cfg.vocab_size, t.n_prompt);
        BatchItem item{s, ids, false};
        const auto t0 = std::chrono::steady_clock::now();
        fwd.step(std::span<const BatchItem>(&item, 1), out);
        if (timed) r.samples_s.push_back(seconds_since(t0));
        cache->close(s);
      } else {
        // The ceiling again just before each repetition (one pass of each read loop): a machine's
        // bandwidth can move by a third from one minute to the next (shared hosts), and a share
        // of the ceiling means something only when both were measured in the same minute.
        if (timed) r.ceiling_samples.push_back(read_ceiling(1));
        std::vector<Sequence*> seqs;
        for (int64_t b = 0; b < t.n_seqs; ++b) seqs.push_back(start(t.n_depth));
        std::vector<int32_t> last = random_ids(rng, cfg.vocab_size, t.n_seqs);
        std::vector<BatchItem> items(static_cast<size_t>(t.n_seqs));
        const bool greedy = sampling.temperature == 0.0f;
        SamplingParams sp;
        sp.temperature = sampling.temperature;
        sp.top_k = sampling.top_k;
        sp.top_p = sampling.top_p;
        sp.seed = 42;
        std::vector<Sampler> samplers;
        if (!greedy)
          for (int64_t b = 0; b < t.n_seqs; ++b) samplers.emplace_back(sp, std::span<const int32_t>(), cfg.vocab_size);
        const ShortlistRequest shortlist{greedy ? 0.0f : samplers[0].tail_temperature(Forward::kShortlist), {}};
        const auto t0 = std::chrono::steady_clock::now();
        for (int64_t step = 0; step < t.n_gen; ++step) {
          // Greedy ids chosen where the logits are (as the engine does for greedy requests), or
          // tokens sampled as the engine samples them; the next inputs stay a fixed pseudo-random
          // walk, so every backend and mode decodes the same ids.
          for (int64_t b = 0; b < t.n_seqs; ++b) {
            items[b] = {seqs[b], std::span<const int32_t>(&last[b], 1), false, greedy};
            if (!greedy && !sampling.whole_rows) items[b].shortlist = &shortlist;
          }
          fwd.step(items, out);
          for (size_t b = 0; b < samplers.size(); ++b)
            if (sampling.whole_rows)
              samplers[b].sample(out.row(b));
            else
              samplers[b].sample_shortlist(out.shortlist(b), out.tail(b), [&](float* row) { fwd.fetch_row(out, b, row); });
          for (int64_t b = 0; b < t.n_seqs; ++b) last[b] = static_cast<int32_t>((last[b] * 7919 + step) % cfg.vocab_size);
        }
        if (timed) r.samples_s.push_back(seconds_since(t0));
        for (Sequence* s : seqs) cache->close(s);
      }
    }
    results.push_back(std::move(r));
  }
  return results;
}

}  // namespace lfm::cli
