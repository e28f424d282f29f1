// Speech output end to end on a model that speaks (speech_test_util.h: the tiny speech-output
// checkpoint with a scripted backbone that starts speaking at once): `lfm speak` and `lfm serve`'s
// /v1/audio/speech write audio that the project's decoder reads back, in every format, whole or as
// server-sent events (the same bytes), the same waveform from the CLI and the server for the same
// seed, the limits, and the official openai npm client.
#include <gtest/gtest.h>

#include <thread>

#include <chrono>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <cstring>
#include <string>

#include "audio/audio_decode.h"
#include "audio/audio_encode.h"
#include "core/base64.h"
#include "server_test_util.h"
#include "speech_test_util.h"
#include "test_util.h"

namespace lfm {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using test::ServerProc;

audio::DecodedAudio decode(const std::string& bytes) {
  return audio::decode_audio(std::span(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()), 24000);
}

class SpeechE2E : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new test::TempDir("lfm_speech_e2e");
    model_ = (*dir_ / "speaker").string();
    test::write_speaking_model(model_);
    server_ = new ServerProc(model_, {"--parallel", "2", "--ctx-size", "512", "--max-speech-seconds", "1",
                                      "--max-speech-chars", "40"});
  }
  static void TearDownTestSuite() {
    delete server_;
    delete dir_;
  }
  static httplib::Result speak(const json& extra) {
    json b = {{"model", ""}, {"input", "Hello there."}, {"voice", "uk_male"}, {"seed", 5}};
    for (const auto& [k, v] : extra.items()) b[k] = v;
    auto c = server_->client();
    return c.Post("/v1/audio/speech", b.dump(), "application/json");
  }
  static test::TempDir* dir_;
  static std::string model_;
  static ServerProc* server_;
};
test::TempDir* SpeechE2E::dir_ = nullptr;
std::string SpeechE2E::model_;
ServerProc* SpeechE2E::server_ = nullptr;

TEST_F(SpeechE2E, EveryFormatDecodesToTheSameSpeech) {
  auto r = speak({{"response_format", "wav"}});
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(r->get_header_value("Content-Type"), "audio/wav");
  EXPECT_EQ(r->body.substr(0, 4), "RIFF");
  EXPECT_EQ(r->body.substr(4, 4), std::string(4, '\xff'));  // streamed: unknown length
  const audio::DecodedAudio wav = decode(r->body);
  // Cut at --max-speech-seconds 1: whole frames of 1920 samples, at least 1 s.
  EXPECT_GE(wav.samples.size(), 24000u);
  EXPECT_LE(wav.samples.size(), 24000u + 2 * 1920u);
  float peak = 0;
  for (float v : wav.samples) peak = std::max(peak, std::abs(v));
  EXPECT_GT(peak, 0.0f);  // not silence

  r = speak({{"response_format", "flac"}});
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(r->get_header_value("Content-Type"), "audio/flac");
  EXPECT_EQ(decode(r->body).samples, wav.samples);  // same seed, same speech, both 16-bit
  r = speak({{"response_format", "pcm"}});
  ASSERT_EQ(r->status, 200);
  ASSERT_EQ(r->body.size(), 2 * wav.samples.size());
  std::vector<int16_t> pcm(wav.samples.size());
  std::memcpy(pcm.data(), r->body.data(), r->body.size());
  EXPECT_EQ(audio::decode_pcm_s16(pcm, 1, 24000, 24000).samples, wav.samples);
  for (const char* f : {"opus", "mp3", "ogg"}) {
    if (std::string(f) == "mp3" && !audio::audio_format_writable(audio::AudioFormat::kMp3)) continue;
    r = speak({{"response_format", f}});
    ASSERT_EQ(r->status, 200) << f << ": " << r->body;
    EXPECT_EQ(r->get_header_value("Content-Type"), audio::audio_content_type(audio::parse_audio_format(f)));
    EXPECT_GE(decode(r->body).samples.size(), wav.samples.size()) << f;
  }
  // No response_format: OpenAI's default, mp3 (where this libsndfile writes it).
  r = speak({});
  if (audio::audio_format_writable(audio::AudioFormat::kMp3)) {
    EXPECT_EQ(r->status, 200);
    EXPECT_EQ(r->get_header_value("Content-Type"), "audio/mpeg");
  } else {
    EXPECT_EQ(r->status, 400);
  }
}

