// lfm speak: text to speech with an LFM2.5-Audio model. The TTS turn (engine/speech_prompt.h) runs
// in sequential mode; each waveform piece the engine streams (Event::audio) is encoded at once
// (audio/audio_encode.h: AudioStreamEncoder) and written to the output, so the file grows as the
// model speaks and `-o -` can be piped into a player. Duration, frames, the speed (audio seconds
// per wall second) and the time to the first samples go to stderr.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>

#include "audio/audio_encode.h"
#include "cli/command.h"
#include "model/speech_out.h"
#include "cli/common.h"
#include "core/error.h"
#include "core/output_file.h"
#include "engine/engine.h"
#include "engine/speech_prompt.h"
#include "model/model.h"
#include "tokenizer/load_tokenizer.h"

namespace lfm::cli {
namespace {

// The output: a file written as the audio comes (removed again when speaking fails), or stdout.
class SpeechOutput {
 public:
  explicit SpeechOutput(const std::string& path) : path_(path) {
    if (path == "-") {
      f_ = stdout;
      return;
    }
    f_ = std::fopen(path.c_str(), "wb");
    LFM_CHECK(f_, "speak: cannot write '", path, "': ", std::strerror(errno));
  }
  ~SpeechOutput() {
    if (f_ && f_ != stdout) {
      std::fclose(f_);
      if (!done_) std::remove(path_.c_str());  // a partial file is no answer
    }
  }
  void write(const std::string& bytes) {
    if (bytes.empty()) return;
    LFM_CHECK(std::fwrite(bytes.data(), 1, bytes.size(), f_) == bytes.size() && std::fflush(f_) == 0,
              "speak: writing '", path_, "' failed: ", std::strerror(errno));
  }
  void close() {
    if (f_ != stdout) {
      const int rc = std::fclose(f_);
      f_ = nullptr;
      LFM_CHECK(rc == 0, "speak: writing '", path_, "' failed: ", std::strerror(errno));
    }
    done_ = true;
  }

