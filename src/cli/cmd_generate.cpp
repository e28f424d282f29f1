// lfm generate: a prompt (text, or token ids) in, generated text/ids out (greedy unless a
// temperature is given), through the engine. Text is streamed to stdout as it is decoded.
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "cli/common.h"
#include "cli/audio_args.h"
#include "cli/image_args.h"
#include "cli/grammar_args.h"
#include "core/error.h"
#include "engine/engine.h"
#include "tokenizer/load_tokenizer.h"

namespace lfm::cli {
namespace {

int run_generate(int argc, char** argv) {
  CLI::App app{"Generate text from a prompt given as text (-p) or as token ids (--prompt-ids)."};
  configure_app(app);
  std::string model, prompt_ids, prompt_text;
  Request req;
  uint64_t seed = 0;
  int64_t max_new = 32;
  int threads = 0;
  StateArgs state;
  bool json_out = false, no_special = false;
  std::vector<std::string> stops;
  app.add_option("-m,--model", model, std::string("Model: Hugging Face folder or .gguf file") + kModelRefHelp)->required();
  auto* ids_opt = app.add_option("--prompt-ids", prompt_ids, "Prompt as comma-separated token ids, e.g. 1,17,200");
  auto* text_opt = app.add_option("-p,--prompt", prompt_text,
                                  "Prompt text (tokenized with the model's tokenizer, BOS added as it specifies)");
  ids_opt->excludes(text_opt);
  app.add_flag("--no-special", no_special, "With -p: do not add the BOS token");
  app.add_option("-n,--max-new-tokens", max_new, "Tokens to generate")
      ->capture_default_str()
      ->check(non_negative_number());
  std::string generation_config = "auto";
  add_sampling_options(app, req.sampling, seed, generation_config);
  app.add_option("--stop", stops, "Stop when the text contains this string (repeatable; needs a tokenizer)");
  add_state_options(app, state, /*engine=*/true);
  LoadOptions load;
  add_load_options(app, load);
  std::string device = "cpu";
  add_device_option(app, device);
  app.add_option("-t,--threads", threads, "Threads (0: all cores)")
      ->capture_default_str()
      ->check(non_negative_number());
  app.add_flag("--ignore-eos", req.ignore_eos, "Do not stop at the model's end-of-sequence tokens");
  DraftArgs draft;
  add_draft_options(app, draft);
  GrammarArgs grammar_args;
  add_grammar_options(app, grammar_args);
  app.add_flag("--json", json_out, "Print one JSON object");
  std::vector<std::string> image_files;
  add_image_option(app, image_files);
  AudioArgs audio;
  add_audio_option(app, audio);
  LFM_CLI_PARSE(app, argc, argv);
  if (prompt_ids.empty() && prompt_text.empty()) {
    std::fprintf(stderr, "%s\nlfm generate: give a prompt with -p TEXT or --prompt-ids IDS\n", app.help().c_str());
    return 2;
  }
  finish_sampling_options(req.sampling, seed);

  model = resolve_model_arg(model);
  apply_generation_config(app, generation_config, model, req.sampling);
  Runtime rt = open_runtime(model, threads, load, device);
  check_images_supported(image_files, *rt.model);
  check_audio_supported(audio, *rt.model);
  std::unique_ptr<Tokenizer> tok;
  auto grammar = load_grammar(grammar_args);
  if (!prompt_text.empty() || !stops.empty() || grammar || !image_files.empty())
    tok = load_tokenizer(model);
  replace_audio_markers_in(prompt_text, audio, *rt.model, tok.get());
  req.prompt = !prompt_text.empty() ? tok->encode(prompt_text, !no_special) : parse_id_list(prompt_ids, "--prompt-ids");
  ImagePrompt with_images = prompt_with_images(std::move(req.prompt), image_files, model, *rt.model, tok.get());
  req.prompt = std::move(with_images.ids);
  req.images = std::move(with_images.images);
  AudioPrompt with_audio = prompt_with_audio(std::move(req.prompt), audio, *rt.model, tok.get());
  req.prompt = std::move(with_audio.ids);
  req.audios = std::move(with_audio.audios);
  req.stop = stops;
  req.max_tokens = max_new;
  req.drafter = draft.kind();
  req.max_drafts = draft.draft_max;

  std::vector<int32_t> generated;
  std::string text;
  Usage usage;
  std::string finish = "length";
  if (max_new > 0) {
    EngineOptions eo = engine_options(state, *rt.model);
    apply_draft_options(draft, rt, load, eo);
    if (grammar && eo.state.draft_tokens == 0) eo.state.draft_tokens = draft.draft_max;  // jump-forward room
    Engine engine(*rt.model, *rt.backend, tok.get(), eo, rt.draft.get());
    if (grammar) req.grammar = engine.compile_grammar(grammar);
    req.jump_forward = !grammar_args.no_jump_forward;
    auto stream = engine.submit(req);
    Event ev;
    while (stream->next(ev)) {
      if (ev.kind == Event::Kind::kToken) generated.push_back(ev.token);
      text += ev.text;
      if (tok && !json_out) std::cout << ev.text << std::flush;
      if (ev.kind == Event::Kind::kDone) {
        usage = ev.usage;
        finish = finish_reason_name(ev.finish);
        LFM_CHECK(ev.finish != FinishReason::kError, ev.error);
      }
    }
  }
  if (tok && !json_out) std::cout << "\n";

  const double decode_s = usage.total_seconds - usage.first_token_seconds;
  if (json_out) {
    nlohmann::json j;
    j["prompt_ids"] = req.prompt;
    j["generated_ids"] = generated;
    if (tok) {
      j["prompt"] = prompt_text;
      j["text"] = text;
    }
    j["finish_reason"] = finish;
    j["prefill_seconds"] = usage.first_token_seconds;
    j["decode_seconds"] = decode_s;
    j["cached_tokens"] = usage.cached_tokens;
    if (!req.images.empty()) {
      j["image_tiles"] = usage.image_tiles;
      j["image_encode_seconds"] = usage.encode_seconds;
    }
    if (!req.audios.empty()) {
      j["audio_clips"] = usage.audio_clips;
      j["audio_encode_seconds"] = usage.encode_seconds;
    }
    if (req.drafter != Drafter::kNone || usage.verify_steps > 0) {  // drafts, or the grammar's jump-forward
      j["drafted_tokens"] = usage.drafted_tokens;
      j["accepted_tokens"] = usage.accepted_tokens;
    }
    std::cout << j.dump() << "\n";
  } else {
    if (!tok) {
      for (size_t i = 0; i < generated.size(); ++i) std::cout << (i ? " " : "") << generated[i];
      std::cout << "\n";
    }
    const double tps = decode_s > 0 ? static_cast<double>(usage.completion_tokens - 1) / decode_s : 0;
    std::fprintf(stderr, "prompt %lld tokens in %.3f s; generated %lld tokens (%.2f tok/s decode); finish reason: %s\n",
                 static_cast<long long>(req.prompt.size()), usage.first_token_seconds,
                 static_cast<long long>(generated.size()), tps, finish.c_str());
    if (!req.images.empty())
      std::fprintf(stderr, "images: %zu, %lld tiles encoded in %.3f s (inside the prompt's time)\n", req.images.size(),
                   static_cast<long long>(usage.image_tiles), usage.encode_seconds);
    if (!req.audios.empty())
      std::fprintf(stderr, "audio: %zu clips, %lld encoded in %.3f s (inside the prompt's time)\n", req.audios.size(),
                   static_cast<long long>(usage.audio_clips), usage.encode_seconds);
    if (req.drafter != Drafter::kNone || usage.verify_steps > 0) {
      // Without a drafter, what was verified is the grammar's forced text (jump-forward), not a
      // speculation; with one, the counts hold both (the engine does not split them).
      const std::string what = req.drafter == Drafter::kNone
                                   ? std::string("grammar jump-forward (forced text)")
                                   : "speculative (" + std::string(drafter_name(req.drafter)) + ")" +
                                         (grammar ? " + grammar jump-forward" : "");
      std::fprintf(stderr, "%s: %lld tokens proposed, %lld accepted (%.0f%%)\n", what.c_str(),
                   static_cast<long long>(usage.drafted_tokens), static_cast<long long>(usage.accepted_tokens),
                   usage.drafted_tokens ? 100.0 * static_cast<double>(usage.accepted_tokens) /
                                              static_cast<double>(usage.drafted_tokens)
                                        : 0.0);
    }
  }
  return 0;
}

CommandRegistrar reg({"generate", "generate tokens from a prompt", run_generate});

}  // namespace
}  // namespace lfm::cli
