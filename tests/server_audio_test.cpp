// `lfm serve` with audio (LFM2-Audio) over loopback HTTP, on the tiny transformers-made checkpoint
// of tests/data/audio with the synthetic tokenizer (test::write_audio_model): /v1/audio/transcriptions
// and /v1/audio/translations multipart uploads in every response format, whole and streamed, chat
// input_audio parts, the same transcript as `lfm transcribe`, the official openai client, and every
// bad upload a 400 naming its field while the server goes on serving.
#include <gtest/gtest.h>
#include <openssl/evp.h>

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "server_test_util.h"
#include "test_util.h"

namespace lfm {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using test::ServerProc;

// A 16-bit PCM WAV of `seconds` of a rising tone at `rate` Hz with `channels` channels.
std::string wav_bytes(double seconds, int rate, int channels) {
  const uint32_t frames = static_cast<uint32_t>(seconds * rate);
  std::string pcm;
  for (uint32_t i = 0; i < frames; ++i) {
    const double t = static_cast<double>(i) / rate;
    for (int c = 0; c < channels; ++c) {
      const auto v = static_cast<int16_t>(std::lround(8000.0 * std::sin(2 * M_PI * (220.0 + 300.0 * t + 40.0 * c) * t)));
      pcm += static_cast<char>(v & 0xff);
      pcm += static_cast<char>((v >> 8) & 0xff);
    }
  }
  auto le32 = [](uint32_t v) { return std::string{char(v), char(v >> 8), char(v >> 16), char(v >> 24)}; };
  auto le16 = [](uint16_t v) { return std::string{char(v), char(v >> 8)}; };
  return "RIFF" + le32(36 + static_cast<uint32_t>(pcm.size())) + "WAVE" + "fmt " + le32(16) + le16(1) +
         le16(static_cast<uint16_t>(channels)) + le32(static_cast<uint32_t>(rate)) +
         le32(static_cast<uint32_t>(rate * channels * 2)) + le16(static_cast<uint16_t>(channels * 2)) + le16(16) +
         "data" + le32(static_cast<uint32_t>(pcm.size())) + pcm;
}

std::string b64(const std::string& bytes) {
  std::string out(4 * ((bytes.size() + 2) / 3) + 1, '\0');
  const int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(bytes.data()), static_cast<int>(bytes.size()));
  out.resize(static_cast<size_t>(n));
  return out;
}

class ServerAudioTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new test::TempDir("lfm_serve_audio");
    model_ = (*dir_ / "audio").string();
    test::write_audio_model(model_);
    wav_ = dir_->write("tone.wav", wav_bytes(1.3, 44100, 2));
    text_model_ = (*dir_ / "text").string();
    test::write_text_model(text_model_);
    audio_ = new ServerProc(model_, {"--parallel", "2", "--ctx-size", "512", "--max-audio-seconds", "4",
                                      "--max-audio-bytes", "600000", "--max-audio-clips", "2"});
    text_ = new ServerProc(text_model_, {"--parallel", "1", "--ctx-size", "256"});
  }
  static void TearDownTestSuite() {
    delete audio_;
    delete text_;
    delete dir_;
  }
  // POST a multipart upload; the response (status, body, content type).
  static httplib::Result upload(const ServerProc& s, const std::string& path, const std::string& file_bytes,
                                httplib::MultipartFormDataItems fields) {
    fields.push_back({"file", file_bytes, "clip.wav", "audio/wav"});
    auto c = s.client();
    return c.Post(path.c_str(), fields);
  }
  static json error_of(const httplib::Result& r) { return json::parse(r->body)["error"]; }

  static test::TempDir* dir_;
  static std::string model_, text_model_, wav_;
  static ServerProc *audio_, *text_;
};
test::TempDir* ServerAudioTest::dir_ = nullptr;
std::string ServerAudioTest::model_, ServerAudioTest::text_model_, ServerAudioTest::wav_;
ServerProc *ServerAudioTest::audio_ = nullptr, *ServerAudioTest::text_ = nullptr;

