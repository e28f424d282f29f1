// lfm chat: an interactive conversation with the model's own chat template, streamed as it is
// generated through the engine. Each turn submits the whole rendered conversation; the engine's
// prefix cache resumes it after the longest cached prefix (KV blocks plus the conv-state snapshot
// at that point), so earlier turns are not recomputed.
//
// --audio-out DIR (LFM2-Audio with speech output): replies are spoken — interleaved text and audio,
// the spoken-chat system prompt in --voice unless -s gives one — each saved as DIR/turn-<n>.wav
// (with --no-waveform, or a model without its audio detokenizer: the frames' codes as
// DIR/turn-<n>.codes.json, [frames][codebooks]); each
// spoken reply goes back into later prompts as it was generated, text ids and frames
// (engine/spoken_turn.h), so the prefix cache reuses it.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "chat/output_parser.h"
#include "cli/command.h"
#include "cli/common.h"
#include "cli/grammar_args.h"
#include "core/error.h"
#include "core/json_guard.h"
#include "engine/engine.h"
#include "cli/audio_args.h"
#include "engine/image_prompt.h"
#include "image/image.h"
#include "model/model.h"
#include "engine/chat_turn.h"
#include "audio/audio_encode.h"
#include "engine/speech_prompt.h"
#include "engine/spoken_turn.h"
#include "model/detokenizer.h"
#include "model/speech_out.h"
#include "tokenizer/load_tokenizer.h"

