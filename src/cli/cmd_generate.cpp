// lfm generate: a prompt (text, or token ids) in, generated text/ids out (greedy unless a
// temperature is given). Text is streamed to stdout as it is decoded.
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "cli/common.h"
#include "core/error.h"
#include "engine/generator.h"
#include "engine/token_mask.h"
#include "tokenizer/load_tokenizer.h"
#include "tokenizer/streaming_detokenizer.h"

namespace lfm::cli {
namespace {

int run_generate(int argc, char** argv) {
  CLI::App app{"Generate text from a prompt given as text (-p) or as token ids (--prompt-ids)."};
  configure_app(app);
  std::string model, prompt_ids, prompt_text;
  GenerateOptions opt;
  int threads = 0;
  int64_t ctx = 4096;
  bool json_out = false, ignore_eos = false;
  app.add_option("-m,--model", model, "Model: Hugging Face folder or .gguf file")->required();
  auto* ids_opt = app.add_option("--prompt-ids", prompt_ids, "Prompt as comma-separated token ids, e.g. 1,17,200");
  auto* text_opt = app.add_option("-p,--prompt", prompt_text,
                                  "Prompt text (tokenized with the model's tokenizer, BOS added as it specifies)");
  ids_opt->excludes(text_opt);
  bool no_special = false;
  app.add_flag("--no-special", no_special, "With -p: do not add the BOS token");
  app.add_option("-n,--max-new-tokens", opt.max_new_tokens, "Tokens to generate")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--temperature", opt.sampler.temperature, "Sampling temperature; 0 is greedy")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--top-k", opt.sampler.top_k, "Keep the k most likely tokens (0: off)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--top-p", opt.sampler.top_p, "Nucleus sampling mass (1: off)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--min-p", opt.sampler.min_p, "Drop tokens below min-p times the top probability")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--seed", opt.sampler.seed, "Random seed for sampling")->capture_default_str();
  app.add_option("--prefill-chunk", opt.prefill_chunk, "Feed the prompt in chunks of this many tokens (0: one step)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("-c,--ctx-size", ctx, "Context size (tokens)")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("-t,--threads", threads, "Threads (0: all cores)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_flag("--ignore-eos", ignore_eos, "Do not stop at the model's end-of-sequence tokens");
  app.add_flag("--json", json_out, "Print one JSON object");
  LFM_CLI_PARSE(app, argc, argv);
  if (prompt_ids.empty() && prompt_text.empty()) {
    std::fprintf(stderr, "%s\nlfm generate: give a prompt with -p TEXT or --prompt-ids IDS\n", app.help().c_str());
    return 2;
  }

  Runtime rt = open_runtime(model, threads);
  std::unique_ptr<Tokenizer> tok;
  std::vector<int32_t> prompt;
  if (!prompt_text.empty()) {
    tok = load_tokenizer(model);
    prompt = tok->encode(prompt_text, !no_special);
    opt.allowed = decodable_token_mask(*tok, rt.model->config().vocab_size);
  } else {
    prompt = parse_id_list(prompt_ids, "--prompt-ids");
  }
  if (!ignore_eos) {
    opt.stop_ids = rt.model->config().eos_token_ids;
    if (tok && tok->eos_id() >= 0) opt.stop_ids.push_back(tok->eos_id());
  }
  SequenceState state(rt.model->config(), ctx);
  Forward fwd(*rt.model, *rt.backend);
  GenerateStats stats;
  std::unique_ptr<StreamingDetokenizer> detok;
  if (tok && !json_out) detok = std::make_unique<StreamingDetokenizer>(*tok, /*skip_special=*/true);
  auto on_token = [&](int32_t id) {
    if (detok) {
      std::cout << detok->push(id) << std::flush;
    }
    return true;
  };
  const std::vector<int32_t> out = generate(fwd, state, prompt, opt, on_token, &stats);
  if (detok) std::cout << detok->finish() << "\n";

  if (json_out) {
    nlohmann::json j;
    j["prompt_ids"] = prompt;
    j["generated_ids"] = out;
    if (tok) {
      j["prompt"] = prompt_text;
      j["text"] = tok->decode(out, /*skip_special=*/true);
    }
    j["prefill_seconds"] = stats.prefill_seconds;
    j["decode_seconds"] = stats.decode_seconds;
    std::cout << j.dump() << "\n";
  } else {
    if (!tok) {
      for (size_t i = 0; i < out.size(); ++i) std::cout << (i ? " " : "") << out[i];
      std::cout << "\n";
    }
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
