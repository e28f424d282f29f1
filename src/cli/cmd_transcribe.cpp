// lfm transcribe: speech to text with an LFM2-Audio model. Each file is decoded, resampled to the
// model's rate and asked for as transformers' Lfm2AudioProcessor asks (engine/transcription.h);
// every file runs in one engine at once (batched like the server's requests), transcripts printed
// in the order given.
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli/audio_args.h"
#include "cli/command.h"
#include "cli/common.h"
#include "core/error.h"
#include "engine/chat_turn.h"
#include "engine/engine.h"
#include "engine/transcription.h"
#include "tokenizer/load_tokenizer.h"

namespace lfm::cli {
namespace {

int run_transcribe(int argc, char** argv) {
  CLI::App app{"Transcribe speech with an LFM2-Audio model: one transcript per audio file (WAV, FLAC, OGG/Vorbis/Opus, "
               "MP3; any rate and channel count: down-mixed and resampled)."};
  configure_app(app);
  std::string model, prompt;
  std::vector<std::string> files;
  bool json_out = false, translate = false;
  int threads = 0;
  int64_t max_new = 0;
  float temperature = 0;
  double max_seconds = 300;
  StateArgs state;
  app.add_option("-m,--model", model, std::string("Model: Hugging Face folder or .gguf file (with --mmproj)") + kModelRefHelp)
      ->required();
  app.add_option("files", files, "Audio files")->required()->check(CLI::ExistingFile);
  app.add_option("--prompt", prompt, "Text after the audio in the request (vocabulary, the previous segment's text)");
  app.add_flag("--translate", translate, "Ask for an English translation instead of a transcript");
  app.add_option("--temperature", temperature, "Sampling temperature (0: greedy)")->capture_default_str()->check(CLI::Range(0.0, 2.0));
  app.add_option("-n,--max-new-tokens", max_new, "Most tokens per transcript (0: until the model ends it or the context is full)")
      ->capture_default_str()
      ->check(non_negative_number());
  app.add_option("--max-audio-seconds", max_seconds, "Longest clip accepted, in seconds")
      ->capture_default_str()
      ->check(CLI::Range(0.1, 86400.0));
  app.add_flag("--json", json_out,
               "Print one JSON object per file: file, text, duration, audio_tokens, prompt_tokens, completion_tokens, "
               "encode_seconds, first_token_seconds, total_seconds");
  add_state_options(app, state, /*engine=*/true);
  LoadOptions load;
  add_load_options(app, load);
  std::string device = "cpu";
  add_device_option(app, device);
  app.add_option("-t,--threads", threads, "Threads (0: all cores)")->capture_default_str()->check(non_negative_number());
  LFM_CLI_PARSE(app, argc, argv);

  model = resolve_model_arg(model);
  Runtime rt = open_runtime(model, threads, load, device);
  LFM_CHECK(rt.model->audio(), "transcribe: the model has no speech encoder (load an LFM2-Audio checkpoint folder, or a "
            ".gguf language model with its --mmproj)");
  const std::unique_ptr<Tokenizer> tok = load_tokenizer(model);
  auto setup = std::make_shared<const AudioPromptSetup>(audio_prompt_setup(*rt.model, tok.get()));
  ChatTurnBuilder chat(*tok, nullptr, setup);
  if (state.parallel < static_cast<int64_t>(files.size()) && state.parallel == StateArgs().parallel)
    state.parallel = std::min<int64_t>(static_cast<int64_t>(files.size()), 8);
  Engine engine(*rt.model, *rt.backend, tok.get(), engine_options(state, *rt.model));
  struct Job {
    std::shared_ptr<RequestStream> stream;
    double seconds = 0;
    int64_t audio_tokens = 0;
  };
  std::vector<Job> jobs;
  for (const std::string& f : files) {
    ChatTurnInput in;
    in.messages = transcription_messages(prompt, translate);
    in.audios.push_back(read_audio_file(f, setup->front_end.sample_rate, max_seconds));
    Job job;
    job.seconds = static_cast<double>(in.audios[0].size()) / setup->front_end.sample_rate;
    ChatTurn turn = chat.build(in);
    job.audio_tokens = turn.audios.empty() ? 0 : turn.audios[0]->tokens;
    Request r;
    r.sampling.temperature = temperature;
    r.max_tokens = max_new > 0 ? max_new : -1;
    turn.apply(r);
    LFM_CHECK(static_cast<int64_t>(r.prompt.size()) < engine.ctx_size(), "transcribe: '", f, "' makes a prompt of ",
              r.prompt.size(), " tokens; the context size is ", engine.ctx_size(), " (--ctx-size)");
    job.stream = engine.submit(std::move(r));
    jobs.push_back(std::move(job));
  }
  int status = 0;
  for (size_t i = 0; i < jobs.size(); ++i) {
    std::string text;
    Event ev;
    Usage usage;
    std::string error;
    while (jobs[i].stream->next(ev)) {
      text += ev.text;
      if (ev.kind == Event::Kind::kDone) {
        usage = ev.usage;
        if (ev.finish == FinishReason::kError) error = ev.error;
      }
    }
    while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
    if (!error.empty()) {
      std::fprintf(stderr, "lfm transcribe: '%s': %s\n", files[i].c_str(), error.c_str());
      status = 1;
      continue;
    }
    if (json_out) {
      nlohmann::json j = {{"file", files[i]},
                          {"text", text},
                          {"duration", jobs[i].seconds},
                          {"audio_tokens", jobs[i].audio_tokens},
                          {"prompt_tokens", usage.prompt_tokens},
                          {"completion_tokens", usage.completion_tokens},
                          {"encode_seconds", usage.encode_seconds},
                          {"first_token_seconds", usage.first_token_seconds},
                          {"total_seconds", usage.total_seconds}};
      std::cout << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n" << std::flush;
    } else {
      if (files.size() > 1) std::cout << files[i] << ": ";
      std::cout << text << "\n" << std::flush;
    }
  }
  return status;
}

CommandRegistrar reg({"transcribe", "speech to text with an LFM2-Audio model", run_transcribe});

}  // namespace
}  // namespace lfm::cli
