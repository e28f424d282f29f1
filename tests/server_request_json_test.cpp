// How `lfm serve` parses request JSON (issue 55 class 3, issue 56 item 2): once, in the client's
// key order, in linear time. A json_schema's properties and a strict tool's parameters come out
// in the order the client wrote them; one object of 200k keys (a few MB) anywhere in a body — a
// schema, tools, chat_template_kwargs, tool-call arguments, the top level — is a 400 naming the
// field, at once (it took minutes when parts of the body were re-parsed into ordered_json), while
// another client's stream finishes normally.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "server_test_util.h"

namespace lfm {
namespace {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;
using test::ServerProc;
using test::sse_events;

class ServerRequestJsonTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new test::TempDir("lfm_serve_request_json");
    test::write_text_model(dir_->str());
    server_ = new ServerProc(dir_->str(), {"--parallel", "4", "--ctx-size", "512"});
  }
  static void TearDownTestSuite() {
    delete server_;
    delete dir_;
  }
  // POSTs `body` as written (key order included) to /v1/chat/completions.
  static json post_text(const std::string& body, int* status) {
    auto c = server_->client();
    auto r = c.Post("/v1/chat/completions", body, "application/json");
    if (!r) throw std::runtime_error("no response");
    *status = r->status;
    return json::parse(r->body);
  }
  static test::TempDir* dir_;
  static ServerProc* server_;
};
test::TempDir* ServerRequestJsonTest::dir_ = nullptr;
ServerProc* ServerRequestJsonTest::server_ = nullptr;

// Properties written zeta first: alphabetical order would put alpha first.
const char* kZetaAlpha =
    R"({"type": "object", "properties": {"zeta": {"type": "integer", "minimum": 0, "maximum": 9},
        "alpha": {"type": "integer", "minimum": 0, "maximum": 9}}, "required": ["zeta", "alpha"],
        "additionalProperties": false})";

std::vector<std::string> keys_of(const std::string& text) {
  std::vector<std::string> keys;
  const ojson j = ojson::parse(text);
  for (auto it = j.begin(); it != j.end(); ++it) keys.push_back(it.key());
  return keys;
}

TEST_F(ServerRequestJsonTest, SchemaAndStrictToolPropertiesKeepTheClientsOrder) {
  const std::vector<std::string> want = {"zeta", "alpha"};
  const std::string user = R"("messages": [{"role": "user", "content": "Numbers?"}], "temperature": 1, "max_tokens": 60)";
  for (int seed = 0; seed < 3; ++seed) {
    int st = 0;
    const json r = post_text(R"({"response_format": {"type": "json_schema", "json_schema": {"name": "z", "strict": true,
        "schema": )" + std::string(kZetaAlpha) + "}}, " + user + R"(, "seed": )" + std::to_string(seed) + "}",
                             &st);
    ASSERT_EQ(st, 200) << r.dump();
    const std::string content = r.at("choices").at(0).at("message").at("content");
    EXPECT_EQ(keys_of(content), want) << content;

    const json t = post_text(R"({"tools": [{"type": "function", "function": {"name": "pair", "strict": true,
        "parameters": )" + std::string(kZetaAlpha) + R"(}}], "tool_choice": "required", )" + user +
                                 R"(, "seed": )" + std::to_string(seed) + "}",
                             &st);
    ASSERT_EQ(st, 200) << t.dump();
    const json& msg = t.at("choices").at(0).at("message");
    ASSERT_TRUE(msg.contains("tool_calls")) << t.dump();
    const json& calls = msg["tool_calls"];
    ASSERT_GE(calls.size(), 1u) << t.dump();
    const std::string args = calls[0]["function"]["arguments"];
    EXPECT_EQ(keys_of(args), want) << args;
  }
}

// Every parameter of a strict tool resolves $refs into the parameters' $defs (lent to each
// parameter's schema in turn, not copied per parameter).
TEST_F(ServerRequestJsonTest, StrictToolParametersEachResolveTheSharedDefs) {
  int st = 0;
  const json t = post_text(R"({"tools": [{"type": "function", "function": {"name": "pair", "strict": true,
      "parameters": {"type": "object", "$defs": {"digit": {"type": "integer", "minimum": 0, "maximum": 9}},
        "properties": {"zeta": {"$ref": "#/$defs/digit"}, "alpha": {"$ref": "#/$defs/digit"}},
        "required": ["zeta", "alpha"], "additionalProperties": false}}}],
      "tool_choice": "required", "messages": [{"role": "user", "content": "Digits?"}], "temperature": 1,
      "max_tokens": 60, "seed": 1})",
                           &st);
  ASSERT_EQ(st, 200) << t.dump();
  const json& msg = t.at("choices").at(0).at("message");
  ASSERT_TRUE(msg.contains("tool_calls")) << t.dump();
  const std::string args = msg["tool_calls"].at(0).at("function").at("arguments");
  EXPECT_EQ(keys_of(args), (std::vector<std::string>{"zeta", "alpha"})) << args;
  const json parsed = json::parse(args);
  for (const auto& [k, v] : parsed.items()) EXPECT_TRUE(v.is_number_integer() && v >= 0 && v <= 9) << args;
}