namespace lfm::cli {
namespace {

int run_chat(int argc, char** argv) {
  CLI::App app{
      "Chat with a model interactively (reads user turns from stdin, one per line; /reset starts over, "
      "/image PATH attaches an image to the next turn (LFM2-VL), /audio PATH an audio clip (LFM2-Audio), /exit or end of input quits)."};
  configure_app(app);
  std::string model, system_prompt;
  SamplingParams sp;
  uint64_t seed = 0;
  int64_t max_new = 1024;
  int threads = 0;
  StateArgs state;
  state.ctx_size = 8192;
  bool show_reasoning = false, show_stats = false;
  std::vector<std::string> vars;
  std::string date;
  app.add_option("-m,--model", model,
                 std::string("Model: Hugging Face folder (with tokenizer files) or .gguf file") + kModelRefHelp)
      ->required();
  app.add_option("-s,--system", system_prompt, "System prompt");
  app.add_option("-n,--max-new-tokens", max_new, "Most tokens per reply")
      ->capture_default_str()
      ->check(positive_number());
  std::string generation_config = "auto";
  add_sampling_options(app, sp, seed, generation_config);
  add_state_options(app, state, /*engine=*/true);
  LoadOptions load;
  add_load_options(app, load);
  std::string device = "cpu";
  add_device_option(app, device);
  app.add_option("-t,--threads", threads, "Threads (0: all cores)")
      ->capture_default_str()
      ->check(non_negative_number());
  app.add_option("--var", vars, "Extra template variable name=JSON (e.g. keep_past_thinking=true); repeatable");
  app.add_option("--date", date, "Pin strftime_now to YYYY-MM-DD");
  std::string tools_file;
  app.add_option("--tools", tools_file, "JSON file with the tools (OpenAI's list) the template offers the model");
  app.add_flag("--show-reasoning", show_reasoning, "Print <think> reasoning (dimmed) as well as the answer");
  app.add_flag("--stats", show_stats, "After each reply, print token counts, cache reuse and speed to stderr");
  DraftArgs draft;
  add_draft_options(app, draft);
  GrammarArgs grammar_args;  // every reply follows it
  add_grammar_options(app, grammar_args);
  std::vector<std::string> image_files;
  app.add_option("--image", image_files,
                 "Image file (JPEG, PNG, WebP; repeatable) attached to the first user turn (LFM2-VL models); "
                 "/image PATH attaches one to the next turn")
      ->check(CLI::ExistingFile);
  AudioArgs audio_args;
  add_audio_option(app, audio_args);
  std::string audio_out_dir, voice_name = kDefaultVoice;
  AudioOutParams speech;
  speech.mode = AudioOutMode::kInterleaved;
  speech.temperature = 0.8f;  // llama.cpp's runner for interleaved chat
  speech.top_k = 4;
  bool no_waveform = false;
  app.add_option("--audio-out", audio_out_dir,
                 "Spoken replies (LFM2-Audio with speech output): interleaved text and audio, each saved as "
                 "DIR/turn-<n>.wav");
  app.add_option("--voice", voice_name, "Voice of spoken replies: " + speech_voice_list())->capture_default_str();
  app.add_option("--audio-temperature", speech.temperature, "Sampling temperature of the audio codes (0: greedy)")
      ->capture_default_str()
      ->check(CLI::Range(0.0f, 100.0f));
  app.add_option("--audio-top-k", speech.top_k, "Audio codes drawn from the k most likely (0: all)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_flag("--no-waveform", no_waveform,
               "With --audio-out: save each reply's codes (DIR/turn-<n>.codes.json) instead of its waveform");
  LFM_CLI_PARSE(app, argc, argv);
  const bool speak = !audio_out_dir.empty();
  finish_sampling_options(sp, seed);

  nlohmann::ordered_json extra = nlohmann::ordered_json::object();
  for (const auto& v : vars) {
    const auto eq = v.find('=');
    LFM_CHECK(eq != std::string::npos && eq > 0, "--var '", v, "' is not name=JSON");
    check_json_depth(std::string_view(v).substr(eq + 1), cat("chat: --var '", v.substr(0, eq), "'"));
    try {
      extra[v.substr(0, eq)] = nlohmann::ordered_json::parse(v.substr(eq + 1));
    } catch (const nlohmann::json::exception& e) {
      fail("--var '", v, "': the value is not JSON: ", e.what());
    }
  }
  nlohmann::ordered_json tools;  // null: none
  if (!tools_file.empty()) {
    tools = parse_ordered_json(read_text_file(tools_file, "chat: --tools file"),
                               cat("chat: --tools file '", tools_file, "'"));
    LFM_CHECK(tools.is_array(), "chat: --tools ", tools_file, " must hold a JSON array of tools");
  }
  model = resolve_model_arg(model);
  apply_generation_config(app, generation_config, model, sp);
  Runtime rt = open_runtime(model, threads, load, device);
  auto tok = load_tokenizer(model);
  LFM_CHECK(!tok->chat_template().empty(),
            "chat: the model ships no chat template (chat_template.jinja, "
            "tokenizer_config.json or GGUF tokenizer.chat_template)");
  std::shared_ptr<const ImagePromptSetup> image_setup;
  std::string no_images;  // why the model takes none
  if (rt.model->vision()) {
    try {
      image_setup = std::make_shared<const ImagePromptSetup>(load_image_prompt_setup(model, *rt.model, *tok));
    } catch (const Error& e) {
      no_images = e.what();
    }
  } else {
    no_images = "the model has no vision tower (images need an LFM2-VL model)";
  }
  LFM_CHECK(image_files.empty() || image_setup, "chat: --image: ", no_images);
  // The images waiting for the next user turn.
  std::vector<image::Image> pending;
  auto attach = [&](const std::string& path) {
    try {
      pending.push_back(image::load_image_file(path));
    } catch (const Error& e) {
      fail("image '", path, "': ", e.what());
    }
  };
  for (const std::string& f : image_files) attach(f);
  std::shared_ptr<const AudioPromptSetup> audio_setup;
  std::string no_audio = "the model has no speech encoder (audio needs an LFM2-Audio model)";
  if (rt.model->audio()) {
    try {
      audio_setup = std::make_shared<const AudioPromptSetup>(audio_prompt_setup(*rt.model, tok.get()));
    } catch (const Error& e) {
      no_audio = e.what();
    }
  }
  LFM_CHECK(audio_args.files.empty() || audio_setup, "chat: --audio: ", no_audio);
  // The clips waiting for the next user turn (mono samples at the model's rate).
  std::vector<std::vector<float>> pending_audio;
  auto attach_audio = [&](const std::string& path) {
    pending_audio.push_back(read_audio_file(path, audio_setup->front_end.sample_rate, audio_args.max_seconds));
  };
  for (const std::string& f : audio_args.files) attach_audio(f);
  const SpeechVoice& voice = parse_voice(voice_name);
  if (speak) {
    LFM_CHECK(rt.model->speech_out(), "chat: --audio-out: the model does not speak (it has no audio output head: an "
                                      "LFM2-Audio model with its depth transformer)");
    LFM_CHECK(audio_setup, "chat: --audio-out: spoken turns are put back where the audio placeholder stands: ", no_audio);
    LFM_CHECK(!grammar_args.given(), "chat: --audio-out: spoken replies cannot follow a grammar");
    LFM_CHECK(draft.kind() == Drafter::kNone, "chat: --audio-out: spoken replies cannot be drafted");
    speech.waveform = !no_waveform && rt.model->detokenizer();
    if (!no_waveform && !speech.waveform)
      std::fprintf(stderr, "lfm chat: the model has no audio detokenizer (audio_detokenizer/ or the vocoder GGUF): "
                           "replies are saved as codes (turn-<n>.codes.json)\n");
    std::filesystem::create_directories(audio_out_dir);
    nlohmann::ordered_json sys = nlohmann::ordered_json::array();
    add_spoken_chat_prompt(sys, voice);
    if (system_prompt.empty()) system_prompt = sys[0]["content"].get<std::string>();
  }
  const ChatTurnBuilder turns(*tok, image_setup, audio_setup);
  EngineOptions eo = engine_options(state, *rt.model);
  apply_draft_options(draft, rt, load, eo);
  if (grammar_args.given() && eo.state.draft_tokens == 0) eo.state.draft_tokens = draft.draft_max;  // jump-forward
  Engine engine(*rt.model, *rt.backend, tok.get(), eo, rt.draft.get());
  const int64_t ctx = engine.ctx_size();
  std::shared_ptr<const grammar::TokenGrammar> reply_grammar;
  if (auto g = load_grammar(grammar_args)) reply_grammar = engine.compile_grammar(g);

  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  if (!system_prompt.empty()) messages.push_back({{"role", "system"}, {"content", system_prompt}});
  std::vector<image::Image> images;  // the conversation's, in order: each turn re-sends them all
  std::vector<std::vector<float>> clips;  // likewise its audio clips
  std::vector<std::shared_ptr<const SpokenReply>> spoken;  // its spoken replies, in order
  int spoken_turn = 0;
  const bool tty = isatty(fileno(stdout));

  std::string line;
  while (true) {
    if (isatty(fileno(stdin))) std::fprintf(stderr, "> ");
    if (!std::getline(std::cin, line) || line == "/exit") break;
    if (line == "/reset") {
      messages.erase(messages.begin() + (system_prompt.empty() ? 0 : 1), messages.end());
      images.clear();
      pending.clear();
      clips.clear();
      pending_audio.clear();
      spoken.clear();
      continue;
    }
    if (line.rfind("/audio", 0) == 0 && (line.size() == 6 || line[6] == ' ')) {
      std::string path = line.substr(std::min<size_t>(line.size(), 7));
      while (!path.empty() && path.back() == ' ') path.pop_back();
      try {
        LFM_CHECK(audio_setup, "/audio: ", no_audio);
        LFM_CHECK(!path.empty(), "usage: /audio PATH");
        attach_audio(path);
        std::fprintf(stderr, "[audio %s attached to the next turn]\n", path.c_str());
      } catch (const Error& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
      }
      continue;
    }
    if (line.rfind("/image", 0) == 0 && (line.size() == 6 || line[6] == ' ')) {
      std::string path = line.substr(std::min<size_t>(line.size(), 7));
      while (!path.empty() && path.back() == ' ') path.pop_back();
      try {
        LFM_CHECK(image_setup, "/image: ", no_images);
        LFM_CHECK(!path.empty(), "usage: /image PATH");
        attach(path);
        std::fprintf(stderr, "[image %s attached to the next turn]\n", path.c_str());
      } catch (const Error& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
      }
      continue;
    }
    if (line.empty()) continue;
    // Images or audio first, then the text, as LFM2-VL's and LFM2-Audio's examples put them.
    if (pending.empty() && pending_audio.empty()) {
      messages.push_back({{"role", "user"}, {"content", line}});
    } else {
      nlohmann::ordered_json parts = nlohmann::ordered_json::array();
      for (size_t i = 0; i < pending.size(); ++i) parts.push_back({{"type", "image"}});
      for (size_t i = 0; i < pending_audio.size(); ++i) parts.push_back({{"type", "audio"}});
      parts.push_back({{"type", "text"}, {"text", line}});
      messages.push_back({{"role", "user"}, {"content", std::move(parts)}});
    }
    const size_t images_before = images.size(), clips_before = clips.size();
    for (image::Image& im : pending) images.push_back(std::move(im));
    pending.clear();
    for (auto& c : pending_audio) clips.push_back(std::move(c));
    pending_audio.clear();
    Request req;
    req.sampling = sp;
    req.drafter = draft.kind();
    req.max_drafts = draft.draft_max;
    req.grammar = reply_grammar;
    req.jump_forward = !grammar_args.no_jump_forward;
    if (speak) req.audio_out = speech;
    std::shared_ptr<RequestStream> stream;
    ChatTurn turn;
    try {
      ChatTurnInput in;
      in.messages = messages;
      in.tools = tools;
      in.template_kwargs = extra;
      if (!date.empty()) in.date = date;
      in.parse_tool_calls_without_tools = true;  // tools may be described in the system prompt
      in.images = images;
      in.audios = clips;
      in.spoken = spoken;
      turn = turns.build(in);
      turn.apply(req);
      const int64_t room = ctx - static_cast<int64_t>(req.prompt.size());
      LFM_CHECK(room >= 1, "chat: the conversation has ", req.prompt.size(), " tokens, past the context size ", ctx,
                " (use /reset or a larger --ctx-size)");
      req.max_tokens = std::min(max_new, room);
      stream = engine.submit(req);
    } catch (const Error& e) {
      std::fprintf(stderr, "error: %s\n", e.what());
      messages.erase(messages.end() - 1);
      images.resize(images_before);  // the turn's images and clips are dropped with it
      clips.resize(clips_before);
      continue;
    }

    chat::StreamingOutputParser parser(turn.parser);
    std::string reply;
    std::optional<SpokenReplyRecorder> recorder;
    std::vector<float> samples;
    int sample_rate = 24000;
    if (speak)
      recorder.emplace(rt.model->speech_out()->config().codebooks, rt.model->speech_out()->config().audio_vocab);
    auto show = [&](const std::vector<chat::StreamEvent>& events) {
      for (const auto& e : events) {
        if (e.kind == chat::StreamEvent::Kind::kContent) {
          std::cout << e.text;
        } else if (e.kind == chat::StreamEvent::Kind::kReasoning) {
          if (show_reasoning) std::cout << (tty ? "\033[2m" : "") << e.text << (tty ? "\033[0m" : "");
        } else {
          std::cout << "\n[tool call] " << e.tool_call.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) << "\n";
        }
      }
      std::cout << std::flush;
    };
    Event ev;
    while (stream->next(ev)) {
      if (recorder) recorder->add(ev);
      samples.insert(samples.end(), ev.audio.begin(), ev.audio.end());
      if (ev.sample_rate > 0) sample_rate = ev.sample_rate;
      if (ev.kind == Event::Kind::kAudio) continue;
      reply += ev.text;
      show(parser.feed(ev.text));
      if (ev.kind != Event::Kind::kDone) continue;
      if (ev.finish == FinishReason::kError) std::fprintf(stderr, "\nerror: %s\n", ev.error.c_str());
      if (ev.finish == FinishReason::kLength && ev.usage.prompt_tokens + ev.usage.completion_tokens >= ctx)
        std::fprintf(stderr, "\n[context full]\n");
      if (show_stats) {
        const double decode = ev.usage.total_seconds - ev.usage.first_token_seconds;
        std::fprintf(stderr, "\n[prompt %lld tokens (%lld from cache), reply %lld tokens, first token %.3f s, %.2f tok/s]",
                     static_cast<long long>(ev.usage.prompt_tokens), static_cast<long long>(ev.usage.cached_tokens),
                     static_cast<long long>(ev.usage.completion_tokens), ev.usage.first_token_seconds,
                     decode > 0 ? (ev.usage.completion_tokens - 1) / decode : 0.0);
        if (req.drafter != Drafter::kNone)
          std::fprintf(stderr, "[speculative (%s): %lld of %lld drafted tokens accepted]", drafter_name(req.drafter),
                       static_cast<long long>(ev.usage.accepted_tokens), static_cast<long long>(ev.usage.drafted_tokens));
      }
    }
    show(parser.finish());
    std::cout << "\n" << std::flush;
    if (!recorder) {
      messages.push_back({{"role", "assistant"}, {"content", reply}});
      continue;
    }
    // The spoken reply: saved, and kept to stand for this turn in later prompts.
    SpokenReply r = recorder->take();
    r.transcript = reply;
    const std::string base = audio_out_dir + "/turn-" + std::to_string(++spoken_turn);
    try {
      if (speech.waveform) {
        const std::string wav = audio::encode_audio(samples, sample_rate, audio::AudioFormat::kWav);
        std::ofstream(base + ".wav", std::ios::binary).write(wav.data(), static_cast<std::streamsize>(wav.size()));
        std::fprintf(stderr, "[%s.wav: %.2f s]\n", base.c_str(), static_cast<double>(samples.size()) / sample_rate);
      } else {
        nlohmann::json frames = nlohmann::json::array();
        for (int64_t f = 0; f < r.frames(); ++f)
          frames.push_back(std::vector<int32_t>(r.codes.begin() + f * r.codebooks, r.codes.begin() + (f + 1) * r.codebooks));
        std::ofstream(base + ".codes.json") << frames.dump() << "\n";
        std::fprintf(stderr, "[%s.codes.json: %lld frames]\n", base.c_str(), static_cast<long long>(r.frames()));
      }
    } catch (const Error& e) {
      std::fprintf(stderr, "error: %s\n", e.what());
    }
    if (r.ids.empty()) {  // nothing was generated (an error): the turn stays text
      messages.push_back({{"role", "assistant"}, {"content", reply}});
      continue;
    }
    spoken.push_back(std::make_shared<const SpokenReply>(std::move(r)));
    messages.push_back({{"role", "assistant"}, {"content", nlohmann::ordered_json::array({{{"type", "spoken"}}})}});
  }
  return 0;
}

CommandRegistrar reg({"chat", "chat interactively with the model's chat template", run_chat});

}  // namespace
}  // namespace lfm::cli
