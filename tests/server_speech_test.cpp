// POST /v1/audio/speech (server/speech.h): every field of the body checked before any work, each
// refusal a 400 naming its field; and a model that does not speak refused as such over HTTP.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "server/api_types.h"
#include "server/speech.h"
#include "server_test_util.h"
#include "test_util.h"

namespace lfm::server {
namespace {

using ojson = nlohmann::ordered_json;

ojson body(ojson extra = ojson::object()) {
  ojson b = {{"model", "tts"}, {"input", "Hello there."}, {"voice", "us_female"}};
  for (const auto& [k, v] : extra.items()) b[k] = v;
  return b;
}

// The ApiError `b` is refused with (status 0 when it is accepted).
ApiError refusal(const ojson& b, const SpeechOptions& opt = {}) {
  try {
    parse_speech_request(b, opt);
  } catch (const ApiError& e) {
    return e;
  }
  return ApiError(0, "accepted");
}

TEST(SpeechRequestParse, DefaultsAreOpenAisWithTheModelsSampling) {
  const SpeechRequest r = parse_speech_request(body(), {});
  EXPECT_EQ(r.input, "Hello there.");
  EXPECT_STREQ(r.voice->id, "us_female");
  EXPECT_EQ(r.format, audio::AudioFormat::kMp3);  // OpenAI's default
  EXPECT_FALSE(r.sse);
  EXPECT_EQ(r.text.temperature, 0.0f);
  EXPECT_EQ(r.audio.temperature, SpeechOptions{}.audio_temperature);
  EXPECT_EQ(r.audio.top_k, SpeechOptions{}.audio_top_k);
  EXPECT_FALSE(r.text.seed.has_value());
}

TEST(SpeechRequestParse, EveryFieldIsRead) {
  const SpeechRequest r = parse_speech_request(
      body({{"voice", "UK Male"}, {"response_format", "flac"}, {"speed", 1.0}, {"instructions", "Cheerful."},
            {"stream_format", "sse"}, {"temperature", 0.5}, {"top_k", 3}, {"audio_temperature", 0.7},
            {"audio_top_k", 9}, {"seed", 42}}),
      {});
  EXPECT_STREQ(r.voice->id, "uk_male");
  EXPECT_EQ(r.format, audio::AudioFormat::kFlac);
  EXPECT_TRUE(r.sse);
  EXPECT_EQ(r.text.temperature, 0.5f);
  EXPECT_EQ(r.text.top_k, 3);
  EXPECT_EQ(r.audio.temperature, 0.7f);
  EXPECT_EQ(r.audio.top_k, 9);
  EXPECT_EQ(r.text.seed, std::optional<uint64_t>(42));
  for (const char* f : {"wav", "pcm", "opus", "ogg", "vorbis", "wav_float"})
    EXPECT_EQ(parse_speech_request(body({{"response_format", f}}), {}).format, audio::parse_audio_format(f)) << f;
  EXPECT_FALSE(parse_speech_request(body({{"stream_format", "audio"}}), {}).sse);
}

TEST(SpeechRequestParse, BadFieldsAreRefusedByName) {
  struct Case {
    ojson extra;
    std::string param, says;
  };
  const std::vector<Case> cases = {
      {{{"input", ""}}, "input", "empty"},
      {{{"input", 5}}, "input", "must be a string"},
      {{{"voice", "alloy"}}, "voice", "unknown voice 'alloy'"},
      {{{"voice", 3}}, "voice", "us_male, us_female, uk_male, uk_female"},
      {{{"response_format", "aac"}}, "response_format", "aac is not supported"},
      {{{"response_format", "m4a"}}, "response_format", "unknown format 'm4a'"},
      {{{"speed", 1.5}}, "speed", "'speed' must be 1"},
      {{{"speed", "fast"}}, "speed", "'speed' must be 1"},
      {{{"stream_format", "chunks"}}, "stream_format", "\"audio\" or \"sse\""},
      {{{"instructions", 7}}, "instructions", "must be a string"},
      {{{"temperature", 3}}, "temperature", "from 0 to 2"},
      {{{"audio_temperature", -1}}, "audio_temperature", "from 0 to 2"},
      {{{"audio_top_k", 1.5}}, "audio_top_k", "whole number"},
      {{{"seed", "x"}}, "seed", "integer"},
      {{{"volume", 2}}, "volume", "not a field of this endpoint"},
  };
  for (const Case& c : cases) {
    const ApiError e = refusal(body(c.extra));
    EXPECT_EQ(e.status, 400) << c.extra.dump();
    EXPECT_EQ(e.param, c.param) << c.extra.dump();
    EXPECT_NE(std::string(e.what()).find(c.says), std::string::npos) << e.what();
  }
  ojson no_input = body();
  no_input.erase("input");
  EXPECT_EQ(refusal(no_input).param, "input");
  ojson no_voice = body();
  no_voice.erase("voice");
  const ApiError e = refusal(no_voice);
  EXPECT_EQ(e.param, "voice");
  EXPECT_NE(std::string(e.what()).find("us_female"), std::string::npos) << e.what();
  EXPECT_EQ(refusal(ojson::array()).status, 400);
}

// speak_now: read as a boolean where the server knows the model's <|audio_start|>, else refused.
TEST(SpeechRequestParse, SpeakNowNeedsABooleanAndTheAudioStartId) {
  SpeechOptions opt;
  opt.audio_start_id = 128;
  EXPECT_FALSE(parse_speech_request(body(), opt).speak_now);
  EXPECT_TRUE(parse_speech_request(body({{"speak_now", true}}), opt).speak_now);
  EXPECT_FALSE(parse_speech_request(body({{"speak_now", false}}), opt).speak_now);
  const ApiError not_bool = refusal(body({{"speak_now", 1}}), opt);
  EXPECT_EQ(not_bool.status, 400);
  EXPECT_EQ(not_bool.param, "speak_now");
  const ApiError unknown = refusal(body({{"speak_now", true}}));  // audio_start_id -1
  EXPECT_EQ(unknown.param, "speak_now");
  EXPECT_NE(std::string(unknown.what()).find("<|audio_start|>"), std::string::npos) << unknown.what();
  EXPECT_FALSE(parse_speech_request(body({{"speak_now", false}}), {}).speak_now);
}

TEST(SpeechRequestParse, InputLengthIsCountedInCharacters) {
  SpeechOptions opt;
  opt.max_input_chars = 5;
  EXPECT_EQ(refusal(body({{"input", "héllo"}}), opt).status, 0);  // 5 characters, 6 bytes
  const ApiError e = refusal(body({{"input", "héllo!"}}), opt);
  EXPECT_EQ(e.status, 400);
  EXPECT_EQ(e.param, "input");
  EXPECT_NE(std::string(e.what()).find("6 characters, over the limit of 5"), std::string::npos) << e.what();
}

TEST(SpeechRequestParse, Mp3UnavailableSaysSo) {
  if (audio::audio_format_writable(audio::AudioFormat::kMp3)) {
    EXPECT_EQ(refusal(body({{"response_format", "mp3"}})).status, 0);
    return;
  }
  const ApiError e = refusal(body());
  EXPECT_EQ(e.param, "response_format");
  EXPECT_NE(std::string(e.what()).find("mp3 is not available"), std::string::npos) << e.what();
  EXPECT_NE(std::string(e.what()).find("default"), std::string::npos) << e.what();
}

// Over HTTP: a text model does not speak, and its /v1/models lists no voices.
TEST(ServerSpeech, ATextModelDoesNotSpeak) {
  test::TempDir dir("lfm_serve_speech_text");
  test::write_text_model(dir.str());
  test::ServerProc srv(dir.str(), {"--parallel", "1", "--ctx-size", "256"});
  auto c = srv.client();
  auto r = c.Post("/v1/audio/speech", body().dump(), "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  const auto err = nlohmann::json::parse(r->body)["error"];
  EXPECT_NE(err["message"].get<std::string>().find("does not speak"), std::string::npos) << r->body;
  const auto models = nlohmann::json::parse(c.Get("/v1/models")->body);
  EXPECT_FALSE(models["data"][0].contains("voices"));
  // The route is counted under its own label.
  const std::string counted = "route=\"/v1/audio/speech\",status=\"400\"";
  EXPECT_NE(test::wait_metrics_text(c, counted).find(counted), std::string::npos);
}

}  // namespace
}  // namespace lfm::server
