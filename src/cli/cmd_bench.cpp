// lfm bench: llama-bench's tests and options (-p, -n, -d, -t, -r, -o md|json, same JSON field
// names) so the two tools compare row by row, plus ours: batched decode (-b: aggregate tokens/s
// of B sequences), the bytes a decode step reads per second against the measured read-bandwidth
// ceiling, and the prefix cache's effect on time to first token (--prefix).
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <random>

#include "cli/bench_runs.h"
#include "cli/bench_speculative.h"
#include "cli/command.h"
#include "cli/common.h"
#include "core/error.h"
#include "engine/engine.h"
#include "engine/sampler.h"
#include "kernels/backend_factory.h"
#include "kernels/cpu_backend.h"

namespace lfm::cli {
namespace {

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

std::string model_label(const Model& m, const std::string& path) {
  const double b = static_cast<double>(m.parameter_count()) / 1e9;
  char buf[96];
  std::snprintf(buf, sizeof buf, "%s %.2fB %s", m.config().model_type.c_str(), b,
                std::filesystem::path(path).filename().string().c_str());
  return buf;
}

std::string test_label(const BenchTest& t) {
  std::string s = t.n_prompt > 0 ? "pp" + std::to_string(t.n_prompt) : "tg" + std::to_string(t.n_gen);
  if (t.n_seqs > 1) s += " x" + std::to_string(t.n_seqs);
  if (t.n_depth > 0) s += " @ d" + std::to_string(t.n_depth);
  return s;
}

// --draft: speculative decoding against plain decoding of one request, side by side.
int run_speculative(const DraftArgs& draft, const std::string& workload, const Model& m, const std::string& path,
                    const LoadOptions& load, StateArgs state, int64_t n_prompt, int64_t n_gen, int threads, int reps,
                    const std::string& output, Backend* device_backend) {
  ThreadPool pool(threads);
  std::unique_ptr<Backend> cpu;
  Backend* backend = device_backend;
  if (!backend) {
    cpu = make_backend(DeviceKind::kCpu, pool);
    backend = cpu.get();
  }
  std::unique_ptr<Model> draft_model;
  if (draft.kind() == Drafter::kModel) draft_model = load_model(resolve_model_arg(draft.draft_model), load);
  state.ctx_size = n_prompt + n_gen + 64;
  EngineOptions eo = engine_options(state, m);
  Engine plain(m, *backend, nullptr, eo);
  eo.state.draft_tokens = draft.draft_max;
  Engine spec(m, *backend, nullptr, eo, draft_model.get());
  SpecBenchOptions so;
  so.drafter = draft.kind();
  so.max_drafts = draft.draft_max;
  so.n_prompt = n_prompt;
  so.n_gen = n_gen;
  so.reps = reps;
  so.workload = workload;
  const SpecBenchResult r = run_spec_bench(plain, spec, m.config().vocab_size, so);
  const double rate = r.drafted ? static_cast<double>(r.accepted) / static_cast<double>(r.drafted) : 0;
  const double per_step = r.verify_steps ? static_cast<double>(r.accepted) / static_cast<double>(r.verify_steps) : 0;
  const std::string drafter = draft.kind() == Drafter::kModel ? "model " + std::filesystem::path(draft.draft_model).filename().string()
                                                              : std::string(drafter_name(draft.kind()));
  nlohmann::json j = {{"test", "speculative"},
                      {"model_filename", path},
                      {"drafter", drafter},
                      {"workload", workload},
                      {"n_prompt", n_prompt},
                      {"n_gen", n_gen},
                      {"n_threads", device_backend ? 1 : pool.size()},
                      {"draft_max", draft.draft_max},
                      {"plain_samples_ts", r.plain_tps},
                      {"speculative_samples_ts", r.spec_tps},
                      {"plain_avg_ts", r.plain_avg()},
                      {"speculative_avg_ts", r.spec_avg()},
                      {"speedup", r.plain_avg() > 0 ? r.spec_avg() / r.plain_avg() : 0},
                      {"drafted_tokens", r.drafted},
                      {"accepted_tokens", r.accepted},
                      {"verify_steps", r.verify_steps},
                      {"acceptance_rate", rate},
                      {"mean_accepted_per_verify", per_step},
                      {"identical_output", r.identical}};
  if (output == "json") {
    std::cout << nlohmann::json::array({j}).dump(2) << "\n";
  } else {
    std::printf("| model | drafter | workload | threads | test | plain t/s | speculative t/s | speedup | acceptance | "
                "accepted/verify | same output |\n");
    std::printf("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |\n");
    std::printf("| %s | %s | %s | %lld | pp%lld+tg%lld | %.2f | %.2f | %.2fx | %.0f%% (%lld/%lld) | %.2f | %s |\n",
                model_label(m, path).c_str(), drafter.c_str(), workload.c_str(),
                static_cast<long long>(device_backend ? 1 : pool.size()), static_cast<long long>(n_prompt),
                static_cast<long long>(n_gen), r.plain_avg(), r.spec_avg(),
                r.plain_avg() > 0 ? r.spec_avg() / r.plain_avg() : 0, 100 * rate, static_cast<long long>(r.accepted),
                static_cast<long long>(r.drafted), per_step, r.identical ? "yes" : "NO");
  }
  LFM_CHECK(r.identical, "bench: speculative decoding changed the greedy output");
  return 0;
}

int run_bench(int argc, char** argv) {
  CLI::App app{
      "Measure prefill (pp), decode (tg, batched with -b) and prefix-cache throughput on random token ids, "
      "with llama-bench's options and output fields."};
  configure_app(app);
  app.footer(
      "\nExamples:\n"
      "  lfm bench -m LiquidAI/LFM2-1.2B-GGUF:Q4_K_M               # a Hub GGUF: pp512 and tg128, 5 repetitions\n"
      "  lfm bench -m /path/to/LFM2-1.2B-Q4_K_M.gguf -p 512 -n 128 -t 8 -r 5 -o json\n"
      "  llama-bench -m /path/to/LFM2-1.2B-Q4_K_M.gguf -p 512 -n 128 -t 8 -r 5 -o json   # the same tests, side by side\n"
      "  lfm bench -m models/tiny-lfm2 -p 64 -n 16 -b 1,4 -r 1      # the bundled tiny model (random weights)");
  std::string model, output = "md";
  std::vector<int64_t> prompts = {512}, gens = {128}, depths = {0}, batches = {1};
  std::vector<int> threads = {0};
  int64_t prefix = 0;
  int reps = 5;
  StateArgs state;
  app.add_option("-m,--model", model, std::string("Model: Hugging Face folder or .gguf file") + kModelRefHelp)->required();
  app.add_option("-p,--n-prompt", prompts, "Prompt tokens of the prefill tests (0: none), e.g. 128,512")
      ->delimiter(',')
      ->capture_default_str()
      ->check(non_negative_number());
  app.add_option("-n,--n-gen", gens, "Tokens of the decode tests (0: none)")
      ->delimiter(',')
      ->capture_default_str()
      ->check(non_negative_number());
  app.add_option("-d,--n-depth", depths, "Context tokens already in the state before each test, e.g. 0,8192")
      ->delimiter(',')
      ->capture_default_str()
      ->check(non_negative_number());
  app.add_option("-b,--batch", batches, "Sequences decoded together in the tg tests, e.g. 1,4,16")
      ->delimiter(',')
      ->capture_default_str()
      ->check(positive_number());
  app.add_option("-t,--threads", threads, "Thread counts to test, e.g. 1,2 (0: all cores)")
      ->delimiter(',')
      ->capture_default_str()
      ->check(non_negative_number());
  app.add_option("-r,--repetitions", reps, "Repetitions of each test")->capture_default_str()->check(positive_number());
  app.add_option("-o,--output", output, "Output format: md or json")->capture_default_str()->check(CLI::IsMember({"md", "json"}));
  app.add_option("--prefix", prefix,
                 "Prefix-cache test: time to first token of a prompt whose first N tokens are cached, vs cold (0: skip)")
      ->capture_default_str()
      ->check(non_negative_number());
  app.add_option("--kv-type", state.kv_type, "Storage of K/V and conv states: f32, f16, bf16 or auto")
      ->capture_default_str();
  app.add_option("--kv-block-size", state.block_tokens, "Tokens per KV cache block")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{65536}));
  add_schedule_options(app, state);  // the engines of --draft and --prefix
  LoadOptions load;
  add_load_options(app, load);
  std::string device = "cpu";
  add_device_option(app, device);
  app.add_flag_callback("--json", [&] { output = "json"; }, "Same as -o json");
  DraftArgs draft;
  add_draft_options(app, draft);
  std::string workload = "copy";
  app.add_option("--spec-workload", workload,
                 "With --draft: the request compared (prompt -p, -n generated tokens, greedy): 'copy' (the output "
                 "repeats part of the prompt: P + G + P with G the model's continuation of P) or 'random'")
      ->capture_default_str()
      ->check(CLI::IsMember({"copy", "random"}));
  BenchSampling sampling;
  std::string sample_from = "candidates";
  app.add_option("--temperature,--temp", sampling.temperature,
                 "tg tests: sample each token at this temperature as the engine does (0: greedy, chosen where the "
                 "logits are)")
      ->capture_default_str()
      ->check(CLI::Range(0.0f, 100.0f));
  app.add_option("--top-k", sampling.top_k, "With --temperature: keep the k most likely tokens (0: all)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--top-p", sampling.top_p, "With --temperature: keep the most likely tokens up to this probability mass")
      ->capture_default_str()
      ->check(CLI::Range(0.0f, 1.0f));
  app.add_option("--sample-from", sample_from,
                 "With --temperature: 'candidates' (the row's best candidates come down, as for plain sampled requests) or "
                 "'rows' (whole rows of logits, as for requests with logprobs or a grammar)")
      ->capture_default_str()
      ->check(CLI::IsMember({"candidates", "rows"}));
  LFM_CLI_PARSE(app, argc, argv);
  sampling.whole_rows = sample_from == "rows";
  if (sampling.temperature > 0) {
    SamplingParams check;
    check.temperature = sampling.temperature, check.top_k = sampling.top_k, check.top_p = sampling.top_p;
    check.validate(1);
  }

