// The measurements behind `lfm bench`, shaped like llama-bench's tests so the two tools compare
// row by row: pp N (one prefill step of N tokens) and tg N (N single-token decode steps, for B
// sequences at once), each on top of an optional context of D tokens (n_depth).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "model/model.h"
#include "model/state_plan.h"

namespace lfm::cli {

struct BenchTest {
  int64_t n_prompt = 0;   // pp test when > 0
  int64_t n_gen = 0;      // tg test when > 0
  int64_t n_depth = 0;    // context tokens already in the state
  int64_t n_seqs = 1;     // sequences decoded together (tg)
};

// How the tg tests choose each token: greedy where the logits are (temperature 0, the default),
// else sampled at `temperature` from the candidates the step sends down, or (whole_rows) from
// whole rows of logits, the path of requests that want logprobs or a grammar.
struct BenchSampling {
  float temperature = 0.0f;
  int top_k = 0;
  float top_p = 1.0f;
  bool whole_rows = false;
};

struct BenchResult {
  BenchTest test;
  int n_threads = 0;
  std::vector<double> samples_s;  // one per repetition
  double tokens_per_second(size_t i) const;
  double avg_ts() const, stddev_ts() const, avg_s() const, stddev_s() const;
  // Bytes a timed step reads (weights + K/V), for tg; 0 for pp.
  double bytes_per_step = 0;
  // tg: the read-bandwidth ceiling (bytes/s) measured just before each repetition, and their mean.
  std::vector<double> ceiling_samples;
  double ceiling() const;
};

// Runs `tests` (each `reps` times) with one thread pool of n_threads. Depth prefixes are
// prefilled once per depth (chunks of 512 tokens, untimed) and shared through the prefix cache,
// so every repetition starts from the same state. ceiling_bytes_per_s: the read ceiling
// measured once before the tests (tg results also carry their own, measured beside each run).
// device_backend: the (GPU) backend the model was prepared for, used instead of a CPU backend of
// n_threads; no host read ceiling is measured then.
std::vector<BenchResult> run_bench_tests(const Model& model, const std::vector<BenchTest>& tests, int n_threads,
                                         int reps, const StatePlanOptions& plan, std::string* backend_name,
                                         double* ceiling_bytes_per_s, Backend* device_backend = nullptr,
                                         BenchSampling sampling = {});

}  // namespace lfm::cli
