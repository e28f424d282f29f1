// A model that speaks for the CLI and server tests of speech output (lfm speak, /v1/audio/speech):
// the tiny transformers-made LFM2-Audio checkpoint of tests/data/audio/lfm2audio_tts_tiny (its
// depth transformer, audio embeddings and speech encoder as they are) and the tiny detokenizer,
// with the synthetic tokenizer
// and chat template of test::write_text_model, and a scripted backbone (as write_scripted_model):
// every backbone layer's weights zero, so the residual stream is the input's embedding, and the
// (tied) embedding rows set so that after any text token <|audio_start|> (128) wins: the TTS turn
// starts speaking at once, and the frames are the depth transformer's (random weights: what it
// says means nothing). Plumbing tests only.
#pragma once

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "formats/safetensors.h"
#include "formats/safetensors_writer.h"
#include "model_test_util.h"
#include "test_util.h"

namespace lfm::test {

// write_audio_model's folder made from tests/data/audio/lfm2audio_tts_tiny: an LFM2-Audio model with
// speech output (its depth transformer), its audio detokenizer (tests/data/audio/detokenizer_tiny
// as audio_detokenizer/) and the synthetic tokenizer's vocabulary, for chat-level speech output
// tests (the server, lfm chat). Defined in model_test_util.cpp beside write_audio_model.
void write_speech_model(const std::string& dir);

inline void write_speaking_model(const std::string& dir) {
  namespace fs = std::filesystem;
  write_text_model(dir);  // the tokenizer, its config and the template (config and weights replaced below)
  fs::remove(fs::path(dir) / "model.safetensors");
  const std::string fixture = data_dir() + "/audio/lfm2audio_tts_tiny";
  nlohmann::json cfg = read_json(fixture + "/config.json");
  const nlohmann::json tok = read_json(dir + "/tokenizer.json");
  int64_t vocab = 0;
  for (const auto& [piece, id] : tok["model"]["vocab"].items()) vocab = std::max<int64_t>(vocab, id.get<int64_t>() + 1);
  for (const auto& added : tok["added_tokens"]) vocab = std::max<int64_t>(vocab, added["id"].get<int64_t>() + 1);
  vocab = std::max<int64_t>(vocab, 256);
  cfg["vocab_size"] = vocab;
  cfg["lfm"]["vocab_size"] = vocab;
  std::ofstream(dir + "/config.json") << cfg.dump(2);
  // The waveform: the tiny random detokenizer of tests/data/audio/detokenizer_tiny as the
  // checkpoint's audio_detokenizer/ folder (LFM2.5-Audio's layout).
  fs::create_directories(fs::path(dir) / "audio_detokenizer");
  for (const char* f : {"config.json", "model.safetensors"})
    fs::copy_file(data_dir() + "/audio/detokenizer_tiny/" + f, fs::path(dir) / "audio_detokenizer" / f,
                  fs::copy_options::overwrite_existing);

  const SafetensorsCheckpoint src(fixture);
  const int64_t d = cfg["lfm"]["hidden_size"].get<int64_t>();
  const std::string embed = "model.lfm.embed_tokens.weight";
  std::vector<SafetensorsWriter::Entry> entries;
  for (const std::string& name : src.names()) {
    const TensorView* t = src.find(name);
    std::vector<int64_t> shape = t->shape;
    if (name == embed) shape[0] = vocab;
    entries.push_back({name, DType::F32, shape});
  }
  SafetensorsWriter w(dir + "/model.safetensors", entries);
  for (const auto& e : entries) {
    const TensorView* t = src.find(e.name);
    if (t->dtype != DType::F32) throw std::runtime_error("write_speaking_model: " + e.name + " is not float32");
    int64_t n = 1;
    for (int64_t x : e.shape) n *= x;
    std::vector<float> v(static_cast<size_t>(n), 0.0f);
    if (e.name.rfind("model.lfm.", 0) != 0) {
      std::memcpy(v.data(), t->data, std::min(t->nbytes, v.size() * sizeof(float)));  // fixture tensors are f32
    } else if (e.name == embed) {
      // Every token embeds as e_0 and so reads 1·|h|; <|audio_start|> reads 10·|h|.
      for (int64_t id = 0; id < vocab; ++id) v[static_cast<size_t>(id * d)] = 1.0f;
      v[static_cast<size_t>(128 * d)] = 10.0f;
    } else if (e.name.find("norm") != std::string::npos) {
      std::fill(v.begin(), v.end(), 1.0f);
    }
    w.write(e.name, v.data(), v.size() * sizeof(float));
  }
  w.finish();
}

}  // namespace lfm::test
