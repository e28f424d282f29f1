// `lfm serve`: the surface clients hit beyond the basics of server_test.cpp (issue 38, point 4):
// special tokens kept out of content, sampling defaults from generation_config.json, several
// choices and prompts per request, disconnects of non-streamed requests, logprob bytes, error
// codes, model ids, CORS, the access log, and gauges that move as soon as work is admitted.
#include <gtest/gtest.h>

#include <chrono>
#include <ctime>
#include <fstream>
#include <future>
#include <nlohmann/json.hpp>
#include <thread>

#include "server_test_util.h"

namespace lfm {
namespace {

using json = nlohmann::json;
using test::post;
using test::ServerProc;
using test::sse_events;
using test::wait_metric;

class ServerApiTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dirs_ = new test::TempDir("lfm_serve_api_models");
    text_model_ = (*dirs_ / "text").string();
    test::write_text_model(text_model_);
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
  static json user(const std::string& text) { return json::array({{{"role", "user"}, {"content", text}}}); }
  static test::TempDir* dirs_;
  static std::string text_model_, scripted_model_;
  static ServerProc *text_, *scripted_;
};
test::TempDir* ServerApiTest::dirs_ = nullptr;
std::string ServerApiTest::text_model_, ServerApiTest::scripted_model_;
ServerProc *ServerApiTest::text_ = nullptr, *ServerApiTest::scripted_ = nullptr;

// Item 1: without tools in the request, the tool-call markers the model emits are special tokens
// no parser consumes: they are dropped from content (whole and streamed), as vLLM and
// llama-server drop special tokens.
TEST_F(ServerApiTest, SpecialTokensDoNotLeakIntoContent) {
  auto c = scripted_->client();
  int st = 0;
  const json r = post(c, "/v1/chat/completions", {{"messages", user("What time is it?")}, {"temperature", 0}}, &st);
  ASSERT_EQ(st, 200) << r.dump();
  const std::string content = r["choices"][0]["message"]["content"];
  EXPECT_EQ(content, "[get_time(tz=1)]") << r.dump();
  EXPECT_FALSE(r["choices"][0]["message"].contains("tool_calls"));
  auto res = c.Post("/v1/chat/completions",
                    json{{"messages", user("What time is it?")}, {"temperature", 0}, {"stream", true}}.dump(),
                    "application/json");
  ASSERT_TRUE(res);
  std::string streamed;
  for (const auto& e : sse_events(res->body)) {
    if (e == "[DONE]") continue;
    const json j = json::parse(e);
    if (!j["choices"].empty() && j["choices"][0]["delta"].contains("content"))
      streamed += j["choices"][0]["delta"]["content"].get<std::string>();
  }
  EXPECT_EQ(streamed, content);
}

// Item 6: logprobs' `bytes` are the token's own bytes as 0–255 values, also for a token that is
// only part of a UTF-8 character (forced here with logit_bias), so clients can rebuild the text.
TEST_F(ServerApiTest, LogprobBytesAreTheTokensOwnBytes) {
  const auto tok = load_tokenizer(text_model_);
  int32_t lead = -1;  // a token that is one UTF-8 lead byte
  for (int32_t id = 0; id < 1000 && lead < 0; ++id) {
    std::string raw;
    try {
      tok->append_token_bytes(id, raw);
    } catch (const std::exception&) {
      continue;  // a hole in the ids
    }
    if (raw.size() == 1 && static_cast<unsigned char>(raw[0]) >= 0xC2) lead = id;
  }
  ASSERT_GE(lead, 0);
  std::string raw;
  tok->append_token_bytes(lead, raw);
  auto c = text_->client();
  int st = 0;
  const json r = post(c, "/v1/chat/completions",
                      {{"messages", user("Hi")}, {"temperature", 0}, {"max_tokens", 2}, {"logprobs", true},
                       {"top_logprobs", 1}, {"logit_bias", {{std::to_string(lead), 100}}}},
                      &st);
  ASSERT_EQ(st, 200) << r.dump();
  const json& lp = r["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(lp.size(), 2u) << r.dump();
  for (const json& e : lp) {
    EXPECT_EQ(e["bytes"], json::array({static_cast<unsigned char>(raw[0])})) << e.dump();
    for (const json& b : e["top_logprobs"][0]["bytes"]) EXPECT_TRUE(b.get<int>() >= 0 && b.get<int>() <= 255) << e.dump();
  }
}

// Item 6: `created` is the request's time, not the server's start.
TEST_F(ServerApiTest, CreatedIsTheRequestsTime) {
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));  // the server started at least a second ago
  const int64_t before = static_cast<int64_t>(std::time(nullptr));
  auto c = text_->client();
  const json a = post(c, "/v1/completions", {{"prompt", "a"}, {"max_tokens", 1}});
  const json b = post(c, "/v1/chat/completions", {{"messages", user("a")}, {"max_tokens", 1}});
  EXPECT_GE(a["created"].get<int64_t>(), before) << a.dump();
  EXPECT_GE(b["created"].get<int64_t>(), before) << b.dump();
}

