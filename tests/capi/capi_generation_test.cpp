// The C API's API level 2 generation features through liblfm.so: structured output (JSON
// schema, JSON object, GBNF, regex) and its refusals, speculative decoding (prompt lookup and a
// draft model: greedy tokens unchanged, usage counted), the chat reply parsed into an OpenAI
// assistant message (reasoning, content, tool calls, tool_choice), logit bias, top logprobs, and
// callers compiled against the level 1 header (smaller structs) still served.
#include <algorithm>
#include <gtest/gtest.h>
#include <lfm/lfm.h>

#include <chrono>
#include <cstddef>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "capi_test_util.h"

namespace {

using namespace lfm_capi_test;
using json = nlohmann::json;

// The fixture's reference prompt and greedy tokens (transformers').
std::pair<std::vector<int32_t>, std::vector<int32_t>> reference() {
  std::ifstream f(kFixture + "/reference.json");
  const json run = json::parse(f)["greedy"]["runs"][0];
  return {run["prompt"].get<std::vector<int32_t>>(), run["new_tokens"].get<std::vector<int32_t>>()};
}

lfm_engine* make_engine(lfm_model* m, const char* draft_model = nullptr, int64_t draft_tokens = 8,
                        lfm_status expect = LFM_OK) {
  lfm_engine_options o;
  lfm_engine_options_init(&o);
  o.ctx_size = 512;
  o.parallel = 2;
  o.draft_model = draft_model;
  o.draft_tokens = draft_tokens;
  lfm_engine* e = nullptr;
  EXPECT_EQ(lfm_engine_create(m, &o, &e), expect) << lfm_last_error();
  return e;
}

lfm_prompt chat_prompt(const char* messages, const char* tools = nullptr) {
  lfm_prompt p;
  lfm_prompt_init(&p);
  p.messages_json = messages;
  p.tools_json = tools;
  return p;
}

const char* kUser = R"([{"role": "user", "content": "Describe a person."}])";

TEST(CApiStructured, SchemaObjectGrammarAndRegexConstrainTheOutput) {
  Model model(text_model());
  Engine eng(model.m);
  const lfm_prompt p = chat_prompt(kUser);
  lfm_sampling_params sp = greedy_params(96, /*ignore_eos=*/false);
  sp.json_schema = R"({"type": "object", "properties": {"name": {"type": "string", "maxLength": 6},
                       "age": {"type": "integer", "minimum": 0, "maximum": 99}}, "required": ["name", "age"],
                       "additionalProperties": false})";
  Outcome o = run(eng.e, p, &sp);
  ASSERT_EQ(o.status, LFM_OK) << o.error;
  EXPECT_EQ(o.done.finish_reason, LFM_FINISH_STOP) << o.text;
  const json doc = json::parse(o.text);  // complete JSON, in the schema's property order
  ASSERT_TRUE(doc.is_object()) << o.text;
  EXPECT_TRUE(doc["name"].is_string() && doc["age"].is_number_integer()) << o.text;
  EXPECT_EQ(o.text.rfind("{\"name\":", 0), 0u) << o.text;
  // Jump-forward drafts the text the schema forces ({"name":" …): the same tokens without it.
  EXPECT_GT(o.done.drafted_tokens, 0);
  sp.no_jump_forward = 1;
  const Outcome plain = run(eng.e, p, &sp);
  EXPECT_EQ(plain.tokens, o.tokens);
  EXPECT_EQ(plain.done.drafted_tokens, 0);

  sp = greedy_params(24, false);
  sp.grammar = "root ::= \"yes\" | \"no\"";
  o = run(eng.e, p, &sp);
  ASSERT_EQ(o.status, LFM_OK) << o.error;
  EXPECT_TRUE(o.text == "yes" || o.text == "no") << o.text;
  EXPECT_EQ(o.done.finish_reason, LFM_FINISH_STOP);

  sp = greedy_params(24, false);
  sp.regex = "[0-9]{3}-[a-z]{2}";
  o = run(eng.e, p, &sp);
  ASSERT_EQ(o.status, LFM_OK) << o.error;
  ASSERT_EQ(o.text.size(), 6u) << o.text;
  EXPECT_TRUE(std::isdigit(static_cast<unsigned char>(o.text[0])) && o.text[3] == '-') << o.text;

  sp = greedy_params(48, false);
  sp.json_object = 1;
  o = run(eng.e, p, &sp);
  ASSERT_EQ(o.status, LFM_OK) << o.error;
  EXPECT_EQ(o.text.rfind("{", 0), 0u) << o.text;
  if (o.done.finish_reason == LFM_FINISH_STOP) {
    EXPECT_TRUE(json::parse(o.text).is_object()) << o.text;
  }
}

