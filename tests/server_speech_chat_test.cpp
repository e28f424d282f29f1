// `lfm serve`'s spoken chat (chat completions with modalities ["text", "audio"], server/chat_speech.h)
// over loopback HTTP, on the tiny LFM2-Audio checkpoint with speech output
// (tests/data/audio/lfm2audio_tts_tiny with the synthetic tokenizer: test::write_speech_model):
// the reply's audio object whole and streamed (the same reply for the same seed), a second turn
// that refers to the first's audio id (its frames put back: the prefix cache reuses the spoken
// turn), the official openai client, and every refusal a 400 naming its field. The checkpoint's
// detokenizer (tests/data/audio/detokenizer_tiny) makes the waveform: 1920 samples per frame, the
// whole reply's WAV the same samples as the streamed pcm16 chunks.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/base64.h"
#include "model_test_util.h"
#include "server_test_util.h"
#include "speech_test_util.h"
#include "test_util.h"

namespace lfm {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using test::ServerProc;

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

class ServerSpeechChatTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new test::TempDir("lfm_serve_speech_chat");
    model_ = (*dir_ / "speech").string();
    test::write_speech_model(model_);
    text_model_ = (*dir_ / "text").string();
    test::write_text_model(text_model_);
    speech_ = new ServerProc(model_, {"--parallel", "2", "--ctx-size", "512", "--kv-block-size", "8"});
    text_ = new ServerProc(text_model_, {"--parallel", "1", "--ctx-size", "256"});
  }
  static void TearDownTestSuite() {
    delete speech_;
    delete text_;
    delete dir_;
  }
  static json user(const std::string& text) { return {{"role", "user"}, {"content", text}}; }
  static json spoken_body(json messages, bool stream = false) {
    return {{"messages", std::move(messages)},
            {"modalities", {"text", "audio"}},
            {"audio", {{"voice", "uk_male"}, {"format", "wav"}}},
            {"max_tokens", 40},
            {"temperature", 0},
            {"seed", 11},
            {"stream", stream}};
  }
  static httplib::Result post(const ServerProc& s, const json& body) {
    auto c = s.client();
    return c.Post("/v1/chat/completions", body.dump(), "application/json");
  }
  static json error_of(const httplib::Result& r) { return json::parse(r->body)["error"]; }
  // The SSE chunks of a streamed response (without [DONE]).
  static std::vector<json> chunks(const std::string& body) {
    std::vector<json> out;
    size_t at = 0;
    while ((at = body.find("data: ", at)) != std::string::npos) {
      const size_t end = body.find("\n\n", at);
      const std::string data = body.substr(at + 6, end - at - 6);
      at = end;
      if (data != "[DONE]") out.push_back(json::parse(data));
    }
    return out;
  }

  static test::TempDir* dir_;
  static std::string model_, text_model_;
  static ServerProc *speech_, *text_;
};
test::TempDir* ServerSpeechChatTest::dir_ = nullptr;
std::string ServerSpeechChatTest::model_, ServerSpeechChatTest::text_model_;
ServerProc *ServerSpeechChatTest::speech_ = nullptr, *ServerSpeechChatTest::text_ = nullptr;

