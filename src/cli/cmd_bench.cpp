// lfm bench: prefill and decode throughput in the style of llama-bench (pp N / tg N), batched
// decode (aggregate tokens/s of B sequences decoding together), the memory bandwidth decode
// achieves (weight bytes read per step × steps/s), and the prefix cache's effect on the time to
// first token (a request whose first P tokens are cached vs the same request cold).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <random>

#include "cli/command.h"
#include "cli/common.h"
#include "core/error.h"
#include "engine/engine.h"
#include "model/forward.h"

namespace lfm::cli {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Time to first token of a request through the engine (greedy, one token).
double first_token_seconds(Engine& engine, const std::vector<int32_t>& prompt, int64_t* cached) {
  Request req;
  req.prompt = prompt;
  req.max_tokens = 1;
  req.ignore_eos = true;
  auto stream = engine.submit(req);
  Event ev;
  while (stream->next(ev))
    if (ev.kind == Event::Kind::kDone) {
      LFM_CHECK(ev.finish != FinishReason::kError, ev.error);
      if (cached) *cached = ev.usage.cached_tokens;
      return ev.usage.first_token_seconds;
    }
  fail("bench: the request ended without a result");
}

int run_bench(int argc, char** argv) {
  CLI::App app{"Measure prefill (pp), decode (tg, batched) and prefix-cache throughput on random token ids."};
  configure_app(app);
  std::string model;
  int64_t n_prompt = 512, n_gen = 128, prefix = 0;
  std::vector<int64_t> batches = {1};
  int threads = 0, reps = 1;
  bool json_out = false;
  StateArgs state;
  app.add_option("-m,--model", model, "Model: Hugging Face folder or .gguf file")->required();
  app.add_option("-p,--n-prompt", n_prompt, "Prompt tokens for the prefill test (0: skip)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("-n,--n-gen", n_gen, "Tokens per sequence for the decode test (0: skip)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("-b,--batch", batches, "Sequences decoded together, a comma-separated list (e.g. 1,4,16)")
      ->delimiter(',')
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--prefix", prefix,
                 "Prefix-cache test: time to first token of a prompt whose first N tokens are cached, vs cold "
                 "(0: skip)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("-r,--repetitions", reps, "Repeat each test and report the best")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("-t,--threads", threads, "Threads (0: all cores)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--kv-type", state.kv_type, "Storage of K/V and conv states: f32, f16, bf16 or auto")
      ->capture_default_str();
  app.add_option("--kv-block-size", state.block_tokens, "Tokens per KV cache block")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{65536}));
  app.add_flag("--json", json_out, "Print one JSON object");
  LFM_CLI_PARSE(app, argc, argv);