TEST_F(SpeechE2E, ServerSentEventsCarryTheSameBytes) {
  auto whole = speak({{"response_format", "wav"}});
  ASSERT_EQ(whole->status, 200) << whole->body;
  auto r = speak({{"response_format", "wav"}, {"stream_format", "sse"}});
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(r->get_header_value("Content-Type"), "text/event-stream");
  std::string bytes;
  json done;
  int deltas = 0;
  for (const std::string& data : test::sse_events(r->body)) {
    const json ev = json::parse(data);
    if (ev["type"] == "speech.audio.delta") {
      const auto b = decode_base64(ev["audio"].get<std::string>());
      ASSERT_TRUE(b.has_value());
      bytes.append(b->begin(), b->end());
      ++deltas;
    }
    if (ev["type"] == "speech.audio.done") done = ev;
  }
  EXPECT_GT(deltas, 1);
  EXPECT_EQ(bytes, whole->body);
  ASSERT_TRUE(done.is_object()) << r->body;
  EXPECT_GT(done["usage"]["input_tokens"].get<int64_t>(), 10);
  EXPECT_GT(done["usage"]["output_tokens"].get<int64_t>(), 0);
  EXPECT_EQ(done["usage"]["total_tokens"].get<int64_t>(),
            done["usage"]["input_tokens"].get<int64_t>() + done["usage"]["output_tokens"].get<int64_t>());
}

// "speak_now" is the server's --speak-now: the turn opens with <|audio_start|>; the same samples as
// the CLI's for the same seed.
TEST_F(SpeechE2E, SpeakNowIsTheClisSpeakNow) {
  const std::string out = (*dir_ / "cli_now.wav").string();
  const auto r = test::run_command(std::string(LFM_BINARY) + " speak -m '" + model_ + "' --voice uk_male --seed 5 " +
                                   "--ctx-size 512 --max-audio-seconds 1 --speak-now -o '" + out + "' Hello there. 2>&1");
  ASSERT_EQ(r.code, 0) << r.out;
  const auto server = speak({{"response_format", "wav"}, {"speak_now", true}});
  ASSERT_EQ(server->status, 200) << server->body;
  const auto now = decode(server->body).samples;
  EXPECT_FALSE(now.empty());
  EXPECT_EQ(decode(test::read_file(out)).samples, now);
  const auto bad = speak({{"speak_now", "yes"}});
  ASSERT_EQ(bad->status, 400);
  EXPECT_NE(bad->body.find("speak_now"), std::string::npos) << bad->body;
}

TEST_F(SpeechE2E, TheCliSpeaksTheSameAsTheServer) {
  const std::string out = (*dir_ / "cli.wav").string();
  const auto r = test::run_command(std::string(LFM_BINARY) + " speak -m '" + model_ + "' --voice 'UK male' --seed 5 " +
                                   "--ctx-size 512 --max-audio-seconds 1 -o '" + out + "' Hello there. 2>&1");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("audio seconds per second"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("24000 Hz"), std::string::npos) << r.out;
  const auto server = speak({{"response_format", "wav"}});
  ASSERT_EQ(server->status, 200);
  EXPECT_EQ(decode(test::read_file(out)).samples, decode(server->body).samples);
  // To stdout as raw pcm: the same samples.
  const auto p = test::run_command(std::string(LFM_BINARY) + " speak -m '" + model_ + "' --voice uk_male --seed 5 " +
                                   "--ctx-size 512 --max-audio-seconds 1 --format pcm -o - Hello there. 2>/dev/null");
  ASSERT_EQ(p.code, 0);
  std::vector<int16_t> pcm(p.out.size() / 2);
  std::memcpy(pcm.data(), p.out.data(), pcm.size() * 2);
  EXPECT_EQ(audio::decode_pcm_s16(pcm, 1, 24000, 24000).samples, decode(test::read_file(out)).samples);
}