TEST_F(ServerSpeechChatTest, SpokenReplyWholeAndStreamedAgree) {
  const int64_t before = unix_now();
  auto r = post(*speech_, spoken_body(json::array({user("Say something.")})));
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const json j = json::parse(r->body);
  const json& msg = j["choices"][0]["message"];
  EXPECT_TRUE(msg["content"].is_null()) << r->body;
  const json& audio = msg["audio"];
  ASSERT_TRUE(audio.is_object()) << r->body;
  const std::string id = audio["id"];
  EXPECT_EQ(id.rfind("audio_", 0), 0u) << id;
  EXPECT_GE(audio["expires_at"].get<int64_t>(), before + 3600);
  EXPECT_TRUE(audio["transcript"].is_string());
  // Interleaved: 6 text tokens, then 12 frames, … every step one of the 40.
  const int64_t frames = j["usage"]["completion_tokens_details"]["audio_tokens"];
  EXPECT_GT(frames, 0) << r->body;
  EXPECT_LE(frames, j["usage"]["completion_tokens"].get<int64_t>());
  // The WAV: 16-bit mono at 24 kHz, 1920 samples per frame (the end-of-audio frame, if any, has none).
  const auto wav = decode_base64(audio["data"].get<std::string>());
  ASSERT_TRUE(wav && wav->size() > 44) << r->body;
  const std::string w(wav->begin(), wav->end());
  EXPECT_EQ(w.substr(0, 4), "RIFF");
  EXPECT_EQ(w.substr(8, 4), "WAVE");
  uint32_t rate = 0;
  std::memcpy(&rate, w.data() + 24, 4);
  EXPECT_EQ(rate, 24000u);
  const std::string pcm = w.substr(44);
  const int64_t samples = static_cast<int64_t>(pcm.size() / 2);
  EXPECT_EQ(samples % 1920, 0);
  EXPECT_LE(samples, 1920 * frames);
  EXPECT_GE(samples, 1920 * (frames - 1));

  r = post(*speech_, spoken_body(json::array({user("Say something.")}), true));
  ASSERT_EQ(r->status, 200) << r->body;
  std::string transcript, stream_id, streamed_pcm;
  int64_t expires_at = 0;
  std::string finish;
  const auto cs = chunks(r->body);
  ASSERT_FALSE(cs.empty());
  EXPECT_TRUE(cs[0]["choices"][0]["delta"]["content"].is_null()) << cs[0];
  for (const json& c : cs) {
    const json& d = c["choices"][0]["delta"];
    EXPECT_FALSE(d.contains("content") && d["content"].is_string() && !d["content"].get<std::string>().empty()) << c;
    if (d.contains("audio")) {
      const std::string cid = d["audio"]["id"];
      if (stream_id.empty()) stream_id = cid;
      EXPECT_EQ(cid, stream_id);
      if (d["audio"].contains("transcript")) transcript += d["audio"]["transcript"].get<std::string>();
      if (d["audio"].contains("data")) {
        const auto bytes = decode_base64(d["audio"]["data"].get<std::string>());
        ASSERT_TRUE(bytes);
        streamed_pcm.append(bytes->begin(), bytes->end());
      }
      if (d["audio"].contains("expires_at")) expires_at = d["audio"]["expires_at"];
    }
    if (!c["choices"][0]["finish_reason"].is_null()) finish = c["choices"][0]["finish_reason"];
  }
  EXPECT_EQ(transcript, audio["transcript"]);  // same seed, same reply
  EXPECT_TRUE(streamed_pcm == pcm) << streamed_pcm.size() << " streamed bytes, " << pcm.size() << " in the WAV";
  EXPECT_NE(stream_id, id);
  EXPECT_GE(expires_at, before + 3600);
  EXPECT_EQ(finish, j["choices"][0]["finish_reason"]);
}

TEST_F(ServerSpeechChatTest, SecondTurnReusesTheSpokenTurn) {
  auto r = post(*speech_, spoken_body(json::array({user("Tell me a story.")})));
  ASSERT_EQ(r->status, 200) << r->body;
  const json first = json::parse(r->body);
  const std::string id = first["choices"][0]["message"]["audio"]["id"];
  const int64_t prompt1 = first["usage"]["prompt_tokens"];
  const int64_t generated = first["usage"]["completion_tokens"];
  // OpenAI's multi-turn shape: the assistant turn is its audio id only.
  json messages = json::array({user("Tell me a story."), {{"role", "assistant"}, {"audio", {{"id", id}}}},
                               user("And then?")});
  // The first request's prompt had the spoken-chat system message: so must this one (added the
  // same way), and the whole first turn (prompt and reply) is found in the prefix cache.
  r = post(*speech_, spoken_body(messages));
  ASSERT_EQ(r->status, 200) << r->body;
  const json second = json::parse(r->body);
  const int64_t cached = second["usage"]["prompt_tokens_details"]["cached_tokens"];
  EXPECT_GT(second["usage"]["prompt_tokens"].get<int64_t>(), prompt1 + generated - 1);
  EXPECT_GT(cached, prompt1) << r->body;  // past the first prompt: the spoken reply's positions too
  EXPECT_GE(cached, prompt1 + generated - 8) << r->body;  // to within a KV block (--kv-block-size 8)
  // A text-only reply may refer to it too (the frames still go in).
  json text_only = {{"messages", messages}, {"max_tokens", 4}, {"temperature", 0}};
  text_only["messages"].insert(text_only["messages"].begin(),
                               json{{"role", "system"}, {"content", "Respond with interleaved text and audio. Use the UK male voice."}});
  r = post(*speech_, text_only);
  ASSERT_EQ(r->status, 200) << r->body;
  const json third = json::parse(r->body);
  EXPECT_TRUE(third["choices"][0]["message"]["content"].is_string());
  EXPECT_FALSE(third["choices"][0]["message"].contains("audio"));
  EXPECT_GE(third["usage"]["prompt_tokens_details"]["cached_tokens"].get<int64_t>(), cached) << r->body;
}