// Item 6: OpenAI's string codes and the right param; an unknown model is 404 model_not_found
// (item 4: so is GET /v1/models/{id} for an unknown id), the served name and the -m argument
// as written are accepted, and an empty or absent "model" is fine.
TEST_F(ServerApiTest, ErrorCodesParamsAndModelNames) {
  auto c = text_->client();
  auto error_of = [&](const std::string& path, const json& body, int status) {
    int st = 0;
    const json r = post(c, path, body, &st);
    EXPECT_EQ(st, status) << body.dump() << " -> " << r.dump();
    return r.contains("error") ? r["error"] : json();
  };
  const json long_prompt = json::array();
  json ids = json::array();
  for (int i = 0; i < 300; ++i) ids.push_back(100 + i % 50);
  json e = error_of("/v1/completions", {{"prompt", ids}}, 400);
  EXPECT_EQ(e["code"], "context_length_exceeded");
  EXPECT_EQ(e["param"], "prompt");
  EXPECT_EQ(e["type"], "invalid_request_error");
  std::string words;
  for (int i = 0; i < 300; ++i) words += " hello";
  e = error_of("/v1/chat/completions", {{"messages", user(words)}}, 400);
  EXPECT_EQ(e["code"], "context_length_exceeded");
  EXPECT_EQ(e["param"], "messages");
  e = error_of("/v1/completions", {{"prompt", "a"}, {"max_tokens", 1000}}, 400);
  EXPECT_EQ(e["code"], "context_length_exceeded");
  EXPECT_EQ(e["param"], "max_tokens");
  e = error_of("/v1/chat/completions", {{"model", "gpt-4o"}, {"messages", user("a")}, {"max_tokens", 1}}, 404);
  EXPECT_EQ(e["code"], "model_not_found");
  EXPECT_EQ(e["type"], "invalid_request_error");
  EXPECT_EQ(error_of("/v1/completions", {{"model", "nope"}, {"prompt", "a"}}, 404)["code"], "model_not_found");
  e = error_of("/v1/completions", {{"prompt", "a"}, {"temperature", "hot"}}, 400);
  EXPECT_EQ(e["param"], "temperature");
  EXPECT_TRUE(e["code"].is_null()) << e.dump();
  for (const json& name : {json("text"), json(""), json(text_model_)})
    error_of("/v1/completions", {{"model", name}, {"prompt", "a"}, {"max_tokens", 1}}, 200);
  error_of("/v1/completions", {{"prompt", "a"}, {"max_tokens", 1}}, 200);
  auto m = c.Get("/v1/models/text");
  ASSERT_TRUE(m);
  EXPECT_EQ(m->status, 200);
  EXPECT_EQ(json::parse(m->body)["id"], "text");
  EXPECT_EQ(json::parse(m->body)["object"], "model");
  m = c.Get("/v1/models/gpt-4o");
  ASSERT_TRUE(m);
  EXPECT_EQ(m->status, 404);
  EXPECT_EQ(json::parse(m->body)["error"]["code"], "model_not_found");
}

// Item 6: the access log: one line per request on stderr with method, path, status, tokens and
// latency, never the content.
TEST_F(ServerApiTest, AccessLogHasOneLinePerRequestWithoutContent) {
  auto c = text_->client();
  int st = 0;
  post(c, "/v1/completions", {{"prompt", "zebra crossing"}, {"max_tokens", 3}, {"temperature", 0}}, &st);
  ASSERT_EQ(st, 200);
  std::string log;
  for (int i = 0; i < 100 && log.find("POST /v1/completions 200 prompt_tokens=") == std::string::npos; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    log = text_->stderr_text();
  }
  EXPECT_NE(log.find("POST /v1/completions 200 prompt_tokens="), std::string::npos) << log;
  EXPECT_NE(log.find("completion_tokens=3 "), std::string::npos) << log;
  EXPECT_EQ(log.find("zebra"), std::string::npos) << log;
}