 private:
  std::string path_;
  std::FILE* f_ = nullptr;
  bool done_ = false;
};

int run_speak(int argc, char** argv) {
  CLI::App app{"Speak text with an LFM2.5-Audio model (24 kHz mono): the audio is written as the model makes it."};
  configure_app(app);
  std::string model, voice = kDefaultVoice, format_name, out_path;
  std::vector<std::string> words;
  int threads = 0;
  int64_t max_new = 0;
  double max_seconds = 600;
  uint64_t seed = 0;
  bool speak_now = false, reply = false;
  AudioOutParams audio;
  // Sampled codes by default, as llama.cpp's liquid-audio runner samples them (greedy Mimi codes tend
  // to repeat a sound): temperature 0.8, top-k 64 for TTS (4 for a spoken reply, --reply). The text
  // is greedy unless asked.
  audio.temperature = 0.8f;
  audio.top_k = -1;  // unset: 64, or 4 with --reply
  SamplingParams text;
  app.add_option("-m,--model", model, std::string("Model: an LFM2.5-Audio checkpoint folder") + kModelRefHelp)->required();
  app.add_option("text", words, "The text to speak (the words are joined by spaces)")->required();
  app.add_option("--voice", voice, "Voice: " + speech_voice_list() + " (also as \"US female\")")->capture_default_str();
  app.add_option("--format", format_name,
                 "Output format: wav, wav_float, pcm (raw s16le), flac, opus, ogg (vorbis), mp3 (default: from -o's "
                 "extension, else wav)");
  app.add_option("-o,--output", out_path, "Output file ('-': stdout; default: speech.<format's extension>)");
  app.add_option("--audio-temperature", audio.temperature, "Temperature of the audio codes (0: greedy)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 2.0));
  app.add_option("--audio-top-k", audio.top_k, "Top-k of the audio codes (0: all; default 64, 4 with --reply)")->check(non_negative_number());
  app.add_option("--temperature", text.temperature, "Temperature of the text tokens (0: greedy)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 2.0));
  app.add_option("--top-k", text.top_k, "Top-k of the text tokens (0: all)")->capture_default_str()->check(non_negative_number());
  app.add_option("--seed", seed, "Seed of the sampling (0: the default seed)")->capture_default_str();
  app.add_option("-n,--max-new-tokens", max_new, "Most steps (text tokens and audio frames; 0: until the model ends or the context is full)")
      ->capture_default_str()
      ->check(non_negative_number());
  app.add_flag("--reply", reply,
               "Answer the text in a spoken chat (interleaved text and audio under the spoken-chat system prompt) "
               "instead of reading it out");
  app.add_flag("--speak-now", speak_now,
               "Open the reply with <|audio_start|> instead of letting the model choose it (a model that would say "
               "something first speaks at once; benchmarks on random weights need it)");
  app.add_option("--max-audio-seconds", max_seconds, "Stop when the speech reaches this duration")
      ->capture_default_str()
      ->check(CLI::Range(0.1, 86400.0));
  StateArgs state;
  add_state_options(app, state, /*engine=*/true);
  LoadOptions load;
  add_load_options(app, load);
  std::string device = "cpu";
  add_device_option(app, device);
  app.add_option("-t,--threads", threads, "Threads (0: all cores)")->capture_default_str()->check(non_negative_number());
  LFM_CLI_PARSE(app, argc, argv);

  // Everything about the request is checked before the model loads.
  std::string input;
  for (const std::string& w : words) input += (input.empty() ? "" : " ") + w;
  LFM_CHECK(!input.empty(), "speak: no text to speak");
  const SpeechVoice& v = parse_voice(voice);
  std::string ext = std::filesystem::path(out_path).extension().string();
  if (!ext.empty()) ext.erase(0, 1);
  if (format_name.empty()) format_name = out_path.empty() || out_path == "-" || ext.empty() ? "wav" : ext;
  const audio::AudioFormat format = audio::parse_audio_format(format_name);
  if (out_path.empty()) out_path = std::string("speech.") + audio::audio_file_extension(format);
  if (audio.top_k < 0) audio.top_k = reply ? 4 : 64;
  audio.validate();
  finish_sampling_options(text, seed);

  model = resolve_model_arg(model);
  if (out_path != "-") check_output_spares_input(out_path, model, "speak");
  Runtime rt = open_runtime(model, threads, load, device);
  LFM_CHECK(rt.model->speech_out(), "speak: the model cannot speak (it has no audio output head: load an LFM2.5-Audio "
            "checkpoint folder)");
  const std::unique_ptr<Tokenizer> tok = load_tokenizer(model);
  std::shared_ptr<const AudioPromptSetup> setup;
  if (rt.model->audio()) setup = std::make_shared<const AudioPromptSetup>(audio_prompt_setup(*rt.model, tok.get()));
  ChatTurnBuilder chat(*tok, nullptr, setup);
  Request r = tts_request(chat, input, v, audio, text);
  if (reply) {  // a spoken chat's answer to the text: interleaved text and audio
    ChatTurnInput in;
    in.messages = spoken_chat_messages(nlohmann::ordered_json::array({{{"role", "user"}, {"content", input}}}));
    Request c;
    c.sampling = r.sampling;
    chat.build(in).apply(c);
    c.audio_out = r.audio_out;
    c.audio_out.mode = AudioOutMode::kInterleaved;
    r = std::move(c);
  }
  if (speak_now) {  // the turn opens with <|audio_start|>: the model speaks from its first step
    r.prompt.push_back(rt.model->speech_out() ? rt.model->speech_out()->config().audio_start_id : 128);
    r.audio_out.audio_first = true;
  }
  r.max_tokens = max_new > 0 ? max_new : -1;
  Engine engine(*rt.model, *rt.backend, tok.get(), engine_options(state, *rt.model));
  LFM_CHECK(static_cast<int64_t>(r.prompt.size()) < engine.ctx_size(), "speak: the text makes a prompt of ",
            r.prompt.size(), " tokens; the context size is ", engine.ctx_size(), " (--ctx-size)");

  SpeechOutput out(out_path);
  std::optional<audio::AudioStreamEncoder> enc;
  int sample_rate = 0;
  int64_t frames = 0, samples = 0;
  bool cut = false;
  std::string spoken_text;
  const auto stream = engine.submit(std::move(r));
  Event ev;
  Usage usage;
  std::string error;
  while (stream->next(ev)) {
    if (ev.kind == Event::Kind::kToken) spoken_text += ev.text;
    if (ev.kind == Event::Kind::kAudio && !ev.audio_codes.empty() && !ev.audio_end) ++frames;
    if (!ev.audio.empty() && !cut) {  // (after the cut, what was already queued is dropped)
      if (!enc) {
        sample_rate = ev.sample_rate;
        enc.emplace(format, sample_rate);
      }
      LFM_CHECK(ev.sample_rate == sample_rate, "speak: the engine changed the sample rate from ", sample_rate, " to ",
                ev.sample_rate, " Hz");
      out.write(enc->push(ev.audio));
      samples += static_cast<int64_t>(ev.audio.size());
      if (!cut && static_cast<double>(samples) / sample_rate >= max_seconds) {
        cut = true;
        stream->cancel();
      }
    }
    if (ev.kind == Event::Kind::kDone) {
      usage = ev.usage;
      if (ev.finish == FinishReason::kError) error = ev.error;
    }
  }
  LFM_CHECK(error.empty(), "speak: ", error);
  LFM_CHECK(enc, "speak: the model produced no audio (it wrote ", usage.completion_tokens, " tokens",
            spoken_text.empty() ? "" : ": \"" + spoken_text + "\"", ")");
  out.write(enc->finish());
  out.close();
  const double seconds = static_cast<double>(samples) / sample_rate;
  // Speed as audio seconds per wall second (> 1: faster than real time), from submission to the
  // end; and the time to the first samples.
  std::fprintf(stderr,
               "lfm speak: %s: %.2f s of audio (%lld frames, %d Hz, %s, %lld bytes) in %.2f s: %.3f audio seconds "
               "per second, first audio after %.3f s%s\n",
               out_path == "-" ? "stdout" : out_path.c_str(), seconds, static_cast<long long>(frames), sample_rate,
               audio::audio_format_name(format), static_cast<long long>(enc->bytes()), usage.total_seconds,
               usage.total_seconds > 0 ? seconds / usage.total_seconds : 0.0, usage.first_audio_seconds,
               cut ? " (cut at --max-audio-seconds)" : "");
  return 0;
}

CommandRegistrar reg({"speak", "text to speech with an LFM2.5-Audio model", run_speak});

}  // namespace
}  // namespace lfm::cli