  // A GPU backend is made once, before the model (it prepares the weights); CPU backends per
  // thread count, as llama-bench does.
  ThreadPool device_pool(1);
  std::unique_ptr<Backend> device_backend = make_backend(parse_device(device), device_pool);
  if (device_backend->host_memory())
    device_backend.reset();
  else
    load.backend = device_backend.get();
  auto m = load_model(resolve_model_arg(model), load);
  const StatePlanOptions plan = state_plan(state, m->config(), m.get());
  if (draft.kind() != Drafter::kNone) return run_speculative(draft, workload, *m, model, load, state, prompts.front(),
                                                               gens.front(), threads.front(), reps, output,
                                                               device_backend.get());
  std::vector<BenchTest> tests;
  for (int64_t d : depths) {
    for (int64_t p : prompts)
      if (p > 0) tests.push_back({p, 0, d, 1});
    for (int64_t n : gens)
      if (n > 0)
        for (int64_t b : batches) tests.push_back({0, n, d, b});
  }
  const std::string label = model_label(*m, model);
  const double size_gib = static_cast<double>(m->weight_bytes()) / (1024.0 * 1024 * 1024);
  nlohmann::json rows = nlohmann::json::array();
  if (output == "md") {
    std::printf("| model | size | params | backend | threads | type_k | test | t/s | GB/s (ceiling) |\n");
    std::printf("| --- | ---: | ---: | --- | ---: | --- | ---: | ---: | ---: |\n");
  }
  for (int t : threads) {
    std::string backend;
    double ceiling = 0;
    const auto results = run_bench_tests(*m, tests, t, reps, plan, &backend, &ceiling, device_backend.get(), sampling);
    for (const BenchResult& r : results) {
      const double gbs = r.bytes_per_step > 0 ? r.bytes_per_step * static_cast<double>(r.test.n_gen) / r.avg_s() / 1e9 : 0;
      // A tg row's ceiling is the one measured beside its repetitions; a pp row shows the run's.
      const double row_ceiling = r.ceiling_samples.empty() ? ceiling : r.ceiling();
      nlohmann::json j;
      j["model_filename"] = model;
      j["model_type"] = label;
      j["model_size"] = m->weight_bytes();
      j["model_n_params"] = m->parameter_count();
      j["backends"] = device_backend ? "CUDA" : "CPU";
      j["cpu_info"] = backend;
      j["bf16_activations"] = m->bf16_activations();  // ours: --bf16-activations took effect
      j["n_threads"] = r.n_threads;
      j["type_k"] = dtype_name(*plan.type);
      j["type_v"] = dtype_name(*plan.type);
      j["n_prompt"] = r.test.n_prompt;
      j["n_gen"] = r.test.n_gen;
      j["n_depth"] = r.test.n_depth;
      j["n_seqs"] = r.test.n_seqs;
      // ours: how tg tokens were chosen
      j["sampling"] = sampling.temperature == 0.0f ? "greedy" : cat("temp ", sampling.temperature, " top_k ", sampling.top_k, " top_p ", sampling.top_p, " from ", sample_from);
      j["avg_ns"] = static_cast<int64_t>(r.avg_s() * 1e9);
      j["stddev_ns"] = static_cast<int64_t>(r.stddev_s() * 1e9);
      j["avg_ts"] = r.avg_ts();
      j["stddev_ts"] = r.stddev_ts();
      nlohmann::json ns = nlohmann::json::array(), ts = nlohmann::json::array();
      for (size_t i = 0; i < r.samples_s.size(); ++i) {
        ns.push_back(static_cast<int64_t>(r.samples_s[i] * 1e9));
        ts.push_back(r.tokens_per_second(i));
      }
      j["samples_ns"] = ns;
      j["samples_ts"] = ts;
      j["read_gb_per_s"] = gbs;
      j["ceiling_gb_per_s"] = row_ceiling / 1e9;
      nlohmann::json cs = nlohmann::json::array();
      for (double c : r.ceiling_samples) cs.push_back(c / 1e9);
      j["ceiling_samples_gb_per_s"] = cs;
      rows.push_back(j);
      if (output == "md") {
        char gb[48] = "";
        if (gbs > 0) std::snprintf(gb, sizeof gb, "%.1f (%.1f)", gbs, row_ceiling / 1e9);
        std::printf("| %s | %.2f GiB | %.2f B | %s | %d | %s | %s | %.2f ± %.2f | %s |\n", label.c_str(), size_gib,
                    static_cast<double>(m->parameter_count()) / 1e9,
                    (backend + (m->bf16_activations() ? " bf16-act" : "")).c_str(), r.n_threads,
                    dtype_name(*plan.type),
                    (test_label(r.test) + (r.test.n_gen > 0 && sampling.temperature > 0 ? " sampled" : "")).c_str(), r.avg_ts(), r.stddev_ts(), gb);
        std::fflush(stdout);
      }
    }
  }
  if (prefix > 0) {
    // Cold: a fresh prompt of prefix + 32 tokens. Warm: after a request over a history of
    // `prefix` tokens, the history plus 32 new tokens reuses every whole cached block of it.
    Runtime rt;
    rt.pool = std::make_unique<ThreadPool>(threads.front());
    Backend* engine_backend = device_backend.get();
    if (!engine_backend) {
      rt.backend = make_backend(DeviceKind::kCpu, *rt.pool);
      engine_backend = rt.backend.get();
    }
    StateArgs ps = state;
    ps.ctx_size = prefix + 64;
    Engine engine(*m, *engine_backend, nullptr, engine_options(ps, *m));
    std::mt19937 rng(99);
    std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(m->config().vocab_size - 1));
    auto random_ids = [&](int64_t n) {
      std::vector<int32_t> v(static_cast<size_t>(n));
      for (auto& x : v) x = tok(rng);
      return v;
    };
    std::vector<int32_t> prompt = random_ids(prefix);
    const std::vector<int32_t> turn = random_ids(32);
    prompt.insert(prompt.end(), turn.begin(), turn.end());
    const double cold = first_token_seconds(engine, prompt, nullptr);
    const std::vector<int32_t> history = random_ids(prefix);
    first_token_seconds(engine, history, nullptr);
    std::vector<int32_t> again = history;
    again.insert(again.end(), turn.begin(), turn.end());
    int64_t cached = 0;
    const double warm = first_token_seconds(engine, again, &cached);
    nlohmann::json j = {{"test", "prefix"},          {"prefix_tokens", prefix},     {"new_tokens", 32},
                        {"cached_tokens", cached},   {"cold_ttft_seconds", cold}, {"warm_ttft_seconds", warm},
                        {"speedup", cold / warm},    {"n_threads", rt.pool->size()}};
    rows.push_back(j);
    if (output == "md")
      std::printf("\nprefix %lld: cold TTFT %.3f s, cached TTFT %.3f s (%lld tokens reused): %.1fx faster\n",
                  static_cast<long long>(prefix), cold, warm, static_cast<long long>(cached), cold / warm);
  }
  if (output == "json") std::cout << rows.dump(2) << "\n";
  return 0;
}

CommandRegistrar reg({"bench", "measure prefill, (batched) decode and prefix-cache throughput (llama-bench style)",
                      run_bench});

}  // namespace
}  // namespace lfm::cli
