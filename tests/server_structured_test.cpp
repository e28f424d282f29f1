// `lfm serve` structured output (issue 38): response_format json_object / json_schema, the lfm
// "grammar" and "regex" fields, strict tools and forced tool choices on the random text model at
// temperature 1 (every output must parse and validate), and 400s naming the offending field and
// schema path. The official openai client's response_format and strict tools are in
// server_test.cpp (OfficialOpenAiClient).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include "std_regex.h"

#include "grammar/grammar.h"
#include "schema_oracle.h"
#include "server_test_util.h"

namespace lfm {
namespace {

using json = nlohmann::json;
using test::post;
using test::ServerProc;
using test::sse_events;

class ServerStructuredTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new test::TempDir("lfm_serve_structured");
    test::write_text_model(dir_->str());
    server_ = new ServerProc(dir_->str(), {"--parallel", "4", "--ctx-size", "512"});
  }
  static void TearDownTestSuite() {
    delete server_;
    delete dir_;
  }
  static json chat(const json& extra, int* status, int seed) {
    json body = {{"messages", json::array({{{"role", "user"}, {"content", "Tell me about Paris."}}})},
                 {"temperature", 1},
                 {"seed", seed},
                 {"max_tokens", 120}};
    body.update(extra);
    auto c = server_->client();
    return post(c, "/v1/chat/completions", body, status);
  }
  static test::TempDir* dir_;
  static ServerProc* server_;
};
test::TempDir* ServerStructuredTest::dir_ = nullptr;
ServerProc* ServerStructuredTest::server_ = nullptr;

const json kPerson = json::parse(R"({
  "type": "object",
  "properties": {
    "name": {"type": "string", "minLength": 1, "maxLength": 10},
    "age": {"type": "integer", "minimum": 0, "maximum": 99},
    "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 2},
    "email": {"type": ["string", "null"], "maxLength": 8}
  },
  "required": ["name", "age", "tags"],
  "additionalProperties": false
})");

void expect_person(const json& p) {
  ASSERT_TRUE(p.is_object()) << p.dump();
  const std::string name = p.at("name");
  EXPECT_TRUE(!name.empty() && name.size() <= 40) << p.dump();  // 10 characters, up to 4 bytes each
  EXPECT_TRUE(p.at("age").is_number_integer() && p["age"] >= 0 && p["age"] <= 99) << p.dump();
  ASSERT_TRUE(p.at("tags").is_array() && p["tags"].size() <= 2) << p.dump();
  for (const auto& t : p["tags"]) EXPECT_TRUE(t == "a" || t == "b") << p.dump();
  if (p.contains("email")) {
    EXPECT_TRUE(p["email"].is_null() || p["email"].is_string()) << p.dump();
  }
  for (const auto& [k, v] : p.items()) EXPECT_TRUE(k == "name" || k == "age" || k == "tags" || k == "email") << k;
}

TEST_F(ServerStructuredTest, JsonSchemaOutputsAlwaysValidate) {
  for (int seed = 0; seed < 6; ++seed) {
    int st = 0;
    const json r = chat({{"response_format", {{"type", "json_schema"},
                                               {"json_schema", {{"name", "person"}, {"schema", kPerson}, {"strict", true}}}}}},
                        &st, seed);
    ASSERT_EQ(st, 200) << r.dump();
    EXPECT_EQ(r["choices"][0]["finish_reason"], "stop") << r.dump();
    expect_person(json::parse(r["choices"][0]["message"]["content"].get<std::string>()));
  }
}

TEST_F(ServerStructuredTest, JsonObjectGrammarAndRegexStreamedAndWhole) {
  for (int seed = 0; seed < 3; ++seed) {
    int st = 0;
    json r = chat({{"response_format", {{"type", "json_object"}}}, {"max_tokens", 200}}, &st, seed);
    ASSERT_EQ(st, 200) << r.dump();
    const std::string text = r["choices"][0]["message"]["content"];
    if (r["choices"][0]["finish_reason"] == "stop") {
      EXPECT_EQ(test::invalid_texts({{"type", "object"}}, {text}), "") << text;
    }
    r = chat({{"regex", "(yes|no), [0-9]{1,3}!"}}, &st, seed);
    ASSERT_EQ(st, 200) << r.dump();
    EXPECT_TRUE(std::regex_match(r["choices"][0]["message"]["content"].get<std::string>(),
                                 std::regex("(yes|no), [0-9]{1,3}!")))
        << r.dump();
  }
  // A GBNF grammar through completions, streamed.
  auto c = server_->client();
  httplib::Headers h;
  const json body = {{"prompt", "x ="}, {"max_tokens", 60}, {"temperature", 1}, {"seed", 9}, {"stream", true},
                     {"grammar", "root ::= \"(\" [0-9]+ ( [-+*] [0-9]+ )* \")\""}};
  auto res = c.Post("/v1/completions", h, body.dump(), "application/json");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  std::string text, finish;
  for (const std::string& e : sse_events(res->body)) {
    if (e == "[DONE]") break;
    const json j = json::parse(e);
    text += j["choices"][0]["text"].get<std::string>();
    if (!j["choices"][0]["finish_reason"].is_null()) finish = j["choices"][0]["finish_reason"];
  }
  if (finish == "stop") {
    EXPECT_TRUE(std::regex_match(text, std::regex("\\([0-9]+([-+*][0-9]+)*\\)"))) << text;
  }
  else EXPECT_TRUE(std::regex_match(text, std::regex("\\([0-9]+([-+*][0-9]+)*[-+*]?"))) << text;
}