TEST_F(SpeechE2E, LimitsAndBadFieldsAre400sAndTheServerGoesOn) {
  auto r = speak({{"input", std::string(41, 'a')}});
  EXPECT_EQ(r->status, 400);
  EXPECT_EQ(json::parse(r->body)["error"]["param"], "input");
  EXPECT_NE(r->body.find("41 characters, over the limit of 40"), std::string::npos) << r->body;
  r = speak({{"voice", "alloy"}});
  EXPECT_EQ(r->status, 400);
  EXPECT_EQ(json::parse(r->body)["error"]["param"], "voice");
  r = speak({{"speed", 1.25}});
  EXPECT_EQ(r->status, 400);
  r = speak({{"response_format", "aac"}});
  EXPECT_EQ(r->status, 400);
  r = speak({{"model", "tts-1"}});
  EXPECT_EQ(r->status, 404);
  auto c = server_->client();
  const json models = json::parse(c.Get("/v1/models")->body);
  EXPECT_EQ(models["data"][0]["voices"], json({"us_male", "us_female", "uk_male", "uk_female"}));
  r = speak({{"response_format", "wav"}, {"instructions", "Whisper."}});
  EXPECT_EQ(r->status, 200);  // instructions are accepted and ignored
  const std::string metrics = test::wait_metrics_text(c, "route=\"/v1/audio/speech\",status=\"200\"");
  EXPECT_NE(metrics.find("lfm:speech_audio_seconds_total"), std::string::npos);
  EXPECT_NE(metrics.find("route=\"/v1/audio/speech\",status=\"200\""), std::string::npos);
}

// The official `openai` npm client (tools/server-tests, installed by scripts/setup.sh).
TEST_F(SpeechE2E, OfficialOpenAiClient) {
  const std::string dir = std::string(LFM_SOURCE_DIR) + "/tools/server-tests";
  ASSERT_TRUE(fs::exists(dir + "/node_modules/openai"))
      << "tools/server-tests/node_modules is missing: run scripts/setup.sh (npm ci --prefix tools/server-tests)";
  test::TempDir out("lfm_speech_openai");
  const auto r = test::run_command("node '" + dir + "/openai_speech.mjs' http://127.0.0.1:" +
                                   std::to_string(server_->port()) + "/v1 '" + out.str() + "' 2>&1");
  ASSERT_EQ(r.code, 0) << r.out;
  const json j = json::parse(r.out);
  EXPECT_EQ(j["voices"], json({"us_male", "us_female", "uk_male", "uk_female"}));
  EXPECT_EQ(j["wav"]["type"], "audio/wav");
  EXPECT_EQ(j["flac"]["type"], "audio/flac");
  const auto wav = decode(test::read_file((out / "speech.wav").string()));
  EXPECT_GE(wav.samples.size(), 24000u);
  EXPECT_EQ(decode(test::read_file((out / "speech.flac").string())).samples, wav.samples);
  EXPECT_EQ(decode(test::read_file((out / "speech_sse.wav").string())).samples, wav.samples);
  EXPECT_GT(j["sse"]["deltas"].get<int>(), 1);
  EXPECT_TRUE(j["sse"]["done"]["usage"].is_object());
  EXPECT_EQ(j["bad"]["status"], 400) << r.out;
  EXPECT_EQ(j["bad"]["param"], "voice") << r.out;
}

}  // namespace
}  // namespace lfm
