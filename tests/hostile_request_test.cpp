// Requests that fail only once they run (issue 55): an error while the scheduler steps one request
// ends that request alone (kError, its blocks freed) and the scheduler goes on; integers near
// 2^63 are refused, not wrapped into a one-token "success". Through the engine, `lfm serve` (other
// clients' streams finish normally beside the bad request) and `lfm generate`.
#include <gtest/gtest.h>

#include <climits>
#include <future>
#include <nlohmann/json.hpp>

#include "core/thread_pool.h"
#include "engine/engine.h"
#include "engine_test_util.h"
#include "grammar/grammar.h"
#include "model_test_util.h"
#include "server_test_util.h"
#include "test_backends.h"
#include "test_util.h"
#include "tokenizer/load_tokenizer.h"
#include "tokenizer/tokenizer.h"

namespace lfm {
namespace {

using json = nlohmann::json;

// A grammar that compiles and whose first tokens are fine, but whose parser-state set explodes
// only after 64 forced bytes: 18 levels of two alternatives, each calling the next level, give
// 2^18 distinct return paths, past the matcher's bound of 100,000 states a step. No token of the
// vocabulary spans the 64 bytes, so only jump-forward's look at the forced text reaches them.
std::string late_exploding_grammar() {
  std::string g = "root ::= \"" + std::string(64, 'a') + "\" r0\n";
  for (int i = 0; i < 18; ++i)
    g += "r" + std::to_string(i) + " ::= r" + std::to_string(i + 1) + " \"a\" | r" + std::to_string(i + 1) + " \"b\"\n";
  return g + "r18 ::= \"c\"\n";
}

class HostileRequestTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new test::TempDir("lfm_hostile_request");
    test::write_text_model(dir_->str());
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  void SetUp() override {
    LoadOptions load;
    std::string why;
    backend_ = test::make_named_backend("cpu", pool_, load, &why);
    ASSERT_TRUE(backend_) << why;
    model_ = load_model(dir_->str(), load);
    tok_ = load_tokenizer(dir_->str());
  }
  EngineOptions options() const {
    EngineOptions o;
    o.state.ctx_size = 256;
    o.state.parallel = 4;
    o.state.type = DType::F32;
    o.state.draft_tokens = 8;  // room for jump-forward
    return o;
  }
  Request request(const std::string& prompt, int64_t n) const {
    Request r;
    r.prompt = tok_->encode(prompt, false);
    r.max_tokens = n;
    r.ignore_eos = true;
    return r;
  }

