// --audio FILE (repeatable) for the commands that run a model: the files decoded to the model's
// rate (audio/audio_decode.h), each one's placeholder (the model's audio token, once per clip, in
// the prompt's ids, or "<audio>" in its text) expanded into the clip's audio tokens, and the clips
// handed to the engine (Request::audios).
#pragma once

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "engine/audio_prompt.h"

namespace lfm {
class Model;
class Tokenizer;
}  // namespace lfm

namespace lfm::cli {

struct AudioArgs {
  std::vector<std::string> files;
  double max_seconds = 600;  // --max-audio-seconds
};

void add_audio_option(CLI::App& app, AudioArgs& args);

// Throws when audio is given to a model without a speech encoder (before anything else is loaded).
void check_audio_supported(const AudioArgs& args, const Model& model);

// The mono samples of `path` at `sample_rate`; lfm::Error naming the file when it cannot be read,
// is not audio, or is longer than `max_seconds`.
std::vector<float> read_audio_file(const std::string& path, int sample_rate, double max_seconds);

// "<audio>" in `text` replaced by the model's placeholder text (a no-op without --audio).
void replace_audio_markers_in(std::string& text, const AudioArgs& args, const Model& model, const Tokenizer* tok);

// `ids` as they are when no files are given; else laid out with the clips (see expand_audio).
AudioPrompt prompt_with_audio(std::vector<int32_t> ids, const AudioArgs& args, const Model& model, const Tokenizer* tok);

}  // namespace lfm::cli