TEST(CApiStructured, BadSchemasGrammarsAndCombinationsAreRefused) {
  Model model(text_model());
  Engine eng(model.m);
  const lfm_prompt p = chat_prompt(kUser);
  std::string huge_schema = R"({"type": "object", "properties": {)";
  for (int i = 0; i < 200000; ++i) huge_schema += (i ? ", \"k" : "\"k") + std::to_string(i) + "\": {}";
  huge_schema += "}}";
  struct Case {
    const char* schema;
    const char* grammar;
    const char* regex;
    int32_t json_object;
    const char* says;
  };
  const Case cases[] = {
      {"{\"type\": ", nullptr, nullptr, 0, "json_schema is not valid JSON"},
      {R"({"type": "object", "properties": {"a": {"$ref": "#/$defs/missing"}}})", nullptr, nullptr, 0, "json_schema"},
      {R"({"type": "string", "not": {"const": "x"}})", nullptr, nullptr, 0, "json_schema"},  // strict below
      {nullptr, "root ::= (", nullptr, 0, "grammar"},
      {nullptr, "root ::= undefined-rule", nullptr, 0, "undefined-rule"},
      {nullptr, nullptr, "(unclosed", 0, "regex"},
      {R"({"type": "object"})", "root ::= \"x\"", nullptr, 0, "at most one"},
      {nullptr, nullptr, "a+", 1, "at most one"},
      // Issue 55 class 3: one object beyond the cap (200k keys), refused before the parse grows.
      {huge_schema.c_str(), nullptr, nullptr, 0,
       "lfm_sampling_params.json_schema: 'properties' has more than 10000 keys (limit 10000)"},
  };
  for (size_t i = 0; i < std::size(cases); ++i) {
    const Case& c = cases[i];
    lfm_sampling_params sp = greedy_params(8);
    sp.json_schema = c.schema;
    sp.schema_strict = i == 2;
    sp.grammar = c.grammar;
    sp.regex = c.regex;
    sp.json_object = c.json_object;
    const Outcome o = run(eng.e, p, &sp);
    EXPECT_EQ(o.status, LFM_ERR_INVALID_ARGUMENT) << i;
    EXPECT_NE(o.error.find(c.says), std::string::npos) << i << ": " << o.error;
  }
  // A model without a tokenizer cannot constrain text.
  Model ids_only(kFixture);
  Engine e2(ids_only.m);
  lfm_sampling_params sp = greedy_params(4);
  sp.json_object = 1;
  const Outcome o = run(e2.e, ids_prompt({1, 2, 3}), &sp);
  EXPECT_EQ(o.status, LFM_ERR_UNSUPPORTED);
  EXPECT_NE(o.error.find("tokenizer"), std::string::npos) << o.error;
}

// Inputs whose compile used to expand without bound (issue 55): refused by the compile budget,
// naming the field, in moments rather than minutes.
TEST(CApiStructured, HostileSchemasRegexesAndGrammarsAreRefusedByTheBudget) {
  Model model(text_model());
  Engine eng(model.m);
  const lfm_prompt p = chat_prompt(kUser);
  json defs = json::object();  // 25 levels of allOf: [$ref next, $ref next]: 2^25 merges
  for (int i = 0; i < 25; ++i) {
    const std::string next = "#/$defs/a" + std::to_string(i + 1);
    defs["a" + std::to_string(i)] = {{"allOf", {{{"$ref", next}}, {{"$ref", next}}}}};
  }
  defs["a25"] = {{"type", "string"}};
  const std::string schema = json{{"$defs", defs}, {"$ref", "#/$defs/a0"}}.dump();
  const struct {
    const char* schema;
    const char* grammar;
    const char* regex;
    const char* says;
  } cases[] = {
      {schema.c_str(), nullptr, nullptr, "lfm_sampling_params.json_schema: json schema"},
      {nullptr, "root ::= (\"a\"{9999}){9999}", nullptr, "lfm_sampling_params.grammar: grammar"},
      {nullptr, nullptr, "(a{9999}){9999}", "lfm_sampling_params.regex: grammar"},
  };
#if defined(__SANITIZE_ADDRESS__)
  const double bound_s = 60;  // the default budget's 50 M steps run ~10x slower under ASan at -O1
#else
  const double bound_s = 10;  // the unbounded compiles ran for minutes
#endif
  for (const auto& c : cases) {
    lfm_sampling_params sp = greedy_params(4);
    sp.json_schema = c.schema;
    sp.grammar = c.grammar;
    sp.regex = c.regex;
    const auto t0 = std::chrono::steady_clock::now();
    const Outcome o = run(eng.e, p, &sp);
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), bound_s) << c.says;
    EXPECT_EQ(o.status, LFM_ERR_INVALID_ARGUMENT) << c.says;
    EXPECT_NE(o.error.find(c.says), std::string::npos) << o.error;
  }
}