// Item 6: the Authorization scheme is matched case-insensitively; CORS only behind
// --cors-origin (headers on every answer, preflights answered without a key); --no-access-log.
TEST(ServerApiFlags, BearerSchemeCaseCorsAndNoAccessLog) {
  test::TempDir dir("lfm_serve_cors");
  test::write_text_model(dir.str());
  ServerProc s(dir.str(), {"--api-key", "k3y", "--cors-origin", "https://app.example", "--no-access-log"});
  auto c = s.client();
  for (const char* auth : {"Bearer k3y", "bearer k3y", "BEARER k3y"}) {
    auto r = c.Get("/v1/models", {{"Authorization", auth}});
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200) << auth;
    EXPECT_EQ(r->get_header_value("Access-Control-Allow-Origin"), "https://app.example");
  }
  auto bad = c.Get("/v1/models", {{"Authorization", "Basic k3y"}});
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 401);
  EXPECT_EQ(json::parse(bad->body)["error"]["code"], "invalid_api_key");
  EXPECT_EQ(bad->get_header_value("Access-Control-Allow-Origin"), "https://app.example");
  auto pre = c.Options("/v1/chat/completions", {{"Origin", "https://app.example"},
                                                {"Access-Control-Request-Method", "POST"},
                                                {"Access-Control-Request-Headers", "authorization, content-type"}});
  ASSERT_TRUE(pre);
  EXPECT_EQ(pre->status, 204);
  EXPECT_EQ(pre->get_header_value("Access-Control-Allow-Origin"), "https://app.example");
  EXPECT_NE(pre->get_header_value("Access-Control-Allow-Methods").find("POST"), std::string::npos);
  EXPECT_NE(pre->get_header_value("Access-Control-Allow-Headers").find("authorization"), std::string::npos);
  EXPECT_EQ(s.stderr_text().find("GET /v1/models"), std::string::npos) << s.stderr_text();
}

TEST_F(ServerApiTest, NoCorsHeadersWithoutTheFlag) {
  auto c = text_->client();
  auto r = c.Get("/v1/models", {{"Origin", "https://app.example"}});
  ASSERT_TRUE(r);
  EXPECT_FALSE(r->has_header("Access-Control-Allow-Origin"));
  auto pre = c.Options("/v1/chat/completions", {{"Origin", "https://app.example"}, {"Access-Control-Request-Method", "POST"}});
  ASSERT_TRUE(pre);
  EXPECT_NE(pre->status, 204);
  EXPECT_FALSE(pre->has_header("Access-Control-Allow-Origin"));
}

// Item 3: generation_config.json's sampling fields fill what a request leaves unset (here top_k 1:
// sampling becomes greedy whatever the temperature); a field the request gives wins.
TEST(ServerApiDefaults, GenerationConfigFillsUnsetSamplingFields) {
  test::TempDir dir("lfm_serve_gencfg");
  test::write_text_model(dir.str());
  std::ofstream(dir / "generation_config.json") << R"({"bos_token_id": 1, "eos_token_id": 7, "temperature": 1.5, "top_k": 1})";
  ServerProc s(dir.str(), {});
  EXPECT_NE(s.stderr_text().find("sampling defaults from"), std::string::npos) << s.stderr_text();
  EXPECT_NE(s.stderr_text().find("temperature 1.5, top_k 1"), std::string::npos) << s.stderr_text();
  auto c = s.client();
  const json base = {{"prompt", "Once upon a time"}, {"max_tokens", 16}, {"ignore_eos", true}};
  json greedy = base;
  greedy["temperature"] = 0;
  const std::string want = post(c, "/v1/completions", greedy)["choices"][0]["text"];
  EXPECT_EQ(post(c, "/v1/completions", base)["choices"][0]["text"], want);
  json chat = {{"messages", json::array({{{"role", "user"}, {"content", "Hi"}}})}, {"max_tokens", 12}};
  json chat_greedy = chat;
  chat_greedy["temperature"] = 0;
  EXPECT_EQ(post(c, "/v1/chat/completions", chat)["choices"][0]["message"]["content"],
            post(c, "/v1/chat/completions", chat_greedy)["choices"][0]["message"]["content"]);
  json sampled = base;
  sampled["top_k"] = 0;  // explicit: off, so temperature 1.5 samples
  sampled["seed"] = 3;
  EXPECT_NE(post(c, "/v1/completions", sampled)["choices"][0]["text"], want);
  // --generation-config none: OpenAI's defaults (temperature 1, no top_k) sample.
  ServerProc n(dir.str(), {"--generation-config", "none"});
  auto cn = n.client();
  json seeded = base;
  seeded["seed"] = 3;
  EXPECT_NE(post(cn, "/v1/completions", seeded)["choices"][0]["text"], want);
  EXPECT_EQ(n.stderr_text().find("sampling defaults from"), std::string::npos);
}