TEST_F(ServerAudioTest, TranscriptionsInEveryFormatAgreeWithTheCli) {
  const std::string wav = test::read_file(wav_);
  auto r = upload(*audio_, "/v1/audio/transcriptions", wav, {{"model", "", "", ""}});
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const json j = json::parse(r->body);
  ASSERT_TRUE(j["text"].is_string()) << r->body;
  const std::string text = j["text"];
  EXPECT_GT(j["usage"]["input_tokens"].get<int>(), 0);
  EXPECT_GT(j["usage"]["output_tokens"].get<int>(), 0);
  // The CLI asks the same way and gets the same transcript.
  const auto cli = test::run_command(std::string(LFM_BINARY) + " transcribe -m '" + model_ + "' '" + wav_ + "' --ctx-size 512 --json 2>&1");
  ASSERT_EQ(cli.code, 0) << cli.out;
  const json cj = json::parse(cli.out);
  EXPECT_EQ(cj["text"], text);
  EXPECT_NEAR(cj["duration"].get<double>(), 1.3, 1e-3);
  EXPECT_EQ(cj["audio_tokens"], (static_cast<int>(1.3 * 16000) / 160 + 1 + 7) / 8);

  r = upload(*audio_, "/v1/audio/transcriptions", wav, {{"response_format", "text", "", ""}});
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(r->body, text + "\n");
  EXPECT_EQ(r->get_header_value("Content-Type").rfind("text/plain", 0), 0u);

  r = upload(*audio_, "/v1/audio/transcriptions", wav, {{"response_format", "verbose_json", "", ""}, {"language", "en", "", ""}});
  ASSERT_EQ(r->status, 200) << r->body;
  const json v = json::parse(r->body);
  EXPECT_EQ(v["task"], "transcribe");
  EXPECT_EQ(v["language"], "en");
  EXPECT_NEAR(v["duration"].get<double>(), 1.3, 1e-3);
  EXPECT_EQ(v["text"], text);
  ASSERT_EQ(v["segments"].size(), 1u);
  EXPECT_EQ(v["segments"][0]["text"], text);
  EXPECT_EQ(v["segments"][0]["start"], 0.0);
  EXPECT_NEAR(v["segments"][0]["end"].get<double>(), 1.3, 1e-3);
  EXPECT_LE(v["segments"][0]["avg_logprob"].get<double>(), 0.0);

  r = upload(*audio_, "/v1/audio/transcriptions", wav, {{"response_format", "srt", "", ""}});
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(r->body, "1\n00:00:00,000 --> 00:00:01,300\n" + text + "\n\n");
  r = upload(*audio_, "/v1/audio/transcriptions", wav, {{"response_format", "vtt", "", ""}});
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(r->body, "WEBVTT\n\n00:00:00.000 --> 00:00:01.300\n" + text + "\n\n");

  // Streamed: the deltas make the transcript; the done event carries it whole.
  r = upload(*audio_, "/v1/audio/transcriptions", wav, {{"stream", "true", "", ""}});
  ASSERT_EQ(r->status, 200) << r->body;
  std::string deltas;
  json done;
  for (const std::string& e : test::sse_events(r->body)) {
    if (e == "[DONE]") continue;
    const json ev = json::parse(e);
    if (ev["type"] == "transcript.text.delta") deltas += ev["delta"].get<std::string>();
    if (ev["type"] == "transcript.text.done") done = ev;
  }
  EXPECT_EQ(done["text"], text);
  EXPECT_EQ(deltas.substr(0, text.size()), text);
}

TEST_F(ServerAudioTest, ChatTakesInputAudioParts) {
  auto c = audio_->client();
  const json part = {{"type", "input_audio"}, {"input_audio", {{"data", b64(test::read_file(wav_))}, {"format", "wav"}}}};
  int st = 0;
  const json body = {{"messages", json::array({{{"role", "system"}, {"content", "Perform ASR."}},
                                               {{"role", "user"}, {"content", json::array({part})}}})},
                     {"temperature", 0}};
  const json chat = test::post(c, "/v1/chat/completions", body, &st);
  ASSERT_EQ(st, 200) << chat.dump();
  // The same turn as a transcription: the same text.
  auto r = upload(*audio_, "/v1/audio/transcriptions", test::read_file(wav_), {});
  ASSERT_EQ(r->status, 200) << r->body;
  std::string content = chat["choices"][0]["message"]["content"];
  while (!content.empty() && (content.back() == '\n' || content.back() == ' ')) content.pop_back();
  EXPECT_EQ(content, json::parse(r->body)["text"]);
  // Three clips past --max-audio-clips 2; bad base64; audio in a system message.
  json three = body;
  three["messages"][1]["content"] = json::array({part, part, part});
  test::post(c, "/v1/chat/completions", three, &st);
  EXPECT_EQ(st, 400);
  json bad = body;
  bad["messages"][1]["content"][0]["input_audio"]["data"] = "%%%";
  const json e = test::post(c, "/v1/chat/completions", bad, &st);
  EXPECT_EQ(st, 400);
  EXPECT_EQ(e["error"]["param"], "messages[1].content[0].input_audio.data") << e.dump();
  json sys = body;
  sys["messages"][0]["content"] = json::array({part});
  test::post(c, "/v1/chat/completions", sys, &st);
  EXPECT_EQ(st, 400);
}

