// `lfm serve` end to end over loopback HTTP: routes, OpenAI response and chunk shapes, tool calls
// (a scripted model emits an exact call), concurrency, every error status, disconnects and
// graceful shutdown. The official `openai` npm client is exercised in server_openai_test.cpp.
#include <gtest/gtest.h>
#include <chrono>
#include <unistd.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <httplib.h>
#include <signal.h>

#include <filesystem>
#include <atomic>
#include <future>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <thread>

#include "chat/chat_template.h"
#include "model_test_util.h"
#include "server_test_util.h"
#include "subprocess.h"
#include "test_util.h"
#include "tokenizer/load_tokenizer.h"

namespace lfm {
namespace {

using json = nlohmann::json;

using test::post;
using test::raw_exchange;
using test::ServerProc;
using test::sse_events;
using test::wait_metric;

class ServerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dirs_ = new test::TempDir("lfm_serve_models");
    text_model_ = (*dirs_ / "text").string();
    test::write_text_model(text_model_);
    // The scripted model answers every chat turn with a call of get_time(tz=1).
    scripted_model_ = (*dirs_ / "scripted").string();
    test::write_tool_call_model(scripted_model_, text_model_);
    text_ = new ServerProc(text_model_, {"--parallel", "4", "--ctx-size", "256"});
    scripted_ = new ServerProc(scripted_model_, {"--parallel", "2", "--ctx-size", "256"});
  }
  static void TearDownTestSuite() {
    delete text_;
    delete scripted_;
    delete dirs_;
  }
  static json tools() {
    return json::parse(R"([{"type": "function", "function": {"name": "get_time", "description": "Current time",
        "parameters": {"type": "object", "properties": {"tz": {"type": "integer"}}}}}])");
  }
  static test::TempDir* dirs_;
  static std::string text_model_, scripted_model_;
  static ServerProc *text_, *scripted_;
};
test::TempDir* ServerTest::dirs_ = nullptr;
std::string ServerTest::text_model_, ServerTest::scripted_model_;
ServerProc *ServerTest::text_ = nullptr, *ServerTest::scripted_ = nullptr;

TEST_F(ServerTest, HealthModelsTokenizeDetokenize) {
  auto c = text_->client();
  auto h = c.Get("/health");
  ASSERT_TRUE(h);
  EXPECT_EQ(h->status, 200);
  auto m = c.Get("/v1/models");
  ASSERT_TRUE(m);
  const json models = json::parse(m->body);
  EXPECT_EQ(models["object"], "list");
  EXPECT_EQ(models["data"][0]["id"], "text");
  EXPECT_EQ(models["data"][0]["max_model_len"], 256);
  int st = 0;
  const json t = post(c, "/tokenize", {{"content", "Hello world"}, {"add_special", false}}, &st);
  ASSERT_EQ(st, 200) << t.dump();
  const json d = post(c, "/detokenize", {{"tokens", t["tokens"]}}, &st);
  EXPECT_EQ(d["content"], "Hello world");
}