TEST(CApiSpeculative, GreedyTokensAreTheSameWithNgramAndModelDrafts) {
  const auto [prompt, expected] = reference();
  Model model(kFixture);
  // The model drafting for itself: every draft is the target's own greedy choice.
  lfm_engine* e = make_engine(model.m, kFixture.c_str());
  ASSERT_NE(e, nullptr);
  const lfm_prompt p = ids_prompt(prompt);
  lfm_sampling_params sp = greedy_params(static_cast<int64_t>(expected.size()));
  const Outcome plain = run(e, p, &sp);
  ASSERT_EQ(plain.status, LFM_OK) << plain.error;
  EXPECT_EQ(plain.tokens, expected);
  EXPECT_EQ(plain.done.drafted_tokens, 0);
  for (int32_t drafter : {LFM_DRAFTER_NGRAM, LFM_DRAFTER_MODEL}) {
    sp.drafter = drafter;
    sp.max_drafts = 4;
    const Outcome o = run(e, p, &sp);
    ASSERT_EQ(o.status, LFM_OK) << o.error;
    EXPECT_EQ(o.tokens, expected) << "drafter " << drafter;
    EXPECT_EQ(o.done.completion_tokens, static_cast<int64_t>(expected.size()));
    EXPECT_GE(o.done.drafted_tokens, o.done.accepted_tokens);
    if (drafter == LFM_DRAFTER_MODEL) {
      EXPECT_GT(o.done.accepted_tokens, 0);
      EXPECT_EQ(o.done.accepted_tokens, o.done.drafted_tokens);  // its own drafts are never wrong
    }
  }
  // The engine's totals (published after the step that ended the request: they may lag its DONE).
  lfm_engine_stats st;
  st.struct_size = sizeof(st);
  for (int i = 0; i < 3000; ++i) {
    ASSERT_EQ(lfm_engine_get_stats(e, &st), LFM_OK);
    if (st.finished == 3) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(st.finished, 3);
  EXPECT_GT(st.drafted_tokens, 0);
  EXPECT_GT(st.accepted_tokens, 0);
  lfm_engine_free(e);
}

TEST(CApiSpeculative, DraftRequestsTheEngineCannotServeAreRefused) {
  Model model(kFixture);
  Engine eng(model.m);  // no draft model, room for 8 drafts
  const std::vector<int32_t> ids = {1, 2, 3};
  const lfm_prompt p = ids_prompt(ids);
  lfm_sampling_params sp = greedy_params(4);
  sp.drafter = 7;
  Outcome o = run(eng.e, p, &sp);
  EXPECT_EQ(o.status, LFM_ERR_INVALID_ARGUMENT);
  EXPECT_NE(o.error.find("unknown drafter 7"), std::string::npos) << o.error;
  sp.drafter = LFM_DRAFTER_MODEL;
  o = run(eng.e, p, &sp);
  EXPECT_EQ(o.status, LFM_ERR_INVALID_ARGUMENT);
  EXPECT_NE(o.error.find("no draft model"), std::string::npos) << o.error;
  sp.drafter = LFM_DRAFTER_NGRAM;
  sp.max_drafts = -1;
  EXPECT_EQ(run(eng.e, p, &sp).status, LFM_ERR_INVALID_ARGUMENT);
  // No room for drafts.
  lfm_engine* none = make_engine(model.m, nullptr, 0);
  sp.max_drafts = 8;
  o = run(none, p, &sp);
  EXPECT_EQ(o.status, LFM_ERR_INVALID_ARGUMENT);
  EXPECT_NE(o.error.find("draft_tokens is 0"), std::string::npos) << o.error;
  lfm_engine_free(none);
  // Engines that cannot be made: a draft model that is not there, one without room, one of
  // another vocabulary.
  EXPECT_EQ(make_engine(model.m, "/nonexistent/draft", 8, LFM_ERR_LOAD), nullptr);
  EXPECT_NE(std::string(lfm_last_error()).find("/nonexistent/draft"), std::string::npos) << lfm_last_error();
  EXPECT_EQ(make_engine(model.m, kFixture.c_str(), 0, LFM_ERR_INVALID_ARGUMENT), nullptr);
  EXPECT_NE(std::string(lfm_last_error()).find("draft_tokens"), std::string::npos) << lfm_last_error();
  const std::string vl = kData + "/hf_vl/lfm2vl_a_tied_ln";
  EXPECT_EQ(make_engine(model.m, vl.c_str(), 8, LFM_ERR_INVALID_ARGUMENT), nullptr);
  EXPECT_NE(std::string(lfm_last_error()).find("vocabulary"), std::string::npos) << lfm_last_error();
}

// A grammar makes the random model write a reply with reasoning, text and a tool call: the DONE
// event's message is that reply parsed as lfm serve parses it.
TEST(CApiChat, ReplyIsParsedIntoReasoningContentAndToolCalls) {
  Model model(text_model());
  Engine eng(model.m);
  const std::string tools = R"([{"type": "function", "function": {"name": "get_weather", "description": "Weather",
      "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}])";
  lfm_prompt p = chat_prompt(R"([{"role": "user", "content": "Weather in Paris?"}])", tools.c_str());
  lfm_sampling_params sp = greedy_params(64, false);
  sp.grammar = R"(root ::= "<think>Look it up.</think>" "Checking. " <|tool_call_start|> "[get_weather(city=\"Paris\")]" <|tool_call_end|>)";
  Outcome o = run(eng.e, p, &sp);
  ASSERT_EQ(o.status, LFM_OK) << o.error;
  EXPECT_EQ(o.done.finish_reason, LFM_FINISH_STOP) << o.text;
  json msg = json::parse(o.message);
  EXPECT_EQ(msg["role"], "assistant");
  EXPECT_EQ(msg["reasoning_content"], "Look it up.") << o.message;
  EXPECT_EQ(msg["content"], "Checking. ") << o.message;
  ASSERT_EQ(msg["tool_calls"].size(), 1u) << o.message;
  EXPECT_EQ(msg["tool_calls"][0]["type"], "function");
  EXPECT_EQ(msg["tool_calls"][0]["function"]["name"], "get_weather");
  EXPECT_EQ(json::parse(msg["tool_calls"][0]["function"]["arguments"].get<std::string>()), json({{"city", "Paris"}}));
  EXPECT_EQ(msg["tool_calls"][0]["id"].get<std::string>().rfind("call_", 0), 0u);

  // tool_choice naming the function: the prompt ends inside the call, the parser starts there,
  // and the arguments follow the function's parameters (as lfm serve constrains them; a content
  // grammar has no say in a forced call). Then "required" with a strict tool: the reply is calls.
  const std::string bounded = R"([{"type": "function", "function": {"name": "get_weather", "strict": true,
      "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 8},
      "days": {"type": "integer", "minimum": 1, "maximum": 7}}, "required": ["city", "days"]}}}])";
  for (const char* choice : {"get_weather", "required"})
    for (uint64_t seed = 0; seed < 3; ++seed) {
    SCOPED_TRACE(std::string(choice) + " seed " + std::to_string(seed));
    lfm_prompt forced = chat_prompt(R"([{"role": "user", "content": "Weather in Paris?"}])", bounded.c_str());
    forced.tool_choice = choice;
    sp = greedy_params(256, false);
    sp.temperature = 1.0f;  // sampled, so that the call list ends (greedy random weights repeat calls)
    sp.has_seed = 1;
    sp.seed = seed;
    o = run(eng.e, forced, &sp);
    ASSERT_EQ(o.status, LFM_OK) << o.error;
    EXPECT_EQ(o.done.finish_reason, LFM_FINISH_STOP) << o.text;
    msg = json::parse(o.message);
    EXPECT_TRUE(msg["content"].is_null()) << o.message;
    ASSERT_GE(msg["tool_calls"].size(), 1u) << o.message;
    for (const auto& call : msg["tool_calls"]) {
      EXPECT_EQ(call["function"]["name"], "get_weather") << o.message;
      const json args = json::parse(call["function"]["arguments"].get<std::string>());
      ASSERT_TRUE(args.contains("city") && args.contains("days")) << o.message;
      const std::string city = args["city"].get<std::string>();  // maxLength counts code points
      EXPECT_LE(std::count_if(city.begin(), city.end(), [](char ch) { return (static_cast<unsigned char>(ch) & 0xC0) != 0x80; }), 8);
      EXPECT_GE(args["days"].get<int64_t>(), 1);
      EXPECT_LE(args["days"].get<int64_t>(), 7);
    }
  }
  // A tool whose parameters are not a JSON Schema object is refused naming it.
  const std::string broken = R"([{"type": "function", "function": {"name": "f", "strict": true,
      "parameters": {"type": "object", "properties": 3}}}])";
  lfm_prompt bad_tools = chat_prompt(R"([{"role": "user", "content": "Hi"}])", broken.c_str());
  bad_tools.tool_choice = "required";
  o = run(eng.e, bad_tools, &sp);
  EXPECT_EQ(o.status, LFM_ERR_INVALID_ARGUMENT);
  EXPECT_NE(o.error.find("tools[0].function.parameters.properties"), std::string::npos) << o.error;
  // tool_choice "none": no tools offered, the markers stay text; unknown names are refused.
  p.tool_choice = "none";
  sp = greedy_params(4);
  o = run(eng.e, p, &sp);
  ASSERT_EQ(o.status, LFM_OK) << o.error;
  msg = json::parse(o.message);
  EXPECT_FALSE(msg.contains("tool_calls"));
  EXPECT_EQ(msg["content"], o.text);
  p.tool_choice = "get_time";
  o = run(eng.e, p, &sp);
  EXPECT_EQ(o.status, LFM_ERR_INVALID_ARGUMENT);
  EXPECT_NE(o.error.find("get_time"), std::string::npos) << o.error;
  // Requests that are not chats carry no message.
  lfm_prompt text;
  lfm_prompt_init(&text);
  text.text = "Hello";
  o = run(eng.e, text, &sp);
  ASSERT_EQ(o.status, LFM_OK) << o.error;
  EXPECT_EQ(o.message, "");
  text.tool_choice = "auto";
  EXPECT_EQ(run(eng.e, text, &sp).status, LFM_ERR_INVALID_ARGUMENT);
}

