// lfm generate: prompt ids in, generated ids out (greedy unless a temperature is given).
#include <cstdio>
#include <iostream>

#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "cli/common.h"
#include "engine/generator.h"

namespace lfm::cli {
namespace {

int run_generate(int argc, char** argv) {
  CLI::App app{"Generate tokens from a prompt given as token ids."};
  configure_app(app);
  std::string model, prompt_ids;
  GenerateOptions opt;
  int threads = 0;
  int64_t ctx = 4096;
  bool json_out = false, ignore_eos = false;
  app.add_option("-m,--model", model, "Model: Hugging Face folder or .gguf file")->required();
  app.add_option("--prompt-ids", prompt_ids, "Prompt as comma-separated token ids, e.g. 1,17,200")->required();
  app.add_option("-n,--max-new-tokens", opt.max_new_tokens, "Tokens to generate")->capture_default_str()->check(CLI::NonNegativeNumber);
  app.add_option("--temperature", opt.sampler.temperature, "Sampling temperature; 0 is greedy")->capture_default_str()->check(CLI::NonNegativeNumber);
  app.add_option("--top-k", opt.sampler.top_k, "Keep the k most likely tokens (0: off)")->capture_default_str()->check(CLI::NonNegativeNumber);
  app.add_option("--top-p", opt.sampler.top_p, "Nucleus sampling mass (1: off)")->capture_default_str()->check(CLI::Range(0.0, 1.0));
  app.add_option("--min-p", opt.sampler.min_p, "Drop tokens below min-p times the top probability")->capture_default_str()->check(CLI::Range(0.0, 1.0));
  app.add_option("--seed", opt.sampler.seed, "Random seed for sampling")->capture_default_str();
  app.add_option("--prefill-chunk", opt.prefill_chunk, "Feed the prompt in chunks of this many tokens (0: one step)")->capture_default_str()->check(CLI::NonNegativeNumber);
  app.add_option("-c,--ctx-size", ctx, "Context size (tokens)")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("-t,--threads", threads, "Threads (0: all cores)")->capture_default_str()->check(CLI::NonNegativeNumber);
  app.add_flag("--ignore-eos", ignore_eos, "Do not stop at the model's end-of-sequence tokens");
  app.add_flag("--json", json_out, "Print one JSON object");
  LFM_CLI_PARSE(app, argc, argv);

  const std::vector<int32_t> prompt = parse_id_list(prompt_ids, "--prompt-ids");
  Runtime rt = open_runtime(model, threads);
  if (!ignore_eos) opt.stop_ids = rt.model->config().eos_token_ids;
  SequenceState state(rt.model->config(), ctx);
  Forward fwd(*rt.model, *rt.backend);
  GenerateStats stats;
  const std::vector<int32_t> out = generate(fwd, state, prompt, opt, nullptr, &stats);

  if (json_out) {
    nlohmann::json j;
    j["prompt_ids"] = prompt;
    j["generated_ids"] = out;
    j["prefill_seconds"] = stats.prefill_seconds;
    j["decode_seconds"] = stats.decode_seconds;
    std::cout << j.dump() << "\n";
  } else {
    for (size_t i = 0; i < out.size(); ++i) std::cout << (i ? " " : "") << out[i];
    std::cout << "\n";
    const double tps = stats.decode_seconds > 0 ? (stats.generated_tokens - 1) / stats.decode_seconds : 0;
    std::fprintf(stderr, "prompt %lld tokens in %.3f s; generated %lld tokens (%.2f tok/s decode)\n",
                 static_cast<long long>(stats.prompt_tokens), stats.prefill_seconds,
                 static_cast<long long>(stats.generated_tokens), tps);
  }
  return 0;
}

CommandRegistrar reg({"generate", "generate tokens from a prompt", run_generate});

}  // namespace
}  // namespace lfm::cli