TEST_F(ServerTest, ChatToolCallsAutoNamedAndStreamed) {
  auto c = scripted_->client();
  const json msgs = json::array({{{"role", "user"}, {"content", "What time is it?"}}});
  for (const json& choice : {json("auto"), json{{"type", "function"}, {"function", {{"name", "get_time"}}}}}) {
    int st = 0;
    const json r = post(c, "/v1/chat/completions",
                        {{"model", "scripted"}, {"messages", msgs}, {"tools", tools()}, {"tool_choice", choice}, {"temperature", 0}},
                        &st);
    ASSERT_EQ(st, 200) << r.dump();
    const json& ch = r["choices"][0];
    ASSERT_EQ(ch["finish_reason"], "tool_calls") << r.dump();
    EXPECT_TRUE(ch["message"]["content"].is_null()) << r.dump();
    ASSERT_EQ(ch["message"]["tool_calls"].size(), 1u) << r.dump();
    const json& call = ch["message"]["tool_calls"][0];
    EXPECT_EQ(call["type"], "function");
    EXPECT_EQ(call["function"]["name"], "get_time");
    EXPECT_EQ(call["function"]["arguments"], "{\"tz\":1}");
    EXPECT_TRUE(call["id"].get<std::string>().rfind("call_", 0) == 0);
    EXPECT_EQ(r["object"], "chat.completion");
  }
  // Streamed: one tool-call delta, finish_reason tool_calls, usage, [DONE].
  auto res = c.Post("/v1/chat/completions",
                    json{{"messages", msgs}, {"tools", tools()}, {"temperature", 0}, {"stream", true},
                         {"stream_options", {{"include_usage", true}}}}
                        .dump(),
                    "application/json");
  ASSERT_TRUE(res);
  const auto ev = sse_events(res->body);
  ASSERT_GE(ev.size(), 4u) << res->body;
  EXPECT_EQ(ev.back(), "[DONE]");
  int calls = 0;
  std::string finish;
  json usage;
  for (size_t i = 0; i + 1 < ev.size(); ++i) {
    const json j = json::parse(ev[i]);
    if (j["choices"].empty()) {
      usage = j["usage"];
      continue;
    }
    const json& d = j["choices"][0]["delta"];
    if (d.contains("tool_calls")) {
      ++calls;
      EXPECT_EQ(d["tool_calls"][0]["index"], 0);
      EXPECT_EQ(d["tool_calls"][0]["function"]["arguments"], "{\"tz\":1}");
    }
    if (!j["choices"][0]["finish_reason"].is_null()) finish = j["choices"][0]["finish_reason"];
  }
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(finish, "tool_calls");
  EXPECT_GT(usage["prompt_tokens"].get<int>(), 0);
  // Assistant tool calls and tool results in the history are accepted and rendered.
  json history = msgs;
  history.push_back({{"role", "assistant"},
                     {"content", nullptr},
                     {"tool_calls", json::array({{{"id", "c1"}, {"type", "function"},
                                                  {"function", {{"name", "get_time"}, {"arguments", "{\"tz\": 1}"}}}}})}});
  history.push_back({{"role", "tool"}, {"tool_call_id", "c1"}, {"content", "12:00"}});
  int st = 0;
  post(c, "/v1/chat/completions", {{"messages", history}, {"tools", tools()}, {"max_tokens", 4}}, &st);
  EXPECT_EQ(st, 200);
}

