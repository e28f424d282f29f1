// Speech output through the C API (API level 5; tests/data/audio/lfm2audio_tts_tiny, a tiny random
// LFM2-Audio with its depth transformer, and transformers' generate() outputs in reference.json):
// model info, sequential and interleaved generation as LFM_EVENT_AUDIO events whose codes are
// transformers' frames (greedy), an ids prompt holding an earlier spoken turn (audio_frames) giving
// transformers' continuation, and found in the prefix cache the second time; and the refusals (a
// text model for the one that does not speak).
#include <gtest/gtest.h>
#include <lfm/lfm.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "capi_test_util.h"

namespace {

using namespace lfm_capi_test;
using json = nlohmann::json;

const std::string kTts = kData + "/audio/lfm2audio_tts_tiny";

json reference() {
  std::ifstream f(kTts + "/reference.json");
  return json::parse(f);
}

// [codebooks][frames] → [frames][codebooks]
std::vector<std::vector<int32_t>> frames_of(const json& codes) {
  std::vector<std::vector<int32_t>> out;
  const size_t n = codes.empty() ? 0 : codes[0].size();
  for (size_t f = 0; f < n; ++f) {
    std::vector<int32_t> frame;
    for (const auto& cb : codes) frame.push_back(cb[f].get<int32_t>());
    out.push_back(frame);
  }
  return out;
}

struct Spoken {
  lfm_status status = LFM_OK;
  std::string error;
  std::vector<int32_t> tokens;
  std::vector<std::vector<int32_t>> frames;
  std::vector<int> modalities;  // 1 text, 3 audio (transformers' modality ids)
  int ends = 0;                 // frames marked audio_end
  int64_t cached = 0, audio_frames = 0, completion = 0;
  int32_t finish = 0;
};

Spoken speak(lfm_engine* e, const lfm_prompt& p, int64_t max_tokens) {
  Spoken s;
  lfm_sampling_params sp = greedy_params(max_tokens, false);
  lfm_request* r = nullptr;
  s.status = lfm_request_submit(e, &p, &sp, &r);
  if (s.status != LFM_OK) {
    s.error = lfm_last_error();
    return s;
  }
  lfm_event ev;
  ev.struct_size = sizeof(ev);
  while (lfm_request_next(r, &ev, -1) == LFM_OK) {
    if (ev.kind == LFM_EVENT_DONE) {
      s.cached = ev.cached_tokens;
      s.audio_frames = ev.audio_frames;
      s.completion = ev.completion_tokens;
      s.finish = ev.finish_reason;
      s.error = ev.error;
      break;
    }
    if (ev.kind == LFM_EVENT_AUDIO) {
      EXPECT_EQ(ev.token, -1);
      EXPECT_EQ(ev.n_audio, 0u);  // codes only (audio_waveform 0)
      s.frames.emplace_back(ev.audio_codes, ev.audio_codes + ev.n_audio_codes);
      s.ends += ev.audio_end != 0;
      s.modalities.push_back(3);
    } else {
      EXPECT_EQ(ev.kind, LFM_EVENT_TOKEN);
      EXPECT_EQ(ev.n_audio_codes, 0u);
      s.tokens.push_back(ev.token);
      s.modalities.push_back(1);
    }
  }
  lfm_request_free(r);
  return s;
}

TEST(CApiSpeech, ModelInfoSaysWhoSpeaks) {
  Model tts(kTts);
  lfm_model_info info;
  info.struct_size = sizeof(info);
  ASSERT_EQ(lfm_model_get_info(tts.m, &info), LFM_OK);
  EXPECT_EQ(info.can_speak, 1);
  EXPECT_EQ(info.speech_codebooks, 8);
  EXPECT_EQ(info.speech_audio_vocab, 2049);
  EXPECT_EQ(info.speech_sample_rate, 24000);
  EXPECT_EQ(info.speech_waveform, 0);
  Model text(kFixture);
  ASSERT_EQ(lfm_model_get_info(text.m, &info), LFM_OK);
  EXPECT_EQ(info.can_speak, 0);
  EXPECT_EQ(info.speech_codebooks, 0);
  EXPECT_EQ(LFM_API_VERSION, 5);
}

TEST(CApiSpeech, SequentialAndInterleavedGiveTransformersFrames) {
  Model model(kTts);
  Engine eng(model.m, 2);
  const json ref = reference();
  for (const char* name : {"seq_a", "inter_b"}) {
    const json& g = ref["generate"][name];
    const auto ids = g["prompt_ids"].get<std::vector<int32_t>>();
    lfm_prompt p = ids_prompt(ids);
    p.audio_out = g["generation_mode"] == "sequential" ? LFM_AUDIO_OUT_SEQUENTIAL : LFM_AUDIO_OUT_INTERLEAVED;
    const Spoken s = speak(eng.e, p, g["max_new_tokens"].get<int64_t>());
    ASSERT_EQ(s.status, LFM_OK) << name << ": " << s.error;
    EXPECT_EQ(s.tokens, g["sequences"].get<std::vector<int32_t>>()) << name;
    EXPECT_EQ(s.frames, frames_of(g["audio_codes"])) << name;
    EXPECT_EQ(s.modalities, g["modalities"].get<std::vector<int>>()) << name;
    EXPECT_EQ(s.ends, static_cast<int>(g["end_of_audio_frames"].size())) << name;
    EXPECT_EQ(s.audio_frames, static_cast<int64_t>(s.frames.size())) << name;
  }
}

TEST(CApiSpeech, EarlierSpokenTurnInTheIdsPrompt) {
  Model model(kTts);
  Engine eng(model.m, 1);
  const json c = reference()["spoken_c"];
  const auto ids = c["prompt_ids"].get<std::vector<int32_t>>();
  std::vector<int32_t> codes;
  for (const auto& f : frames_of(c["prompt_audio_codes"])) codes.insert(codes.end(), f.begin(), f.end());
  const int64_t position = c["first_audio_position"], count = c["audio_frames_in_prompt"];
  const int32_t* runs[] = {codes.data()};
  lfm_prompt p = ids_prompt(ids);
  p.audio_out = LFM_AUDIO_OUT_SEQUENTIAL;
  p.n_audio_frames = 1;
  p.audio_frames_position = &position;
  p.audio_frames_count = &count;
  p.audio_frames_codes = runs;
  const json& want = c["continuation"];
  for (int round = 0; round < 2; ++round) {
    const Spoken s = speak(eng.e, p, want["max_new_tokens"].get<int64_t>());
    ASSERT_EQ(s.status, LFM_OK) << s.error;
    EXPECT_EQ(s.tokens, want["sequences"].get<std::vector<int32_t>>()) << round;
    EXPECT_EQ(s.frames, frames_of(want["audio_codes"])) << round;
    if (round == 1) {
      EXPECT_GT(s.cached, position + count) << "the spoken turn comes from the prefix cache";
    }
  }
}

TEST(CApiSpeech, Refusals) {
  Model tts(kTts);
  Engine eng(tts.m, 1);
  const std::vector<int32_t> ids = {1, 6, 200, 201, 10};
  lfm_prompt p = ids_prompt(ids);
  p.audio_out = 7;
  Spoken s = speak(eng.e, p, 4);
  EXPECT_EQ(s.status, LFM_ERR_INVALID_ARGUMENT);
  EXPECT_NE(s.error.find("unknown audio_out 7"), std::string::npos) << s.error;
  p.audio_out = LFM_AUDIO_OUT_INTERLEAVED;
  p.audio_temperature = -1;
  s = speak(eng.e, p, 4);
  EXPECT_EQ(s.status, LFM_ERR_INVALID_ARGUMENT) << s.error;
  p.audio_temperature = 0;
  std::vector<int32_t> codes(8, 5);
  codes[3] = 4000;  // outside the audio vocabulary
  const int32_t* runs[] = {codes.data()};
  const int64_t at = 2, one = 1, too_many = 9;
  p.n_audio_frames = 1;
  p.audio_frames_position = &at;
  p.audio_frames_count = &one;
  p.audio_frames_codes = runs;
  s = speak(eng.e, p, 4);
  EXPECT_EQ(s.status, LFM_ERR_INVALID_ARGUMENT);
  EXPECT_NE(s.error.find("audio frames 0"), std::string::npos) << s.error;
  codes[3] = 5;
  p.audio_frames_count = &too_many;
  s = speak(eng.e, p, 4);
  EXPECT_EQ(s.status, LFM_ERR_INVALID_ARGUMENT);
  EXPECT_NE(s.error.find("do not fit"), std::string::npos) << s.error;
  p.audio_frames_count = &one;
  s = speak(eng.e, p, 4);
  EXPECT_EQ(s.status, LFM_OK) << s.error;  // a valid frame goes in
  // speak_text needs a tokenizer (this checkpoint has none) and is the only prompt.
  lfm_prompt t;
  lfm_prompt_init(&t);
  t.speak_text = "Hello.";
  s = speak(eng.e, t, 4);
  EXPECT_NE(s.status, LFM_OK);
  t.text = "Hello.";
  s = speak(eng.e, t, 4);
  EXPECT_EQ(s.status, LFM_ERR_INVALID_ARGUMENT);
  EXPECT_NE(s.error.find("exactly one"), std::string::npos) << s.error;
  // A model that does not speak.
  Model text(kFixture);
  Engine leng(text.m, 1);
  const std::vector<int32_t> few = {1, 2, 3};
  lfm_prompt q = ids_prompt(few);
  q.audio_out = LFM_AUDIO_OUT_SEQUENTIAL;
  s = speak(leng.e, q, 4);
  EXPECT_EQ(s.status, LFM_ERR_UNSUPPORTED);
  EXPECT_NE(s.error.find("speech output"), std::string::npos) << s.error;
}

}  // namespace
