#include "cli/audio_args.h"

#include "audio/audio_decode.h"
#include "core/error.h"
#include "model/model.h"

namespace lfm::cli {

void add_audio_option(CLI::App& app, AudioArgs& args) {
  app.add_option("--audio", args.files,
                 "Audio file (WAV, FLAC, OGG/Vorbis/Opus, MP3; repeatable) for an LFM2-Audio model: the model's audio "
                 "token (<audio> in text) stands once per clip where it goes")
      ->check(CLI::ExistingFile);
  app.add_option("--max-audio-seconds", args.max_seconds, "Longest clip accepted, in seconds (read from the file's header)")
      ->capture_default_str()
      ->check(CLI::Range(0.1, 86400.0));
}

void check_audio_supported(const AudioArgs& args, const Model& model) {
  LFM_CHECK(args.files.empty() || model.audio(), "--audio: the model has no speech encoder (audio needs an "
            "LFM2-Audio checkpoint folder, or a .gguf language model with its --mmproj)");
}

std::vector<float> read_audio_file(const std::string& path, int sample_rate, double max_seconds) {
  audio::AudioDecodeLimits limits;
  limits.max_seconds = max_seconds;
  try {
    return audio::load_audio_file(path, sample_rate, limits).samples;
  } catch (const Error& e) {
    fail("audio file '", path, "': ", e.what());
  }
}

void replace_audio_markers_in(std::string& text, const AudioArgs& args, const Model& model, const Tokenizer* tok) {
  if (args.files.empty() || text.empty()) return;
  LFM_CHECK(tok, "--audio needs the model's tokenizer (its audio token)");
  replace_audio_markers(text, audio_prompt_setup(model, tok).placeholder_text);
}

AudioPrompt prompt_with_audio(std::vector<int32_t> ids, const AudioArgs& args, const Model& model, const Tokenizer* tok) {
  if (args.files.empty()) return {std::move(ids), {}};
  const AudioPromptSetup setup = audio_prompt_setup(model, tok);
  std::vector<std::vector<float>> clips;
  for (const std::string& f : args.files) clips.push_back(read_audio_file(f, setup.front_end.sample_rate, args.max_seconds));
  return expand_audio(ids, clips, setup);
}

}  // namespace lfm::cli