TEST_F(ServerTest, StreamingChatEqualsTheWholeReply) {
  auto c = text_->client();
  const json req = {{"messages", json::array({{{"role", "user"},
                                                {"content", json::array({{{"type", "text"}, {"text", "Hello "}},
                                                                         {{"type", "text"}, {"text", "there"}}})}}})},
                    {"temperature", 0},
                    {"max_tokens", 20},
                    {"logprobs", true},
                    {"top_logprobs", 2}};
  int st = 0;
  const json whole = post(c, "/v1/chat/completions", req, &st);
  ASSERT_EQ(st, 200) << whole.dump();
  EXPECT_EQ(whole["choices"][0]["logprobs"]["content"].size(), 20u);
  EXPECT_EQ(whole["choices"][0]["logprobs"]["content"][0]["top_logprobs"].size(), 2u);
  EXPECT_EQ(whole["usage"]["completion_tokens"], 20);
  EXPECT_EQ(whole["choices"][0]["finish_reason"], "length");
  json sreq = req;
  sreq["stream"] = true;
  auto res = c.Post("/v1/chat/completions", sreq.dump(), "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->get_header_value("Content-Type"), "text/event-stream");
  std::string content;
  int tokens = 0;
  for (const auto& e : sse_events(res->body)) {
    if (e == "[DONE]") continue;
    const json j = json::parse(e);
    EXPECT_EQ(j["object"], "chat.completion.chunk");
    const json& d = j["choices"][0]["delta"];
    if (d.contains("content")) content += d["content"].get<std::string>();
    if (!j["choices"][0]["logprobs"].is_null()) tokens += static_cast<int>(j["choices"][0]["logprobs"]["content"].size());
  }
  EXPECT_EQ(content, whole["choices"][0]["message"]["content"].get<std::string>());
  EXPECT_EQ(tokens, 20);
}

TEST_F(ServerTest, CompletionsTextIdsAndStream) {
  auto c = text_->client();
  int st = 0;
  const json a = post(c, "/v1/completions", {{"prompt", "Once upon a time"}, {"max_tokens", 12}, {"temperature", 0}}, &st);
  ASSERT_EQ(st, 200) << a.dump();
  EXPECT_EQ(a["object"], "text_completion");
  const json ids = post(c, "/tokenize", {{"content", "Once upon a time"}}, &st)["tokens"];
  const json b = post(c, "/v1/completions", {{"prompt", ids}, {"max_tokens", 12}, {"temperature", 0}, {"logprobs", 1}}, &st);
  ASSERT_EQ(st, 200) << b.dump();
  EXPECT_EQ(b["choices"][0]["text"], a["choices"][0]["text"]);
  EXPECT_EQ(b["choices"][0]["logprobs"]["tokens"].size(), 12u);
  auto res = c.Post("/v1/completions", json{{"prompt", ids}, {"max_tokens", 12}, {"temperature", 0}, {"stream", true}}.dump(),
                    "application/json");
  ASSERT_TRUE(res);
  std::string text;
  for (const auto& e : sse_events(res->body))
    if (e != "[DONE]") text += json::parse(e)["choices"][0]["text"].get<std::string>();
  EXPECT_EQ(text, a["choices"][0]["text"].get<std::string>());
}

TEST_F(ServerTest, ConcurrentGreedyRequestsEqualThemAlone) {
  std::vector<json> reqs;
  for (int i = 0; i < 8; ++i)
    reqs.push_back({{"prompt", json::array({1, 100 + i * 37, 200 + i, 300})}, {"max_tokens", 10 + i}, {"temperature", 0}});
  std::vector<std::string> alone;
  {
    auto c = text_->client();
    for (const auto& r : reqs) alone.push_back(post(c, "/v1/completions", r)["choices"][0]["text"]);
  }
  std::vector<std::future<std::string>> together;
  for (const auto& r : reqs)
    together.push_back(std::async(std::launch::async, [&, r] {
      auto c = text_->client();
      return post(c, "/v1/completions", r)["choices"][0]["text"].get<std::string>();
    }));
  for (size_t i = 0; i < reqs.size(); ++i) EXPECT_EQ(together[i].get(), alone[i]) << "request " << i;
}

TEST_F(ServerTest, ErrorsUseOpenAiShapeAndStatus) {
  auto c = text_->client();
  auto expect = [&](const std::string& path, const std::string& body, int status, const std::string& needle) {
    auto r = c.Post(path.c_str(), body, "application/json");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, status) << body << " → " << r->body;
    const json j = json::parse(r->body);
    ASSERT_TRUE(j.contains("error")) << r->body;
    EXPECT_NE(j["error"]["message"].get<std::string>().find(needle), std::string::npos) << r->body;
  };
  expect("/v1/chat/completions", "{not json", 400, "not valid JSON");
  expect("/v1/chat/completions", R"({"messages": []})", 400, "'messages'");
  expect("/v1/chat/completions", R"({"messages": [{"role": "user", "content": "x"}], "temperature": "hot"})", 400,
         "'temperature'");
  expect("/v1/chat/completions", R"({"messages": [{"role": "wizard", "content": "x"}]})", 400, "messages[0].role");
  expect("/v1/chat/completions", R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})", 400,
         "image_url");
  expect("/v1/completions", R"({"prompt": "hi", "max_tokens": 100000})", 400, "past the context size 256");
  expect("/v1/completions", R"({"prompt": "hi", "logit_bias": {"99999999": 1}})", 400, "logit_bias");
  expect("/v1/completions", R"({"prompt": "hi", "n": 17})", 400, "'n'");
  auto nf = c.Get("/v1/nothing");
  ASSERT_TRUE(nf);
  EXPECT_EQ(nf->status, 404);
  EXPECT_TRUE(json::parse(nf->body).contains("error"));
  auto big = c.Post("/v1/completions", std::string(9 << 20, ' '), "application/json");
  ASSERT_TRUE(big);
  EXPECT_EQ(big->status, 413);
  EXPECT_EQ(c.Get("/health")->status, 200);  // still serving
}

// Bodies nested ~100k levels deep (the whole body, and a tool call's arguments string) are 400s
// naming the limit; the server keeps serving.
// Issue 41, item 4: ambiguous message lengths are 400 (RFC 9112 §6.3), not a guess.
TEST_F(ServerTest, AmbiguousRequestFramingIs400) {
  const std::string body = R"({"content": "hi"})";
  const std::string head = "POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n";
  const std::string n = std::to_string(body.size());
  const std::string ok = raw_exchange(text_->port(), head + "Content-Length: " + n + "\r\n\r\n" + body);
  EXPECT_EQ(ok.rfind("HTTP/1.1 200", 0), 0u) << ok;
  for (const std::string& bad :
       {"Content-Length: " + n + "\r\nContent-Length: " + std::to_string(body.size() + 1) + "\r\n",
        "Content-Length: " + n + "\r\nContent-Length: " + n + "\r\n",
        "Content-Length: " + n + "\r\nTransfer-Encoding: chunked\r\n", "Content-Length: +" + n + "\r\n"}) {
    const std::string got = raw_exchange(text_->port(), head + bad + "\r\n" + body);
    EXPECT_EQ(got.rfind("HTTP/1.1 400", 0), 0u) << bad << "\n" << got;
  }
  EXPECT_TRUE(text_->client().Get("/health"));  // still serving
}

