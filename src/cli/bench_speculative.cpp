#include "cli/bench_speculative.h"

#include <numeric>
#include <random>

#include "core/error.h"

namespace lfm::cli {
namespace {

struct Run {
  std::vector<int32_t> tokens;
  Usage usage;
};

Run generate(Engine& engine, const std::vector<int32_t>& prompt, int64_t n, Drafter drafter, int64_t max_drafts) {
  Request req;
  req.prompt = prompt;
  req.max_tokens = n;
  req.ignore_eos = true;
  req.drafter = drafter;
  req.max_drafts = max_drafts;
  auto stream = engine.submit(req);
  Run r;
  Event ev;
  while (stream->next(ev)) {
    if (ev.kind == Event::Kind::kToken) r.tokens.push_back(ev.token);
    if (ev.kind == Event::Kind::kDone) {
      LFM_CHECK(ev.finish != FinishReason::kError, ev.error);
      r.usage = ev.usage;
    }
  }
  return r;
}

double decode_tps(const Usage& u) {
  const double s = u.total_seconds - u.first_token_seconds;
  return s > 0 ? static_cast<double>(u.completion_tokens - 1) / s : 0;
}

double mean(const std::vector<double>& v) { return v.empty() ? 0 : std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size()); }

}  // namespace

double SpecBenchResult::plain_avg() const { return mean(plain_tps); }
double SpecBenchResult::spec_avg() const { return mean(spec_tps); }

SpecBenchResult run_spec_bench(Engine& plain_engine, Engine& spec_engine, int64_t vocab, const SpecBenchOptions& o) {
  LFM_CHECK(o.workload == "random" || o.workload == "copy", "bench: unknown --spec-workload '", o.workload,
            "' (use random or copy)");
  LFM_CHECK(o.n_prompt >= 3 && o.n_gen >= 2, "bench: a speculative comparison needs -p ≥ 3 and -n ≥ 2");
  std::mt19937 rng(7);
  std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(vocab - 1));
  std::vector<int32_t> prompt;
  if (o.workload == "random") {
    for (int64_t i = 0; i < o.n_prompt; ++i) prompt.push_back(tok(rng));
  } else {
    std::vector<int32_t> p;
    for (int64_t i = 0; i < o.n_prompt / 3; ++i) p.push_back(tok(rng));
    const Run g = generate(plain_engine, p, o.n_prompt - 2 * (o.n_prompt / 3), Drafter::kNone, 0);  // untimed
    prompt = p;
    prompt.insert(prompt.end(), g.tokens.begin(), g.tokens.end());
    prompt.insert(prompt.end(), p.begin(), p.end());
  }
  SpecBenchResult res;
  // An untimed warm-up of each (page-in, first allocations, the prompt into both prefix caches).
  generate(plain_engine, prompt, 2, Drafter::kNone, 0);
  generate(spec_engine, prompt, 2, o.drafter, o.max_drafts);
  for (int r = 0; r < o.reps; ++r) {
    const Run plain = generate(plain_engine, prompt, o.n_gen, Drafter::kNone, 0);
    const Run spec = generate(spec_engine, prompt, o.n_gen, o.drafter, o.max_drafts);
    res.plain_tps.push_back(decode_tps(plain.usage));
    res.spec_tps.push_back(decode_tps(spec.usage));
    res.identical = res.identical && plain.tokens == spec.tokens;
    res.drafted += spec.usage.drafted_tokens;
    res.accepted += spec.usage.accepted_tokens;
    res.verify_steps += spec.usage.verify_steps;
    res.generated += spec.usage.completion_tokens;
  }
  return res;
}

}  // namespace lfm::cli