TEST(CApiSampling, LogitBiasAndTopLogprobs) {
  Model model(kFixture);
  Engine eng(model.m);
  const std::vector<int32_t> ids = {1, 23, 54, 200, 7};
  const lfm_prompt p = ids_prompt(ids);
  lfm_sampling_params sp = greedy_params(6);
  sp.top_logprobs = 3;
  const Outcome plain = run(eng.e, p, &sp);
  ASSERT_EQ(plain.status, LFM_OK) << plain.error;
  ASSERT_EQ(plain.top.size(), 6u);
  for (size_t i = 0; i < plain.tokens.size(); ++i) {
    ASSERT_EQ(plain.top[i].size(), 3u);
    EXPECT_EQ(plain.top[i][0], plain.tokens[i]);  // greedy: the most likely
  }
  const int32_t bias_ids[] = {42, plain.tokens[0]};
  const float bias[] = {100.0f, -100.0f};
  sp.logit_bias_ids = bias_ids;
  sp.logit_bias_values = bias;
  sp.n_logit_bias = 2;
  const Outcome biased = run(eng.e, p, &sp);
  ASSERT_EQ(biased.status, LFM_OK) << biased.error;
  EXPECT_EQ(biased.tokens, std::vector<int32_t>(6, 42));
  const int32_t bad[] = {999999};
  sp.logit_bias_ids = bad;
  sp.n_logit_bias = 1;
  EXPECT_EQ(run(eng.e, p, &sp).status, LFM_ERR_INVALID_ARGUMENT);
  sp.n_logit_bias = 0;
  sp.top_logprobs = 21;
  EXPECT_EQ(run(eng.e, p, &sp).status, LFM_ERR_INVALID_ARGUMENT);
}