TEST_F(ServerSpeechChatTest, RefusalsNameTheirField) {
  auto expect_400 = [](const httplib::Result& r, const std::string& param, const std::string& words) {
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 400) << r->body;
    const json e = json::parse(r->body)["error"];
    EXPECT_EQ(e["param"], param) << r->body;
    EXPECT_NE(e["message"].get<std::string>().find(words), std::string::npos) << r->body;
  };
  const json msgs = json::array({user("Hi")});
  expect_400(post(*text_, spoken_body(msgs)), "modalities", "does not speak");
  json b = spoken_body(msgs);
  b["audio"]["voice"] = "alloy";
  expect_400(post(*speech_, b), "audio.voice", "alloy");
  b = spoken_body(msgs);
  b["audio"]["format"] = "aac";
  expect_400(post(*speech_, b), "audio.format", "aac");
  b = spoken_body(msgs);
  b.erase("audio");
  expect_400(post(*speech_, b), "audio", "must be an object");
  b = spoken_body(msgs);
  b.erase("modalities");
  expect_400(post(*speech_, b), "audio", "modalities");
  b = spoken_body(msgs);
  b["modalities"] = {"text", "video"};
  expect_400(post(*speech_, b), "modalities[1]", "\"audio\"");
  b = spoken_body(msgs);
  b["n"] = 2;
  expect_400(post(*speech_, b), "n", "one spoken reply");
  b = spoken_body(msgs);
  b["response_format"] = {{"type", "json_object"}};
  expect_400(post(*speech_, b), "modalities", "grammar");
  b = spoken_body(json::array({user("Hi"), {{"role", "assistant"}, {"audio", {{"id", "audio_nothing"}}}}, user("So?")}));
  expect_400(post(*speech_, b), "messages[1].audio.id", "audio_nothing");
  b["messages"][1]["audio"] = {{"id", 3}};
  expect_400(post(*speech_, b), "messages[1].audio.id", "must be a string");
  // The server goes on serving.
  auto r = post(*speech_, spoken_body(msgs));
  ASSERT_EQ(r->status, 200) << r->body;
}

// The official `openai` npm client (tools/server-tests, installed by scripts/setup.sh).
TEST_F(ServerSpeechChatTest, OfficialOpenAiClient) {
  const std::string dir = std::string(LFM_SOURCE_DIR) + "/tools/server-tests";
  ASSERT_TRUE(fs::exists(dir + "/node_modules/openai"))
      << "tools/server-tests/node_modules is missing: run scripts/setup.sh (npm ci --prefix tools/server-tests)";
  const auto r = test::run_command("node '" + dir + "/openai_speech_chat.mjs' http://127.0.0.1:" +
                                   std::to_string(speech_->port()) + "/v1 2>&1");
  ASSERT_EQ(r.code, 0) << r.out;
  const json j = json::parse(r.out);
  const json& a = j["whole"]["audio"];
  EXPECT_TRUE(j["whole"]["content"].is_null()) << r.out;
  EXPECT_EQ(a["id"].get<std::string>().rfind("audio_", 0), 0u) << r.out;
  EXPECT_TRUE(a["transcript"].is_string());
  EXPECT_EQ(j["stream"]["transcript"], a["transcript"]) << r.out;
  EXPECT_FALSE(a["data"].get<std::string>().empty()) << r.out;
  EXPECT_FALSE(j["stream"]["data"].get<std::string>().empty()) << r.out;
  EXPECT_GT(j["stream"]["expires_at"].get<int64_t>(), 0) << r.out;
  EXPECT_GT(j["second"]["usage"]["prompt_tokens_details"]["cached_tokens"].get<int64_t>(),
            j["whole"]["usage"]["prompt_tokens"].get<int64_t>())
      << r.out;
  EXPECT_EQ(j["bad"]["status"], 400) << r.out;
  EXPECT_EQ(j["bad"]["param"], "messages[1].audio.id") << r.out;
}

}  // namespace
}  // namespace lfm