  static test::TempDir* dir_;
  ThreadPool pool_{2};
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<Tokenizer> tok_;
};
test::TempDir* HostileRequestTest::dir_ = nullptr;

TEST_F(HostileRequestTest, GrammarExplodingAfterForcedTextEndsOnlyItsRequest) {
  Engine e(*model_, *backend_, tok_.get(), options());
  auto bad_grammar = e.compile_grammar(grammar::parse_gbnf(late_exploding_grammar()));
  // Neighbours: two plain requests and one under a harmless grammar with jump-forward.
  auto plain = e.submit(request("The weather today is", 24));
  Request bad = request("Say a", 40);
  bad.grammar = bad_grammar;
  auto bad_stream = e.submit(bad);
  Request fine = request("Say b", 24);
  fine.grammar = e.compile_grammar(grammar::parse_gbnf("root ::= \"{\\\"k\\\": \" [0-9]+ \"}\""));
  auto fine_stream = e.submit(fine);
  auto other = e.submit(request("Once upon a time", 24));

  const test::Result b = test::collect(*bad_stream);
  EXPECT_EQ(b.finish, FinishReason::kError);
  EXPECT_NE(b.error.find("too ambiguous"), std::string::npos) << b.error;
  EXPECT_EQ(test::collect(*plain).finish, FinishReason::kLength);
  EXPECT_EQ(test::collect(*other).finish, FinishReason::kLength);
  const test::Result f = test::collect(*fine_stream);
  EXPECT_TRUE(f.finish == FinishReason::kStop || f.finish == FinishReason::kLength) << f.error;
  // The scheduler goes on, and the failed request's blocks came back.
  EXPECT_EQ(test::collect(*e.submit(request("Again", 8))).finish, FinishReason::kLength);
  e.wait_idle();
  const EngineStats st = e.stats();
  EXPECT_EQ(st.failed, 1);
  EXPECT_EQ(st.cache.blocks_used, 0);
  EXPECT_EQ(st.cache.slots_used, 0);
}

TEST_F(HostileRequestTest, MaxTokensNearInt64MaxIsRefusedNotWrapped) {
  Engine e(*model_, *backend_, tok_.get(), options());
  for (int64_t n : {INT64_MAX, INT64_MAX - 1, INT64_MAX - 3}) {
    try {
      e.submit(request("Hello", n));
      ADD_FAILURE() << "max_tokens " << n << " was accepted";
    } catch (const Error& err) {
      EXPECT_NE(std::string(err.what()).find("max_tokens"), std::string::npos) << err.what();
    }
  }
  // The largest that fits still runs to the context's end.
  const Request fits = request("Hello", 256 - static_cast<int64_t>(tok_->encode("Hello", false).size()));
  EXPECT_EQ(test::collect(*e.submit(fits)).finish, FinishReason::kLength);
}

// `lfm serve`: the bad request is refused (an error event when streamed, a 400 when not) while
// the other clients' streams, started before it, finish normally; the server answers after.
TEST(HostileRequestServer, BadRequestsEndAloneWhileOtherStreamsFinish) {
  test::TempDir dir("lfm_hostile_request_serve");
  test::write_text_model(dir.str());
  test::ServerProc server(dir.str(), {"--parallel", "4", "--ctx-size", "512"});
  auto stream_chat = [&](const std::string& content) {
    auto c = server.client();
    json body = {{"messages", json::array({{{"role", "user"}, {"content", content}}})},
                 {"max_tokens", 48}, {"temperature", 0}, {"ignore_eos", true}, {"stream", true}};
    auto res = c.Post("/v1/chat/completions", body.dump(), "application/json");
    return res ? res->body : std::string("no response");
  };
  // Every chunk without an error, one with a finish reason, then [DONE].
  auto finished_normally = [](const std::string& body) {
    const std::vector<std::string> ev = test::sse_events(body);
    if (ev.size() < 2 || ev.back() != "[DONE]") return false;
    bool finished = false;
    for (size_t i = 0; i + 1 < ev.size(); ++i) {
      const json j = json::parse(ev[i]);
      if (j.contains("error")) return false;
      if (j.contains("choices") && !j["choices"].empty() && !j["choices"][0].value("finish_reason", json()).is_null())
        finished = true;
    }
    return finished;
  };
  auto a = std::async(std::launch::async, stream_chat, "Tell me about Paris.");
  auto b = std::async(std::launch::async, stream_chat, "Tell me about Rome.");
  auto c = server.client();
  int st = 0;
  // Class 1: a grammar that fails after its forced text; whole and streamed.
  json bad = {{"messages", json::array({{{"role", "user"}, {"content", "Say a"}}})},
              {"max_tokens", 40}, {"temperature", 0}, {"grammar", late_exploding_grammar()}};
  json r = test::post(c, "/v1/chat/completions", bad, &st);
  EXPECT_EQ(st, 400) << r.dump();
  EXPECT_NE(r.dump().find("too ambiguous"), std::string::npos) << r.dump();
  bad["stream"] = true;
  auto res = c.Post("/v1/chat/completions", bad.dump(), "application/json");
  ASSERT_TRUE(res);
  const std::vector<std::string> ev = test::sse_events(res->body);
  ASSERT_FALSE(ev.empty()) << res->body;
  EXPECT_NE(res->body.find("too ambiguous"), std::string::npos) << res->body;
  // Class 5: max_tokens near 2^63, chat and completions.
  for (const char* path : {"/v1/chat/completions", "/v1/completions"}) {
    for (int64_t n : {INT64_MAX, INT64_MAX - 2}) {
      json body = {{"max_tokens", n}, {"temperature", 0}};
      if (std::string(path) == "/v1/completions")
        body["prompt"] = "Hello";
      else
        body["messages"] = json::array({{{"role", "user"}, {"content", "Hello"}}});
      r = test::post(c, path, body, &st);
      EXPECT_EQ(st, 400) << path << " " << r.dump();
      EXPECT_EQ(r["error"]["param"], "max_tokens") << r.dump();
    }
  }
  EXPECT_TRUE(finished_normally(a.get()));
  EXPECT_TRUE(finished_normally(b.get()));
  EXPECT_EQ(c.Get("/health")->status, 200);
  EXPECT_TRUE(finished_normally(stream_chat("And Berlin?")));
}

// `lfm generate`: an error, named, and exit status 1 (not an abort); -n near 2^63 is refused.
TEST(HostileRequestCli, BadGrammarAndHugeMaxNewTokensAreErrors) {
  test::TempDir dir("lfm_hostile_request_cli");
  test::write_text_model(dir.str());
  const std::string gbnf = dir.write("late.gbnf", late_exploding_grammar());
  test::RunResult r = test::run_lfm("generate -m " + dir.str() + " -p 'Say a' -n 40 --ignore-eos --grammar " + gbnf);
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("too ambiguous"), std::string::npos) << r.out;
  r = test::run_lfm("generate -m " + dir.str() + " -p Hello -n 9223372036854775807");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("max_tokens"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace lfm