// Pipelined requests (RFC 9112 §9.3.2) are all answered, in order, and the connection closes as
// the last one asks: cpp-httplib's own loop answered the first and dropped the rest (the bytes it
// had read ahead), then held the connection for its 5 s keep-alive timeout.
TEST_F(ServerTest, PipelinedRequestsAreAnsweredInOrder) {
  const std::string tokenize = R"({"content": "hi"})";
  const std::string bytes =
      "GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
      "POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " +
      std::to_string(tokenize.size()) + "\r\n\r\n" + tokenize +
      "GET /v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(text_->port()));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  timeval tv{10, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_EQ(::write(fd, bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size()));
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) out.append(buf, static_cast<size_t>(n));
  ::close(fd);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const size_t first = out.find(R"({"status":"ok"})"), second = out.find(R"("tokens")"),
               third = out.find(R"("object":"list")");
  ASSERT_NE(first, std::string::npos) << out;
  ASSERT_NE(second, std::string::npos) << out;
  ASSERT_NE(third, std::string::npos) << out;
  EXPECT_LT(first, second);
  EXPECT_LT(second, third);
  size_t statuses = 0;
  for (size_t at = 0; (at = out.find("HTTP/1.1 200 OK\r\n", at)) != std::string::npos; ++at) ++statuses;
  EXPECT_EQ(statuses, 3u) << out;
  EXPECT_LT(seconds, 3.0) << "the connection was held open after the last request asked to close it";
}

// Issue 41, item 4: slow clients (one header line every 300 ms, as slowloris sends them) cannot
// hold the server. Eight of them against --http-threads 4: /health still answers within a second,
// a normal request is served, and each slow connection is closed at the read deadline.
TEST(ServerSlowClients, CannotStarveTheServer) {
  test::TempDir dir("lfm_serve_slow");
  test::write_text_model(dir.str());
  ServerProc s(dir.str(), {"--http-threads", "4", "--request-read-timeout", "2", "--ctx-size", "64"});
  std::atomic<bool> stop{false};
  std::atomic<int> closed_early{0};
  std::vector<std::thread> slow;
  for (int i = 0; i < 8; ++i)
    slow.emplace_back([&, i] {
      const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_port = htons(static_cast<uint16_t>(s.port()));
      a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) return;
      const auto t0 = std::chrono::steady_clock::now();
      std::string line = "POST /v1/completions HTTP/1.1\r\n";
      for (int k = 0; !stop && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(8); ++k) {
        if (::send(fd, line.data(), line.size(), MSG_NOSIGNAL) < 0) break;  // the server hung up
        line = "X-Slow-" + std::to_string(i) + "-" + std::to_string(k) + ": 1\r\n";
        std::this_thread::sleep_for(std::chrono::milliseconds(300));
      }
      if (std::chrono::steady_clock::now() - t0 < std::chrono::seconds(6)) ++closed_early;
      ::close(fd);
    });
  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // all eight connected and dripping
  auto c = s.client();
  c.set_read_timeout(1, 0);
  const auto t0 = std::chrono::steady_clock::now();
  auto h = c.Get("/health");
  ASSERT_TRUE(h) << "no answer from /health within a second";
  EXPECT_EQ(h->status, 200);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(1));
  c.set_read_timeout(30, 0);
  int st = 0;
  post(c, "/v1/completions", {{"prompt", "hi"}, {"max_tokens", 2}}, &st);
  EXPECT_EQ(st, 200);
  for (auto& t : slow) t.join();
  EXPECT_EQ(closed_early.load(), 8) << "slow connections should be closed at the 2 s read deadline";
  const std::string m = c.Get("/metrics")->body;
  const std::string name = "\nlfm:http_read_timeouts_total ";
  const size_t at = m.find(name);
  ASSERT_NE(at, std::string::npos) << m;
  EXPECT_GE(std::stoi(m.substr(at + name.size())), 8) << m;
}