// {"k0": 0, "k1": 0, …}: n keys, about 12 bytes each.
std::string big_object(size_t n) {
  std::string s = "{";
  for (size_t i = 0; i < n; ++i) s += (i ? ", \"k" : "\"k") + std::to_string(i) + "\": 0";
  return s + "}";
}

TEST_F(ServerRequestJsonTest, ObjectsWithTooManyKeysAre400sNamingTheFieldWhileOthersStream) {
  // Another client's stream runs through every refusal below. Greedy: a chat turn also stops at
  // <|im_end|> whatever ignore_eos says, and sampled at temperature 1 the random model draws it
  // now and then (a "stop" instead of "length", seen once in a sanitizer run).
  std::string streamed;
  std::thread other([&] {
    auto c = server_->client();
    const json body = {{"messages", json::array({{{"role", "user"}, {"content", "Hello"}}})},
                       {"stream", true},
                       {"max_tokens", 200},
                       {"temperature", 0},
                       {"ignore_eos", true}};
    auto r = c.Post("/v1/chat/completions", body.dump(), "application/json");
    if (r) streamed = r->body;
  });
  struct Join {
    std::thread& t;
    ~Join() {  // also when a refusal below throws ("no response")
      if (t.joinable()) t.join();
    }
  } join{other};
  const std::string big = big_object(200000);
  const std::string msgs = R"("messages": [{"role": "user", "content": "hi"}])";
  std::string escaped;  // the object as a JSON string (tool-call arguments are usually sent so)
  for (char ch : big) escaped += ch == '"' ? std::string("\\\"") : std::string(1, ch);
  struct Case {
    std::string body, param;
  };
  const std::string call_prefix = R"({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant",
      "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": )";
  const Case cases[] = {
      {R"({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object",
          "properties": )" + big + "}}}, " + msgs + "}",
       "response_format.json_schema.schema.properties"},
      {R"({"tools": [{"type": "function", "function": {"name": "f", "strict": true, "parameters": {"type": "object",
          "properties": )" + big + "}}}], " + msgs + "}",
       "tools[0].function.parameters.properties"},
      {R"({"chat_template_kwargs": )" + big + ", " + msgs + "}", "chat_template_kwargs"},
      {call_prefix + big + R"(}}]}, {"role": "user", "content": "ok"}]})",
       "messages[1].tool_calls[0].function.arguments"},
      {call_prefix + "\"" + escaped + R"("}}]}, {"role": "user", "content": "ok"}]})",
       "messages[1].tool_calls[0].function.arguments"},
      {big.substr(0, big.size() - 1) + ", " + msgs + "}", ""},
  };
  for (const Case& c : cases) {
    ASSERT_LT(c.body.size(), 8u << 20);  // under --max-body: the JSON is what is refused
    int st = 0;
    const json r = post_text(c.body, &st);
    EXPECT_EQ(st, 400) << c.param << ": " << r.dump().substr(0, 300);
    const std::string msg = r["error"]["message"];
    EXPECT_NE(msg.find("has more than 10000 keys (limit 10000)"), std::string::npos) << msg;
    if (c.param.empty()) {
      EXPECT_TRUE(r["error"]["param"].is_null()) << r.dump();
      EXPECT_NE(msg.find("the top-level object"), std::string::npos) << msg;
    } else {
      EXPECT_EQ(r["error"]["param"], c.param) << msg;
      EXPECT_NE(msg.find("'" + c.param + "'"), std::string::npos) << msg;
    }
  }
  // At the cap, an object is taken: 10000 template variables render.
  int st = 0;
  const json ok = post_text(R"({"chat_template_kwargs": )" + big_object(10000) + ", " + msgs + R"(, "max_tokens": 2})", &st);
  EXPECT_EQ(st, 200) << ok.dump().substr(0, 300);
  other.join();
  const std::vector<std::string> events = sse_events(streamed);
  ASSERT_GE(events.size(), 2u) << streamed.substr(0, 300);
  EXPECT_EQ(events.back(), "[DONE]");
  EXPECT_EQ(json::parse(events[events.size() - 2])["choices"][0]["finish_reason"], "length") << streamed.substr(0, 300);
}

}  // namespace
}  // namespace lfm