  Runtime rt = open_runtime(model, threads);
  const ModelConfig& cfg = rt.model->config();
  std::mt19937 rng(1234);
  std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(cfg.vocab_size - 1));
  auto random_ids = [&](int64_t n) {
    std::vector<int32_t> v(static_cast<size_t>(n));
    for (auto& t : v) t = tok(rng);
    return v;
  };
  StepOutput out;
  nlohmann::json j;
  j["model"] = model;
  j["threads"] = rt.pool->size();
  j["backend"] = rt.backend->name();
  j["weight_bytes"] = rt.model->weight_bytes();
  const DType kv_type = parse_state_type(state.kv_type, default_state_type(*rt.model));
  j["kv_type"] = dtype_name(kv_type);

  if (n_prompt > 0) {
    const std::vector<int32_t> prompt = random_ids(n_prompt);
    state.ctx_size = n_prompt;
    state.parallel = 1;
    auto cache = make_state_cache(*rt.model, state_plan(state, cfg, rt.model.get()));
    Forward fwd(*rt.model, *rt.backend, *cache);
    double best = 1e30;
    for (int r = 0; r < reps; ++r) {
      Sequence* seq = cache->open(n_prompt);
      BatchItem item{seq, prompt, false};
      const auto t0 = std::chrono::steady_clock::now();
      fwd.step(std::span<const BatchItem>(&item, 1), out);
      best = std::min(best, seconds_since(t0));
      cache->close(seq);
      cache->clear_prefix_cache();
    }
    j["pp"] = {{"tokens", n_prompt}, {"seconds", best}, {"tokens_per_second", n_prompt / best}};
    if (!json_out)
      std::printf("pp%-6lld %10.2f tok/s  (%.3f s)\n", static_cast<long long>(n_prompt), n_prompt / best, best);
  }
  if (n_gen > 0) {
    j["tg"] = nlohmann::json::array();
    for (int64_t batch : batches) {
      state.ctx_size = n_gen + 1;
      state.parallel = batch;
      auto cache = make_state_cache(*rt.model, state_plan(state, cfg, rt.model.get()));
      Forward fwd(*rt.model, *rt.backend, *cache);
      double best = 1e30;
      for (int r = 0; r < reps; ++r) {
        std::vector<Sequence*> seqs;
        std::vector<int32_t> last(static_cast<size_t>(batch));
        std::vector<BatchItem> items(static_cast<size_t>(batch));
        for (int64_t b = 0; b < batch; ++b) {
          seqs.push_back(cache->open(n_gen + 1));
          last[b] = tok(rng);
        }
        const auto t0 = std::chrono::steady_clock::now();
        for (int64_t s = 0; s < n_gen; ++s) {
          for (int64_t b = 0; b < batch; ++b) items[b] = {seqs[b], std::span<const int32_t>(&last[b], 1), false};
          fwd.step(items, out);
          for (int64_t b = 0; b < batch; ++b) last[b] = tok(rng);
        }
        best = std::min(best, seconds_since(t0));
        for (Sequence* s : seqs) cache->close(s);
        cache->clear_prefix_cache();
      }
      const double tps = static_cast<double>(n_gen * batch) / best;
      const double gbs = static_cast<double>(rt.model->weight_bytes()) * (n_gen / best) / 1e9;
      j["tg"].push_back({{"tokens", n_gen},
                         {"batch", batch},
                         {"seconds", best},
                         {"tokens_per_second", tps},
                         {"weight_read_gb_per_second", gbs}});
      if (!json_out)
        std::printf("tg%-6lld %10.2f tok/s  (batch %lld, %.3f s, weights read at %.1f GB/s)\n",
                    static_cast<long long>(n_gen), tps, static_cast<long long>(batch), best, gbs);
    }
  }
  if (prefix > 0) {
    // Cold: a fresh prompt of prefix + 32 tokens. Warm: after a request over its first `prefix`
    // tokens (the history), the same prompt again reuses every whole cached block of it.
    state.ctx_size = prefix + 64;
    state.parallel = 1;
    state.no_prefix_cache = false;
    Engine engine(*rt.model, *rt.backend, nullptr, engine_options(state, *rt.model));
    double cold = 1e30, warm = 1e30;
    int64_t cached = 0;
    for (int r = 0; r < reps; ++r) {
      const std::vector<int32_t> history = random_ids(prefix);
      std::vector<int32_t> prompt = history;
      const std::vector<int32_t> turn = random_ids(32);
      prompt.insert(prompt.end(), turn.begin(), turn.end());
      cold = std::min(cold, first_token_seconds(engine, prompt, nullptr));
      const std::vector<int32_t> other = random_ids(prefix);  // a different history, to time it warm
      first_token_seconds(engine, other, nullptr);
      std::vector<int32_t> again = other;
      again.insert(again.end(), turn.begin(), turn.end());
      warm = std::min(warm, first_token_seconds(engine, again, &cached));
    }
    j["prefix"] = {{"prefix_tokens", prefix},     {"new_tokens", 32},       {"cached_tokens", cached},
                   {"cold_ttft_seconds", cold}, {"warm_ttft_seconds", warm}, {"speedup", cold / warm}};
    if (!json_out)
      std::printf("prefix %-6lld cold TTFT %.3f s, cached TTFT %.3f s (%lld tokens reused): %.1fx faster\n",
                  static_cast<long long>(prefix), cold, warm, static_cast<long long>(cached), cold / warm);
  }
  if (json_out) std::cout << j.dump(2) << "\n";
  return 0;
}

CommandRegistrar reg({"bench", "measure prefill, batched decode and prefix-cache throughput", run_bench});

}  // namespace
}  // namespace lfm::cli