// Item 4: n choices on completions and chat: with a seed, choice i is what a single request with
// seed + i gives (so they differ); the prompt counts once in usage; streamed chunks carry each
// choice's index and add up to the same texts.
TEST_F(ServerApiTest, SeveralChoicesPerRequest) {
  auto c = text_->client();
  const json base = {{"prompt", "Once upon a time"}, {"max_tokens", 8}, {"temperature", 1.0}, {"ignore_eos", true}};
  std::vector<std::string> single;
  int64_t single_prompt_tokens = 0;
  for (int i = 0; i < 3; ++i) {
    json r = base;
    r["seed"] = 40 + i;
    const json got = post(c, "/v1/completions", r);
    single.push_back(got["choices"][0]["text"]);
    single_prompt_tokens = got["usage"]["prompt_tokens"];
  }
  json many = base;
  many["seed"] = 40;
  many["n"] = 3;
  int st = 0;
  const json got = post(c, "/v1/completions", many, &st);
  ASSERT_EQ(st, 200) << got.dump();
  ASSERT_EQ(got["choices"].size(), 3u) << got.dump();
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(got["choices"][i]["index"], i);
    EXPECT_EQ(got["choices"][i]["text"], single[i]) << i;
  }
  EXPECT_NE(single[0], single[1]);
  EXPECT_EQ(got["usage"]["prompt_tokens"], single_prompt_tokens);
  EXPECT_EQ(got["usage"]["completion_tokens"], 24);
  // Streamed.
  many["stream"] = true;
  many["stream_options"] = {{"include_usage", true}};
  auto res = c.Post("/v1/completions", many.dump(), "application/json");
  ASSERT_TRUE(res);
  std::vector<std::string> streamed(3);
  std::vector<int> finishes(3, 0);
  json usage;
  for (const auto& e : sse_events(res->body)) {
    if (e == "[DONE]") continue;
    const json j = json::parse(e);
    if (j["choices"].empty()) {
      usage = j["usage"];
      continue;
    }
    const int i = j["choices"][0]["index"];
    streamed[i] += j["choices"][0]["text"].get<std::string>();
    if (!j["choices"][0]["finish_reason"].is_null()) ++finishes[i];
  }
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(streamed[i], single[i]) << i;
    EXPECT_EQ(finishes[i], 1) << i;
  }
  EXPECT_EQ(usage["completion_tokens"], 24) << res->body;
  // Chat.
  const json chat = {{"messages", user("Hi")}, {"max_tokens", 6}, {"temperature", 1.0}, {"seed", 9}};
  json chat_n = chat;
  chat_n["n"] = 2;
  const json two = post(c, "/v1/chat/completions", chat_n, &st);
  ASSERT_EQ(st, 200) << two.dump();
  ASSERT_EQ(two["choices"].size(), 2u);
  json second = chat;
  second["seed"] = 10;
  EXPECT_EQ(two["choices"][0]["message"]["content"], post(c, "/v1/chat/completions", chat)["choices"][0]["message"]["content"]);
  EXPECT_EQ(two["choices"][1]["message"]["content"], post(c, "/v1/chat/completions", second)["choices"][0]["message"]["content"]);
  EXPECT_EQ(two["choices"][1]["index"], 1);
}

// Item 4: best_of generates best_of candidates and answers with the n of highest cumulative
// logprob.
TEST_F(ServerApiTest, BestOfReturnsTheMostLikelyCandidate) {
  auto c = text_->client();
  const json base = {{"prompt", "Once upon a time"}, {"max_tokens", 6}, {"temperature", 1.0}, {"ignore_eos", true}};
  std::string best;
  double best_lp = -1e300;
  for (int i = 0; i < 4; ++i) {
    json r = base;
    r["seed"] = 70 + i;
    r["logprobs"] = 0;
    const json got = post(c, "/v1/completions", r);
    double lp = 0;
    for (const json& x : got["choices"][0]["logprobs"]["token_logprobs"]) lp += x.get<double>();
    if (lp > best_lp) {
      best_lp = lp;
      best = got["choices"][0]["text"];
    }
  }
  json r = base;
  r["seed"] = 70;
  r["best_of"] = 4;
  int st = 0;
  const json got = post(c, "/v1/completions", r, &st);
  ASSERT_EQ(st, 200) << got.dump();
  ASSERT_EQ(got["choices"].size(), 1u);
  EXPECT_EQ(got["choices"][0]["text"], best);
  EXPECT_TRUE(got["choices"][0]["logprobs"].is_null());
  EXPECT_EQ(got["usage"]["completion_tokens"], 24);
  r["stream"] = true;
  EXPECT_EQ(post(c, "/v1/completions", r, &st)["error"]["param"], "best_of");
  EXPECT_EQ(st, 400);
}