// Fields added later start past the older sizeof: the structs end without tail padding that an
// older caller's struct_size would cover unset (lfm_model_options keeps its 4 padding bytes unused).
#define LFM_ENDS_AT(type, last, last_type) static_assert(offsetof(type, last) + sizeof(last_type) == sizeof(type))
LFM_ENDS_AT(lfm_model_info, reserved5, int32_t);
static_assert(offsetof(lfm_model_info, can_speak) == offsetof(lfm_model_info, audio_max_seconds) + sizeof(int32_t));
static_assert(offsetof(lfm_model_info, has_audio) == offsetof(lfm_model_info, embedding_max_tokens) + sizeof(int64_t));
static_assert(offsetof(lfm_model_info, can_generate) == offsetof(lfm_model_info, image_token) + sizeof(int32_t));
LFM_ENDS_AT(lfm_engine_options, draft_tokens, int64_t);
LFM_ENDS_AT(lfm_engine_stats, accepted_tokens, int64_t);
LFM_ENDS_AT(lfm_sampling_params, top_logprobs, int64_t);
LFM_ENDS_AT(lfm_prompt, voice, const char*);
static_assert(offsetof(lfm_prompt, audio_out) == offsetof(lfm_prompt, max_audio_seconds) + sizeof(double));
static_assert(offsetof(lfm_prompt, n_audio) == offsetof(lfm_prompt, tool_choice) + sizeof(const char*));
LFM_ENDS_AT(lfm_event, audio_seconds, double);
static_assert(offsetof(lfm_event, audio_codes) == offsetof(lfm_event, encode_seconds) + sizeof(double));
static_assert(offsetof(lfm_event, audio_clips) == offsetof(lfm_event, n_top) + sizeof(size_t));
LFM_ENDS_AT(lfm_embed_request, pooling, int32_t);
LFM_ENDS_AT(lfm_embedding, normalized, int32_t);
LFM_ENDS_AT(lfm_rerank_request, n_document_ids, const size_t*);
static_assert(offsetof(lfm_model_options, bf16_activations) + sizeof(int32_t) + 4 == sizeof(lfm_model_options));
#undef LFM_ENDS_AT

