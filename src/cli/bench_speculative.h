// `lfm bench --draft ...`: speculative decoding against plain decoding of the same request, side
// by side in one run (alternating repetitions), with the acceptance figures.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/engine.h"

namespace lfm::cli {

struct SpecBenchOptions {
  Drafter drafter = Drafter::kNgram;
  int64_t max_drafts = 8;
  int64_t n_prompt = 512;  // prompt tokens
  int64_t n_gen = 128;     // generated tokens (greedy)
  int reps = 3;
  // random: random ids. copy: the output repeats part of the input, as when code is edited or a
  // document quoted: prompt = P + G + P, G being the model's own greedy continuation of P (P and
  // G a third of the prompt each), so the continuation of the second P tends to repeat G.
  std::string workload = "copy";
};

struct SpecBenchResult {
  std::vector<double> plain_tps, spec_tps;  // decode tokens/s per repetition
  int64_t drafted = 0, accepted = 0, verify_steps = 0, generated = 0;  // over the speculative runs
  bool identical = true;  // every speculative output equals the plain one
  double plain_avg() const, spec_avg() const;
};

// Runs both on `backend`: `plain_engine` has no drafts, `spec_engine` the drafter's room (and the
// draft model, for Drafter::kModel).
SpecBenchResult run_spec_bench(Engine& plain_engine, Engine& spec_engine, int64_t vocab, const SpecBenchOptions& opt);

}  // namespace lfm::cli
