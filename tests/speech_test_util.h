// Test models with speech output (defined in model_test_util.cpp beside write_audio_model).
#pragma once

#include <string>

namespace lfm::test {

// write_audio_model's folder made from tests/data/audio/lfm2audio_tts_tiny: an LFM2-Audio model with
// speech output (its depth transformer), its audio detokenizer (tests/data/audio/detokenizer_tiny
// as audio_detokenizer/) and the synthetic tokenizer's vocabulary, for chat-level speech output
// tests (the server, lfm chat).
void write_speech_model(const std::string& dir);

}  // namespace lfm::test