TEST_F(ServerAudioTest, EveryBadUploadIs400NamingItsField) {
  const std::string wav = test::read_file(wav_);
  struct Case {
    std::string what;
    std::string file;
    httplib::MultipartFormDataItems fields;
    std::string param;
  };
  const std::vector<Case> cases = {
      {"not audio", "this is not audio", {}, "file"},
      {"truncated", wav.substr(0, 60), {}, "file"},
      {"too long", wav_bytes(5.0, 8000, 1), {}, "file"},
      {"too big", std::string(700000, 'x'), {}, "file"},
      {"bad format", wav, {{"response_format", "mp4", "", ""}}, "response_format"},
      {"bad temperature", wav, {{"temperature", "hot", "", ""}}, "temperature"},
      {"bad stream", wav, {{"stream", "yes", "", ""}}, "stream"},
      {"stream as srt", wav, {{"stream", "true", "", ""}, {"response_format", "srt", "", ""}}, "stream"},
      {"bad language", wav, {{"language", "English!", "", ""}}, "language"},
      {"unknown field", wav, {{"speed", "2", "", ""}}, "speed"},
  };
  for (const Case& c : cases) {
    auto r = upload(*audio_, "/v1/audio/transcriptions", c.file, c.fields);
    ASSERT_TRUE(r) << c.what;
    EXPECT_EQ(r->status, 400) << c.what << ": " << r->body;
    EXPECT_EQ(error_of(r)["param"], c.param) << c.what << ": " << r->body;
  }
  // No file at all; not multipart; a model this server does not serve.
  auto cl = audio_->client();
  auto r = cl.Post("/v1/audio/transcriptions", httplib::MultipartFormDataItems{{"model", "x", "", ""}});
  EXPECT_EQ(r->status, 400);
  EXPECT_EQ(error_of(r)["param"], "file");
  r = cl.Post("/v1/audio/transcriptions", "{}", "application/json");
  EXPECT_EQ(r->status, 400);
  r = upload(*audio_, "/v1/audio/transcriptions", wav, {{"model", "whisper-1", "", ""}});
  EXPECT_EQ(r->status, 404);
  // A text model takes no audio.
  r = upload(*text_, "/v1/audio/transcriptions", wav, {});
  EXPECT_EQ(r->status, 400);
  EXPECT_NE(r->body.find("speech encoder"), std::string::npos) << r->body;
  // The server goes on serving.
  r = upload(*audio_, "/v1/audio/translations", wav, {});
  EXPECT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(cl.Get("/health")->status, 200);
}

// The official `openai` npm client (tools/server-tests, installed by scripts/setup.sh).
TEST_F(ServerAudioTest, OfficialOpenAiClient) {
  const std::string dir = std::string(LFM_SOURCE_DIR) + "/tools/server-tests";
  ASSERT_TRUE(fs::exists(dir + "/node_modules/openai"))
      << "tools/server-tests/node_modules is missing: run scripts/setup.sh (npm ci --prefix tools/server-tests)";
  const auto r = test::run_command("node '" + dir + "/openai_audio.mjs' http://127.0.0.1:" + std::to_string(audio_->port()) +
                                   "/v1 '" + wav_ + "' 2>&1");
  ASSERT_EQ(r.code, 0) << r.out;
  const json j = json::parse(r.out);
  const std::string text = j["json"]["text"];
  EXPECT_EQ(j["text"], text + "\n");
  EXPECT_EQ(j["verbose"]["text"], text);
  EXPECT_EQ(j["verbose"]["language"], "en");
  EXPECT_EQ(j["srt"], "1\n00:00:00,000 --> 00:00:01,300\n" + text + "\n\n");
  EXPECT_EQ(j["stream"]["done"]["text"], text);
  EXPECT_TRUE(j["translation"]["text"].is_string());
  EXPECT_TRUE(j["chat"]["content"].is_string());
  EXPECT_EQ(j["bad"]["status"], 400) << r.out;
  EXPECT_EQ(j["bad"]["param"], "file") << r.out;
}

}  // namespace
}  // namespace lfm
