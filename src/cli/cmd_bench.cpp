// lfm bench: prefill and decode throughput in the style of llama-bench (pp N / tg N), plus the
// memory bandwidth decode achieves (weight bytes read per token × tokens/s).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <random>

#include "cli/command.h"
#include "cli/common.h"
#include "model/forward.h"

namespace lfm::cli {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

int run_bench(int argc, char** argv) {
  CLI::App app{"Measure prefill (pp) and decode (tg) throughput on random token ids."};
  configure_app(app);
  std::string model;
  int64_t n_prompt = 512, n_gen = 128, batch = 1;
  int threads = 0, reps = 1;
  bool json_out = false;
  app.add_option("-m,--model", model, "Model: Hugging Face folder or .gguf file")->required();
  app.add_option("-p,--n-prompt", n_prompt, "Prompt tokens for the prefill test (0: skip)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("-n,--n-gen", n_gen, "Tokens for the decode test (0: skip)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("-b,--batch", batch, "Sequences decoded together in each step")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("-r,--repetitions", reps, "Repeat each test and report the best")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("-t,--threads", threads, "Threads (0: all cores)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_flag("--json", json_out, "Print one JSON object");
  LFM_CLI_PARSE(app, argc, argv);

  Runtime rt = open_runtime(model, threads);
  const ModelConfig& cfg = rt.model->config();
  std::mt19937 rng(1234);
  std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(cfg.vocab_size - 1));
  Forward fwd(*rt.model, *rt.backend);
  StepOutput out;
  nlohmann::json j;
  j["model"] = model;
  j["threads"] = rt.pool->size();
  j["backend"] = rt.backend->name();
  j["weight_bytes"] = rt.model->weight_bytes();

  if (n_prompt > 0) {
    std::vector<int32_t> prompt(n_prompt);
    for (auto& t : prompt) t = tok(rng);
    double best = 1e30;
    for (int r = 0; r < reps; ++r) {
      SequenceState st(cfg, n_prompt);
      BatchItem item{&st, prompt, false};
      const auto t0 = std::chrono::steady_clock::now();
      fwd.step(std::span<const BatchItem>(&item, 1), out);
      best = std::min(best, seconds_since(t0));
    }
    j["pp"] = {{"tokens", n_prompt}, {"seconds", best}, {"tokens_per_second", n_prompt / best}};
    if (!json_out)
      std::printf("pp%-6lld %10.2f tok/s  (%.3f s)\n", static_cast<long long>(n_prompt), n_prompt / best, best);
  }
  if (n_gen > 0) {
    double best = 1e30;
    for (int r = 0; r < reps; ++r) {
      std::vector<std::unique_ptr<SequenceState>> states;
      std::vector<int32_t> last(batch);
      std::vector<BatchItem> items(batch);
      for (int64_t b = 0; b < batch; ++b) {
        states.push_back(std::make_unique<SequenceState>(cfg, n_gen + 1));
        last[b] = tok(rng);
      }
      const auto t0 = std::chrono::steady_clock::now();
      for (int64_t s = 0; s < n_gen; ++s) {
        for (int64_t b = 0; b < batch; ++b) items[b] = {states[b].get(), std::span<const int32_t>(&last[b], 1), false};
        fwd.step(items, out);
        for (int64_t b = 0; b < batch; ++b) last[b] = tok(rng);
      }
      best = std::min(best, seconds_since(t0));
    }
    const double tps = n_gen * batch / best;
    const double gbs = static_cast<double>(rt.model->weight_bytes()) * (n_gen / best) / 1e9;
    j["tg"] = {{"tokens", n_gen},
               {"batch", batch},
               {"seconds", best},
               {"tokens_per_second", tps},
               {"weight_read_gb_per_second", gbs}};
    if (!json_out)
      std::printf("tg%-6lld %10.2f tok/s  (batch %lld, %.3f s, weights read at %.1f GB/s)\n",
                  static_cast<long long>(n_gen), tps, static_cast<long long>(batch), best, gbs);
  }
  if (json_out) std::cout << j.dump(2) << "\n";
  return 0;
}

CommandRegistrar reg({"bench", "measure prefill and decode throughput", run_bench});

}  // namespace
}  // namespace lfm::cli
