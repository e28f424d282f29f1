// Audio through the C API (LFM2-Audio, tests/data/audio): a clip as raw PCM, as a WAV file and as
// WAV bytes in memory, with an ids prompt, gives transformers' greedy tokens (reference.json
// `prompt`; tests/audio_engine_test.cpp checks the engine against the same case); chat prompts take
// {"type": "audio"} parts; and the refusals: a model without a speech encoder, bytes that are not
// audio, placeholders that do not match the clips.
#include <gtest/gtest.h>
#include <lfm/lfm.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "capi_test_util.h"

namespace {

using namespace lfm_capi_test;
using json = nlohmann::json;

const std::string kAudio = kData + "/audio/lfm2audio_tiny_a";

std::string file_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

std::vector<float> clip_samples(const std::string& name) {
  const std::string b = file_bytes(kData + "/audio/frontend/clips/" + name + ".f32");
  std::vector<float> out(b.size() / 4);
  std::memcpy(out.data(), b.data(), b.size());
  return out;
}

// A 32-bit float WAV of mono samples at 16 kHz: decoding gives the samples back exactly.
std::string float_wav(const std::vector<float>& s) {
  auto le32 = [](uint32_t v) { return std::string{char(v), char(v >> 8), char(v >> 16), char(v >> 24)}; };
  auto le16 = [](uint16_t v) { return std::string{char(v), char(v >> 8)}; };
  const uint32_t bytes = static_cast<uint32_t>(s.size() * 4);
  std::string data(bytes, '\0');
  std::memcpy(data.data(), s.data(), bytes);
  return "RIFF" + le32(36 + bytes) + "WAVE" + "fmt " + le32(16) + le16(3) + le16(1) + le32(16000) + le32(64000) +
         le16(4) + le16(32) + "data" + le32(bytes) + data;
}

struct Case {
  std::vector<int32_t> ids;  // one audio token for the clip
  std::vector<int32_t> greedy;
  std::string clip;
};

Case prompt_case() {
  std::ifstream f(kAudio + "/reference.json");
  const json ref = json::parse(f);
  Case c;
  bool in_audio = false;
  for (const auto& v : ref["prompt"]["input_ids"]) {
    const int32_t id = v.get<int32_t>();
    if (id == 133 && in_audio) continue;
    in_audio = id == 133;
    c.ids.push_back(id);
  }
  for (const auto& g : ref["prompt"]["greedy"]) c.greedy.push_back(g["token"].get<int32_t>());
  c.clip = ref["prompt"]["clip"];
  return c;
}

TEST(CApiAudio, PcmFilesAndBytesGiveTheReferenceTokens) {
  Model model(kAudio);
  lfm_model_info info;
  info.struct_size = sizeof(info);
  ASSERT_EQ(lfm_model_get_info(model.m, &info), LFM_OK);
  EXPECT_EQ(info.has_audio, 1);
  EXPECT_EQ(info.audio_token, 133);
  EXPECT_EQ(info.audio_sample_rate, 16000);
  EXPECT_EQ(info.audio_max_seconds, 400);  // 5000 encoder positions of 8 frames of 10 ms
  Engine eng(model.m);
  const Case c = prompt_case();
  const std::vector<float> samples = clip_samples(c.clip);
  const std::string wav = float_wav(samples);
  const std::string dir = std::filesystem::temp_directory_path() / ("lfm_capi_audio_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/clip.wav";
  std::ofstream(path, std::ios::binary) << wav;
  const lfm_sampling_params sp = greedy_params(static_cast<int64_t>(c.greedy.size()));
  for (int how = 0; how < 3; ++how) {
    lfm_prompt p = ids_prompt(c.ids);
    const char* paths[1] = {how == 0 ? path.c_str() : nullptr};
    const void* data[1] = {how == 1 ? wav.data() : nullptr};
    const size_t sizes[1] = {wav.size()};
    const float* pcm[1] = {samples.data()};
    const size_t frames[1] = {samples.size()};
    p.n_audio = 1;
    p.audio_paths = paths;
    p.audio_data = data;
    p.audio_sizes = sizes;
    p.audio_pcm = pcm;
    p.audio_pcm_frames = frames;
    p.audio_pcm_channels = 1;
    p.audio_pcm_rate = 16000;
    const Outcome o = run(eng.e, p, &sp);
    ASSERT_EQ(o.status, LFM_OK) << o.error;
    EXPECT_EQ(o.tokens, c.greedy) << "how " << how;
    EXPECT_EQ(o.done.prompt_tokens, static_cast<int64_t>(c.ids.size()) + 12);  // 13 audio tokens for one
    EXPECT_LE(o.done.audio_clips, 1);
  }
  // Stereo PCM at 32 kHz: down-mixed and resampled, it still runs (its tokens are its own).
  std::vector<float> stereo;
  for (size_t i = 0; i < 32000; ++i) {
    stereo.push_back(0.1f * static_cast<float>(std::sin(0.05 * static_cast<double>(i))));
    stereo.push_back(0.0f);
  }
  lfm_prompt p = ids_prompt(c.ids);
  const float* pcm[1] = {stereo.data()};
  const size_t frames[1] = {stereo.size() / 2};
  p.n_audio = 1;
  p.audio_pcm = pcm;
  p.audio_pcm_frames = frames;
  p.audio_pcm_channels = 2;
  p.audio_pcm_rate = 32000;
  const Outcome o = run(eng.e, p, &sp);
  ASSERT_EQ(o.status, LFM_OK) << o.error;
  EXPECT_EQ(o.done.prompt_tokens, static_cast<int64_t>(c.ids.size()) + 12);  // 1 s: 13 audio tokens
  std::filesystem::remove_all(dir);
}

TEST(CApiAudio, Refusals) {
  const Case c = prompt_case();
  const std::vector<float> samples = clip_samples(c.clip);
  const float* pcm[1] = {samples.data()};
  const size_t frames[1] = {samples.size()};
  auto with_clip = [&](const std::vector<int32_t>& ids) {
    lfm_prompt p = ids_prompt(ids);
    p.n_audio = 1;
    p.audio_pcm = pcm;
    p.audio_pcm_frames = frames;
    p.audio_pcm_channels = 1;
    p.audio_pcm_rate = 16000;
    return p;
  };
  const lfm_sampling_params sp = greedy_params(2);
  {
    Model text(kFixture);  // no speech encoder
    Engine eng(text.m);
    const Outcome o = run(eng.e, with_clip(c.ids), &sp);
    EXPECT_EQ(o.status, LFM_ERR_UNSUPPORTED) << o.error;
    EXPECT_NE(o.error.find("speech encoder"), std::string::npos) << o.error;
  }
  Model model(kAudio);
  Engine eng(model.m);
  // Not audio.
  lfm_prompt p = ids_prompt(c.ids);
  const std::string junk = "RIFF not really a wave file";
  const void* data[1] = {junk.data()};
  const size_t sizes[1] = {junk.size()};
  p.n_audio = 1;
  p.audio_data = data;
  p.audio_sizes = sizes;
  Outcome o = run(eng.e, p, &sp);
  EXPECT_EQ(o.status, LFM_ERR_INVALID_ARGUMENT);
  EXPECT_NE(o.error.find("audio clip 0"), std::string::npos) << o.error;
  // Two placeholders for one clip; none.
  std::vector<int32_t> two = c.ids;
  two.push_back(133);
  o = run(eng.e, with_clip(two), &sp);
  EXPECT_EQ(o.status, LFM_ERR_INVALID_ARGUMENT);
  EXPECT_NE(o.error.find("2 audio placeholders"), std::string::npos) << o.error;
  // Too long for max_audio_seconds.
  lfm_prompt longp = with_clip(c.ids);
  longp.max_audio_seconds = 0.5;
  o = run(eng.e, longp, &sp);
  EXPECT_EQ(o.status, LFM_ERR_INVALID_ARGUMENT) << o.error;
  // The engine still serves.
  o = run(eng.e, with_clip(c.ids), &sp);
  EXPECT_EQ(o.status, LFM_OK) << o.error;
}

}  // namespace