TEST_F(ServerStructuredTest, StrictToolsAndForcedChoicesGiveCallsThatParse) {
  const json tools = json::array({
      {{"type", "function"}, {"function", {{"name", "get_weather"}, {"strict", true}, {"parameters", {
          {"type", "object"}, {"additionalProperties", false}, {"required", {"city", "days"}},
          {"properties", {{"city", {{"type", "string"}, {"maxLength", 12}}},
                          {"days", {{"type", "integer"}, {"minimum", 1}, {"maximum", 7}}},
                          {"units", {{"enum", {"c", "f"}}}}}}}}}}},
      {{"type", "function"}, {"function", {{"name", "ping"}, {"strict", true},
                                           {"parameters", {{"type", "object"}, {"properties", json::object()}}}}}}});
  auto check_call = [](const json& call) {
    const std::string name = call["function"]["name"];
    const json args = json::parse(call["function"]["arguments"].get<std::string>());
    if (name == "ping") {
      EXPECT_TRUE(args.empty()) << args.dump();
      return;
    }
    ASSERT_EQ(name, "get_weather");
    EXPECT_TRUE(args.at("city").is_string()) << args.dump();
    EXPECT_TRUE(args.at("days").is_number_integer() && args["days"] >= 1 && args["days"] <= 7) << args.dump();
    if (args.contains("units")) {
      EXPECT_TRUE(args["units"] == "c" || args["units"] == "f") << args.dump();
    }
  };
  for (const json& choice : {json("required"), json{{"type", "function"}, {"function", {{"name", "get_weather"}}}}}) {
    for (int seed = 0; seed < 4; ++seed) {
      int st = 0;
      const json r = chat({{"tools", tools}, {"tool_choice", choice}}, &st, seed);
      ASSERT_EQ(st, 200) << r.dump();
      EXPECT_EQ(r["choices"][0]["finish_reason"], "tool_calls") << r.dump();
      const json& calls = r["choices"][0]["message"]["tool_calls"];
      ASSERT_GE(calls.size(), 1u) << r.dump();
      for (const auto& call : calls) check_call(call);
      if (choice.is_object()) {
        EXPECT_EQ(calls[0]["function"]["name"], "get_weather");
      }
    }
  }
  // auto with strict tools: either text or calls that parse.
  for (int seed = 0; seed < 4; ++seed) {
    int st = 0;
    const json r = chat({{"tools", tools}, {"tool_choice", "auto"}, {"max_tokens", 40}}, &st, seed);
    ASSERT_EQ(st, 200) << r.dump();
    if (r["choices"][0]["message"].contains("tool_calls"))
      for (const auto& call : r["choices"][0]["message"]["tool_calls"]) check_call(call);
  }
}

TEST_F(ServerStructuredTest, BadSchemasAndGrammarsAre400sNamingTheProblem) {
  int st = 0;
  json r = chat({{"response_format", {{"type", "json_schema"},
                                       {"json_schema", {{"name", "x"}, {"schema", {{"type", "object"}, {"properties",
                                           {{"age", {{"type", "integer"}, {"minimum", "ten"}}}}}}}}}}}},
                &st, 0);
  EXPECT_EQ(st, 400);
  EXPECT_EQ(r["error"]["param"], "response_format.json_schema.schema") << r.dump();
  EXPECT_NE(r["error"]["message"].get<std::string>().find("/properties/age/minimum"), std::string::npos) << r.dump();
  r = chat({{"grammar", "root ::= \"a\" undefined-rule"}}, &st, 0);
  EXPECT_EQ(st, 400);
  EXPECT_EQ(r["error"]["param"], "grammar");
  EXPECT_NE(r["error"]["message"].get<std::string>().find("undefined-rule"), std::string::npos) << r.dump();
  r = chat({{"regex", "(a"}}, &st, 0);
  EXPECT_EQ(st, 400);
  EXPECT_EQ(r["error"]["param"], "regex");
  r = chat({{"response_format", {{"type", "yaml"}}}}, &st, 0);
  EXPECT_EQ(st, 400);
  EXPECT_EQ(r["error"]["param"], "response_format.type");
  r = chat({{"response_format", {{"type", "json_object"}}}, {"regex", "a"}}, &st, 0);
  EXPECT_EQ(st, 400);
  auto c = server_->client();
  EXPECT_EQ(c.Get("/health")->status, 200);
}

}  // namespace
}  // namespace lfm
