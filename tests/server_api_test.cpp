// `lfm serve`: the surface clients hit beyond the basics of server_test.cpp (issue 38, point 4):
// special tokens kept out of content, sampling defaults from generation_config.json, several
// choices and prompts per request, disconnects of non-streamed requests, logprob bytes, error
// codes, model ids, CORS, the access log, and gauges that move as soon as work is admitted.
#include <gtest/gtest.h>

#include <chrono>
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
  EXPECT_EQ(wait_metric(probe, "lfm:num_requests_cancelled", 1), 1);
  EXPECT_EQ(wait_metric(probe, "lfm:kv_blocks_used", 0), 0);
  EXPECT_EQ(probe.Get("/health")->status, 200);
}

}  // namespace
}  // namespace lfm