// A caller compiled against the level 1 header passes the smaller structs: the bytes past them
// (garbage here) are never read, and the new fields take their defaults; outputs are written only
// up to its struct_size.
TEST(CApiAbi, Level1StructsAreStillServed) {
  const auto [prompt, expected] = reference();
  Model model(kFixture);
  lfm_engine_options o;
  std::memset(&o, 0xff, sizeof(o));
  lfm_engine_options_init(&o);
  o.ctx_size = 256;
  o.struct_size = offsetof(lfm_engine_options, draft_model);
  std::memset(&o.draft_model, 0xff, sizeof(o) - offsetof(lfm_engine_options, draft_model));
  lfm_engine* e = nullptr;
  ASSERT_EQ(lfm_engine_create(model.m, &o, &e), LFM_OK) << lfm_last_error();

  lfm_prompt p;
  lfm_prompt_init(&p);
  p.ids = prompt.data();
  p.n_ids = prompt.size();
  p.struct_size = offsetof(lfm_prompt, n_images);
  std::memset(&p.n_images, 0xff, sizeof(p) - offsetof(lfm_prompt, n_images));
  lfm_sampling_params sp = greedy_params(static_cast<int64_t>(expected.size()));
  sp.struct_size = offsetof(lfm_sampling_params, json_schema);
  std::memset(&sp.json_schema, 0xff, sizeof(sp) - offsetof(lfm_sampling_params, json_schema));
  lfm_request* r = nullptr;
  ASSERT_EQ(lfm_request_submit(e, &p, &sp, &r), LFM_OK) << lfm_last_error();
  lfm_event ev;
  std::memset(&ev, 0x7f, sizeof(ev));
  ev.struct_size = offsetof(lfm_event, drafted_tokens);
  std::vector<int32_t> got;
  while (lfm_request_next(r, &ev, -1) == LFM_OK && ev.kind == LFM_EVENT_TOKEN) got.push_back(ev.token);
  EXPECT_EQ(got, expected);
  EXPECT_EQ(ev.finish_reason, LFM_FINISH_LENGTH);
  EXPECT_EQ(ev.drafted_tokens, 0x7f7f7f7f7f7f7f7fLL);  // past its struct_size: left alone
  lfm_request_free(r);

  lfm_model_info info;
  std::memset(&info, 0x7f, sizeof(info));
  info.struct_size = offsetof(lfm_model_info, has_vision);
  ASSERT_EQ(lfm_model_get_info(model.m, &info), LFM_OK);
  EXPECT_EQ(info.has_vision, 0x7f7f7f7f);
  info.struct_size = sizeof(info);
  ASSERT_EQ(lfm_model_get_info(model.m, &info), LFM_OK);
  EXPECT_EQ(info.has_vision, 0);
  EXPECT_EQ(info.image_token, -1);
  lfm_engine_free(e);
}

}  // namespace