// Item 4: several prompts in one completions request (strings or token-id lists), choices indexed
// prompt-major; echo puts the prompt before each text.
TEST_F(ServerApiTest, SeveralPromptsAndEcho) {
  auto c = text_->client();
  const json greedy = {{"max_tokens", 5}, {"temperature", 0}, {"ignore_eos", true}};
  auto alone = [&](const json& prompt) {
    json r = greedy;
    r["prompt"] = prompt;
    return post(c, "/v1/completions", r)["choices"][0]["text"].get<std::string>();
  };
  const std::string a = alone("Once upon a time"), b = alone("Hello there");
  json r = greedy;
  r["prompt"] = {"Once upon a time", "Hello there"};
  r["n"] = 2;
  int st = 0;
  json got = post(c, "/v1/completions", r, &st);
  ASSERT_EQ(st, 200) << got.dump();
  ASSERT_EQ(got["choices"].size(), 4u);
  const std::vector<std::string> want = {a, a, b, b};
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(got["choices"][i]["index"], i);
    EXPECT_EQ(got["choices"][i]["text"], want[i]) << i;
  }
  const json ids_a = post(c, "/tokenize", {{"content", "Once upon a time"}})["tokens"];
  const json ids_b = post(c, "/tokenize", {{"content", "Hello there"}})["tokens"];
  r["prompt"] = {ids_b, ids_a};
  r["n"] = 1;
  got = post(c, "/v1/completions", r, &st);
  ASSERT_EQ(st, 200) << got.dump();
  ASSERT_EQ(got["choices"].size(), 2u);
  EXPECT_EQ(got["choices"][0]["text"], b);
  EXPECT_EQ(got["choices"][1]["text"], a);
  json e = greedy;
  e["prompt"] = "Once upon a time";
  e["echo"] = true;
  EXPECT_EQ(post(c, "/v1/completions", e)["choices"][0]["text"], "Once upon a time" + a);
  e["stream"] = true;
  auto res = c.Post("/v1/completions", e.dump(), "application/json");
  ASSERT_TRUE(res);
  std::string text;
  for (const auto& ev : sse_events(res->body))
    if (ev != "[DONE]") text += json::parse(ev)["choices"][0]["text"].get<std::string>();
  EXPECT_EQ(text, "Once upon a time" + a);
  e["prompt"] = json::array({"x", json::array()});
  e["stream"] = false;
  EXPECT_EQ(post(c, "/v1/completions", e, &st)["error"]["param"], "prompt[1]");
  EXPECT_EQ(st, 400);
}

// Item 5: a non-streamed request whose client closes the connection is cancelled at once, not
// run to max_tokens for nobody.
TEST(ServerApiDisconnect, NonStreamedRequestIsCancelledWhenItsClientCloses) {
  test::TempDir dir("lfm_serve_gone");
  test::write_text_model(dir.str());
  ServerProc s(dir.str(), {"--ctx-size", "60000"});
  const std::string body = json{{"prompt", "a"}, {"max_tokens", 59000}, {"ignore_eos", true}}.dump();
  const int fd = test::connect_loopback(s.port());
  ASSERT_GE(fd, 0);
  const std::string req = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " +
                          std::to_string(body.size()) + "\r\n\r\n" + body;
  ASSERT_EQ(::write(fd, req.data(), req.size()), static_cast<ssize_t>(req.size()));
  auto probe = s.client();
  ASSERT_EQ(wait_metric(probe, "lfm:num_requests_running", 1), 1);
  ::close(fd);
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(wait_metric(probe, "lfm:num_requests_running", 0), 0);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 2.0);
  EXPECT_EQ(wait_metric(probe, "lfm:num_requests_cancelled_total", 1), 1);
  EXPECT_EQ(wait_metric(probe, "lfm:kv_blocks_used", 0), 0);
  EXPECT_EQ(probe.Get("/health")->status, 200);
}

}  // namespace
}  // namespace lfm