TEST_F(ServerTest, DeeplyNestedJsonIs400) {
  auto c = text_->client();
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  auto r = c.Post("/v1/chat/completions", R"({"messages": )" + deep + "}", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400) << r->body;
  EXPECT_NE(r->body.find("nesting deeper than 128 levels"), std::string::npos) << r->body;
  const json body = {{"messages",
                      json::array({{{"role", "user"}, {"content", "x"}},
                                   {{"role", "assistant"},
                                    {"tool_calls", json::array({{{"type", "function"},
                                                                 {"function", {{"name", "f"}, {"arguments", deep}}}}})}},
                                   {{"role", "user"}, {"content", "y"}}})}};
  r = c.Post("/v1/chat/completions", body.dump(), "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400) << r->body;
  EXPECT_NE(r->body.find("messages[1].tool_calls[0].function.arguments"), std::string::npos) << r->body;
  EXPECT_EQ(c.Get("/health")->status, 200);
}

// The official `openai` npm client (pinned in tools/server-tests/package-lock.json, installed by
// scripts/setup.sh) against both servers.
TEST_F(ServerTest, OfficialOpenAiClient) {
  const std::string dir = std::string(LFM_SOURCE_DIR) + "/tools/server-tests";
  ASSERT_TRUE(std::filesystem::exists(dir + "/node_modules/openai"))
      << "tools/server-tests/node_modules is missing: run scripts/setup.sh (npm ci --prefix tools/server-tests)";
  // An LFM2-VL server (tests/data/hf_vl) for the image_url case.
  const std::string vl_model = test::data_dir() + "/hf_vl/lfm2vl_a_tied_ln";
  const std::string vl_png = test::data_dir() + "/hf_vl/images/rgb_37x53.png";
  ServerProc vl(vl_model, {"--parallel", "1", "--ctx-size", "256"});
  const auto r = test::run_command("node '" + dir + "/openai_client.mjs' http://127.0.0.1:" + std::to_string(text_->port()) +
                                   "/v1 http://127.0.0.1:" + std::to_string(scripted_->port()) + "/v1 http://127.0.0.1:" +
                                   std::to_string(vl.port()) + "/v1 '" + vl_png + "' 2>&1");
  ASSERT_EQ(r.code, 0) << r.out;
  const json j = json::parse(r.out);
  EXPECT_EQ(j["models"], json::array({"text"}));
  EXPECT_EQ(j["chat"]["finish"], "length");
  EXPECT_EQ(j["chat"]["usage"]["completion_tokens"], 12);
  EXPECT_EQ(j["chat_stream"]["content"], j["chat"]["content"]);
  EXPECT_EQ(j["chat_stream"]["finish"], "length");
  EXPECT_EQ(j["chat_stream"]["usage"]["completion_tokens"], 12);
  EXPECT_EQ(j["tool_call"]["finish"], "tool_calls");
  EXPECT_EQ(j["tool_call"]["message"]["tool_calls"][0]["function"]["name"], "get_time");
  EXPECT_EQ(j["tool_call"]["message"]["tool_calls"][0]["function"]["arguments"], "{\"tz\":1}");
  EXPECT_EQ(j["tool_stream"]["finish"], "tool_calls");
  ASSERT_EQ(j["tool_stream"]["calls"].size(), 1u) << r.out;
  EXPECT_EQ(j["tool_stream"]["calls"][0]["function"]["arguments"], "{\"tz\":1}");
  EXPECT_EQ(j["completion_stream"], j["completion"]["text"]);
  EXPECT_EQ(j["bad_request"]["status"], 400);
  // The image_url part: transformers' greedy tokens (reference.json one_image) as text.
  const json ref = test::read_json(vl_model + "/reference.json");
  std::vector<int32_t> ids;
  for (const json& c : ref["cases"])
    if (c["name"] == "one_image") ids = c["greedy_ids"].get<std::vector<int32_t>>();
  EXPECT_EQ(j["image"]["content"], load_tokenizer(vl_model)->decode(ids, /*skip_special=*/true)) << r.out;
  EXPECT_EQ(j["image"]["finish"], "length");
  EXPECT_EQ(j["image"]["usage"]["prompt_tokens"], 32);
  EXPECT_EQ(j["image"]["usage"]["completion_tokens"], 12);
  EXPECT_EQ(j["image_error"]["status"], 400);
  EXPECT_EQ(j["image_error"]["param"], "messages[0].content[0].image_url");
  // Structured output: the content is JSON valid under the schema; the strict tool's arguments
  // parse to the declared types.
  auto check_weather = [](const json& w) {
    ASSERT_TRUE(w.is_object()) << w.dump();
    EXPECT_EQ(w.size(), 3u) << w.dump();
    ASSERT_TRUE(w["city"].is_string()) << w.dump();
    size_t chars = 0;  // maxLength counts characters
    for (unsigned char ch : w["city"].get<std::string>()) chars += (ch & 0xC0) != 0x80;
    EXPECT_LE(chars, 12u) << w.dump();
    EXPECT_TRUE(w["days"].is_number_integer() && w["days"] >= 1 && w["days"] <= 9) << w.dump();
    EXPECT_TRUE(w["metric"].is_boolean()) << w.dump();
  };
  EXPECT_EQ(j["response_format"]["finish"], "stop") << r.out;
  check_weather(json::parse(j["response_format"]["content"].get<std::string>()));
  EXPECT_EQ(j["strict_tool"]["finish"], "tool_calls") << r.out;
  const json& calls = j["strict_tool"]["message"]["tool_calls"];
  ASSERT_GE(calls.size(), 1u) << r.out;
  for (const auto& call : calls) {
    EXPECT_EQ(call["function"]["name"], "get_weather");
    check_weather(json::parse(call["function"]["arguments"].get<std::string>()));
  }
}

// Speculative decoding through the server (issue 37): --draft-model makes model drafts the
// default, a request may choose another drafter or none; greedy text is the same either way,
// /metrics counts drafted and accepted tokens, and bad fields are 400s naming them.
TEST_F(ServerTest, SpeculativeDecodingPerRequestAndByDefault) {
  ServerProc s(text_model_, {"--draft-model", text_model_, "--draft-max", "4", "--ctx-size", "256"});
  auto c = s.client();
  int st = 0;
  auto plain_client = text_->client();
  const json plain = post(plain_client, "/v1/completions",
                          {{"prompt", "Once upon a time"}, {"max_tokens", 16}, {"temperature", 0}}, &st);
  ASSERT_EQ(st, 200) << plain.dump();
  for (const json& spec : {json(nullptr), json{{"draft", "ngram"}, {"max_drafts", 3}}, json{{"draft", "none"}},
                           json{{"draft", "model"}}}) {
    json body = {{"prompt", "Once upon a time"}, {"max_tokens", 16}, {"temperature", 0}};
    if (!spec.is_null()) body["speculative"] = spec;
    const json r = post(c, "/v1/completions", body, &st);
    ASSERT_EQ(st, 200) << spec.dump() << " → " << r.dump();
    EXPECT_EQ(r["choices"][0]["text"], plain["choices"][0]["text"]) << spec.dump();
  }
  auto m = c.Get("/metrics");
  ASSERT_TRUE(m);
  const auto value = [&](const std::string& name) {
    const size_t at = m->body.find("\n" + name + " ");
    return at == std::string::npos ? -1.0 : std::stod(m->body.substr(at + name.size() + 2));
  };
  EXPECT_GT(value("lfm:spec_decode_num_draft_tokens_total"), 0) << m->body;
  // The model drafting for itself: every draft accepted.
  EXPECT_EQ(value("lfm:spec_decode_num_accepted_tokens_total"), value("lfm:spec_decode_num_draft_tokens_total"));
  for (const auto& [spec, needle] : std::vector<std::pair<json, std::string>>{
           {json{{"draft", "beam"}}, "speculative.draft"},
           {json{{"draft", 3}}, "speculative.draft"},
           {json{{"max_drafts", 0}}, "max_drafts"},
           {json{{"drafts", 2}}, "speculative.drafts"},
           {json("ngram"), "speculative"}}) {
    const json r = post(c, "/v1/completions", {{"prompt", "a"}, {"max_tokens", 2}, {"speculative", spec}}, &st);
    EXPECT_EQ(st, 400) << spec.dump();
    EXPECT_NE(r.dump().find(needle), std::string::npos) << spec.dump() << " → " << r.dump();
  }
  // A server without a draft model refuses model drafts, and still serves.
  const json r = post(plain_client, "/v1/completions",
                      {{"prompt", "a"}, {"max_tokens", 2}, {"speculative", {{"draft", "model"}}}}, &st);
  EXPECT_EQ(st, 400);
  EXPECT_NE(r.dump().find("draft model"), std::string::npos) << r.dump();
  post(plain_client, "/v1/completions", {{"prompt", "a"}, {"max_tokens", 2}}, &st);
  EXPECT_EQ(st, 200);
}

// The model's file truncated under the running server (`cp` over it does that): the server
// copied what it reads at load and let go of the file, so it answers on, with the same tokens
// (before, the next request died of SIGBUS with every request in flight).
TEST(ServerModelFile, AnswersOnAfterItsFileIsTruncated) {
  test::TempDir dir("lfm_serve_truncated");
  test::write_text_model(dir.str());
  ServerProc s(dir.str(), {"--parallel", "1", "--ctx-size", "128"});
  auto c = s.client();
  const json body = {{"prompt", "hello there"}, {"max_tokens", 6}, {"temperature", 0}, {"ignore_eos", true}};
  int st = 0;
  const json before = post(c, "/v1/completions", body, &st);
  ASSERT_EQ(st, 200) << before.dump();
  std::filesystem::resize_file(dir / "model.safetensors", 0);
  const json after = post(c, "/v1/completions", body, &st);
  ASSERT_EQ(st, 200) << after.dump();
  EXPECT_EQ(after["choices"][0]["text"], before["choices"][0]["text"]);
  EXPECT_EQ(c.Get("/health")->status, 200);
}

TEST(ServerAuthAndLimits, ApiKeyAndQueueFull) {
  test::TempDir dir("lfm_serve_auth");
  test::write_text_model(dir.str());
  ServerProc s(dir.str(), {"--api-key", "sekret", "--parallel", "1", "--max-queue", "1", "--ctx-size", "60000"});
  auto c = s.client();
  int st = 0;
  const json body = {{"prompt", "hi"}, {"max_tokens", 2}};
  post(c, "/v1/completions", body, &st);
  EXPECT_EQ(st, 401);
  post(c, "/v1/completions", body, &st, {{"Authorization", "Bearer wrong"}});
  EXPECT_EQ(st, 401);
  post(c, "/v1/completions", body, &st, {{"Authorization", "Bearer sekret"}});
  EXPECT_EQ(st, 200);
  EXPECT_EQ(c.Get("/health")->status, 200);  // probes need no key
  // One running, one queued (streams we abort afterwards): the third is refused with 429.
  std::atomic<bool> stop{false};
  std::vector<std::future<int>> busy;
  // A failed assertion below returns early: end the streams then too (not after 59000 tokens).
  struct StopOnExit {
    std::atomic<bool>& stop;
    ~StopOnExit() { stop = true; }
  } stop_on_exit{stop};
  // The request above has answered, but the gauges may not have caught up with its end yet.
  ASSERT_EQ(wait_metric(c, "lfm:num_requests_running", 0), 0);
  for (int i = 0; i < 2; ++i) {
    busy.push_back(std::async(std::launch::async, [&] {
      httplib::Client cc("127.0.0.1", s.port());
      httplib::Request q;
      q.method = "POST";
      q.path = "/v1/completions";
      q.set_header("Authorization", "Bearer sekret");
      q.set_header("Content-Type", "application/json");
      q.body = json{{"prompt", "hi"}, {"max_tokens", 59000}, {"ignore_eos", true}, {"stream", true}}.dump();
      std::string got;
      q.content_receiver = [&](const char* d, size_t n, uint64_t, uint64_t) {
        if (got.size() < 512) got.append(d, n);
        return !stop.load();
      };
      auto res = cc.send(q);
      if (!stop) ADD_FAILURE() << "busy request ended early: " << (res ? res->status : -1) << " " << got;
      return res ? res->status : -1;
    }));
    ASSERT_EQ(wait_metric(c, i == 0 ? "lfm:num_requests_running" : "lfm:num_requests_waiting", 1), 1)
        << "request " << i << "; " << c.Get("/metrics")->body.substr(0, 600);
    if (i == 0) {
      ASSERT_EQ(wait_metric(c, "lfm:num_requests_waiting", 0), 0);
    }
  }
  auto r = c.Post("/v1/completions", {{"Authorization", "Bearer sekret"}}, body.dump(), "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 429) << r->body;
  EXPECT_EQ(r->get_header_value("Retry-After"), "1");
  EXPECT_NE(json::parse(r->body)["error"]["message"].get<std::string>().find("queue is full"), std::string::npos);
  stop = true;
  for (auto& b : busy) b.get();
  EXPECT_EQ(wait_metric(c, "lfm:num_requests_running", 0), 0);
}

TEST_F(ServerTest, DisconnectCancelsAndFreesState) {
  auto c = text_->client();
  int st = 0;
  post(c, "/v1/completions", {{"prompt", "a"}, {"max_tokens", 2}}, &st);
  ASSERT_EQ(st, 200);
  {
    httplib::Client s("127.0.0.1", text_->port());
    bool closed = false;
    httplib::Request q;
    q.method = "POST";
    q.path = "/v1/completions";
    q.set_header("Content-Type", "application/json");
    q.body = json{{"prompt", "tell me"}, {"max_tokens", 230}, {"ignore_eos", true}, {"stream", true}}.dump();
    q.content_receiver = [&](const char*, size_t, uint64_t, uint64_t) {
      closed = true;
      return false;  // abort the transfer after the first bytes
    };
    s.send(q);
    EXPECT_TRUE(closed);
  }
  EXPECT_EQ(wait_metric(c, "lfm:num_requests_running", 0), 0);
  EXPECT_EQ(wait_metric(c, "lfm:kv_blocks_used", 0), 0);
  const std::string counted = "lfm:http_requests_total{route=\"/v1/completions\",status=\"200\"}";
  const std::string metrics = test::wait_metrics_text(c, counted);
  ASSERT_FALSE(metrics.empty());
  for (const char* needle : {"# TYPE lfm:num_requests_waiting gauge", "# TYPE lfm:kv_cache_usage_perc gauge",
                             "lfm:time_to_first_token_seconds_bucket{le=", "lfm:inter_token_latency_seconds_count",
                             counted.c_str(),
                             "lfm:conv_slots_total 4",
                             // bucket bounds as written, not %.17g's "0.0050000000000000001"
                             "lfm:time_to_first_token_seconds_bucket{le=\"0.005\"}",
                             "lfm:inter_token_latency_seconds_bucket{le=\"0.15\"}",
                             "# TYPE lfm:num_preemptions_total counter", "# TYPE lfm:num_requests_cancelled_total counter"})
    EXPECT_NE(metrics.find(needle), std::string::npos) << needle;
  // Each metric is exported once, under one type; a counter ends in _total and has no gauge twin
  // (lfm:num_preemptions was once both a gauge and lfm:num_preemptions_total).
  std::set<std::string> names;
  std::istringstream lines(metrics);
  for (std::string line; std::getline(lines, line);) {
    if (!line.starts_with("# TYPE ")) continue;
    std::istringstream f(line.substr(7));
    std::string name, type;
    f >> name >> type;
    EXPECT_TRUE(names.insert(name).second) << "exported twice: " << name;
    if (type == "counter") {
      EXPECT_TRUE(name.ends_with("_total")) << name;
    }
  }
  for (const auto& n : names) {
    if (n.ends_with("_total")) {
      EXPECT_EQ(names.count(n.substr(0, n.size() - 6)), 0u) << n << " has a gauge twin";
    }
  }
}

TEST(ServerShutdown, SigtermFinishesInFlightThenExitsZero) {
  test::TempDir dir("lfm_serve_stop");
  test::write_text_model(dir.str());
  ServerProc s(dir.str(), {"--parallel", "2", "--ctx-size", "2048", "--drain-delay", "0"});
  auto stream = std::async(std::launch::async, [&] {
    auto c = s.client();
    auto r = c.Post("/v1/completions", json{{"prompt", "a"}, {"max_tokens", 1500}, {"ignore_eos", true}, {"stream", true}}.dump(),
                    "application/json");
    return r ? r->body : std::string();
  });
  auto probe = s.client();
  ASSERT_EQ(wait_metric(probe, "lfm:num_requests_running", 1), 1);
  s.proc().signal(SIGTERM);
  // While it drains, new requests get 503 with Retry-After (issue 41); the signal lands shortly.
  // /health stays 200 (liveness), /ready is 503 (server_health_test.cpp).
  int status = 0;
  std::string retry_after;
  for (int i = 0; i < 100 && status != 503; ++i) {
    if (auto r = probe.Get("/v1/models")) {
      status = r->status;
      retry_after = r->get_header_value("Retry-After");
    }
    if (status != 503) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(status, 503);
  EXPECT_EQ(retry_after, "5");
  const std::string body = stream.get();
  const auto ev = sse_events(body);
  ASSERT_GE(ev.size(), 2u) << body;
  EXPECT_EQ(ev.back(), "[DONE]");
  EXPECT_EQ(json::parse(ev[ev.size() - 2])["choices"][0]["finish_reason"], "length");  // it ran to completion
  EXPECT_EQ(s.proc().wait(), 0) << s.stderr_text();
  httplib::Client after("127.0.0.1", s.port());
  EXPECT_FALSE(after.Get("/health"));  // no longer accepting
}

TEST(ServerShutdown, GracePeriodOverCancelsAndExitsZero) {
  test::TempDir dir("lfm_serve_grace");
  test::write_text_model(dir.str());
  ServerProc s(dir.str(), {"--ctx-size", "60000", "--shutdown-grace", "0.3"});
  auto stream = std::async(std::launch::async, [&] {
    auto c = s.client();
    auto r = c.Post("/v1/completions",
                    json{{"prompt", "a"}, {"max_tokens", 59000}, {"ignore_eos", true}, {"stream", true}}.dump(),
                    "application/json");
    return r ? r->body : std::string();
  });
  auto probe = s.client();
  ASSERT_EQ(wait_metric(probe, "lfm:num_requests_running", 1), 1);
  s.proc().signal(SIGINT);
  const std::string body = stream.get();
  EXPECT_NE(body.find("cancelled"), std::string::npos) << body.substr(body.size() > 300 ? body.size() - 300 : 0);
  EXPECT_EQ(s.proc().wait(), 0) << s.stderr_text();
}

}  // namespace
}  // namespace lfm
