// The C API (include/lfm/lfm.h) through liblfm.so: errors as statuses and messages, the
// tokenizer and chat template, requests read by polling and by callback, cancellation, and the
// versioned structs. The examples' tests (capi_checks.py) cover greedy output and threads.
#include <gtest/gtest.h>
#include <lfm/lfm.h>

#include <cstddef>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "capi_test_util.h"

namespace {

using namespace lfm_capi_test;

std::string chat_json() {
  return R"([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is the weather?"}])";
}
std::string tools_json() {
  return R"([{"type": "function", "function": {"name": "get_weather", "description": "Weather for a city",
             "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}])";
}

TEST(CApi, NullHandlesAndArgumentsAreErrorsWithMessages) {
  lfm_engine* e = nullptr;
  EXPECT_EQ(lfm_engine_create(nullptr, nullptr, &e), LFM_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(lfm_last_error()).find("NULL"), std::string::npos) << lfm_last_error();
  EXPECT_EQ(e, nullptr);
  size_t n = 0;
  EXPECT_EQ(lfm_tokenize(nullptr, "x", 1, nullptr, 0, &n), LFM_ERR_INVALID_ARGUMENT);
  lfm_event ev;
  ev.struct_size = sizeof(ev);
  EXPECT_EQ(lfm_request_next(nullptr, &ev, 0), LFM_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(lfm_request_cancel(nullptr), LFM_ERR_INVALID_ARGUMENT);
  lfm_engine_stats st;
  st.struct_size = sizeof(st);
  EXPECT_EQ(lfm_engine_get_stats(nullptr, &st), LFM_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(lfm_request_submit(nullptr, nullptr, nullptr, nullptr), LFM_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(lfm_model_options_init(nullptr), LFM_ERR_INVALID_ARGUMENT);
  // Freeing NULL is a no-op, as free(NULL) is.
  EXPECT_EQ(lfm_model_free(nullptr), LFM_OK);
  EXPECT_EQ(lfm_engine_free(nullptr), LFM_OK);
  EXPECT_EQ(lfm_request_free(nullptr), LFM_OK);
  EXPECT_STREQ(lfm_status_name(LFM_ERR_BUSY), "busy");
  EXPECT_EQ(lfm_api_version(), LFM_API_VERSION);
}

TEST(CApi, UnknownModelPathIsALoadError) {
  lfm_model* m = reinterpret_cast<lfm_model*>(1);
  EXPECT_EQ(lfm_model_load("/nonexistent/lfm/model", nullptr, &m), LFM_ERR_LOAD);
  EXPECT_EQ(m, nullptr);
  EXPECT_NE(std::string(lfm_last_error()).find("/nonexistent/lfm/model"), std::string::npos) << lfm_last_error();
  lfm_model_options o;
  lfm_model_options_init(&o);
  o.device = "tpu";
  EXPECT_NE(lfm_model_load(kFixture.c_str(), &o, &m), LFM_OK);
  EXPECT_NE(std::string(lfm_last_error()).find("tpu"), std::string::npos) << lfm_last_error();
}

TEST(CApi, BadRequestsAreRefusedAndOthersRun) {
  Model model(kFixture);
  Engine eng(model.m);
  {
    lfm_model_info info;
    info.struct_size = sizeof(info);
    ASSERT_EQ(lfm_model_get_info(model.m, &info), LFM_OK);
    EXPECT_GT(info.vocab_size, 200);
    EXPECT_EQ(info.has_tokenizer, 0);
  }
  lfm_prompt p;
  lfm_prompt_init(&p);
  lfm_request* r = nullptr;
  EXPECT_EQ(lfm_request_submit(eng.e, &p, nullptr, &r), LFM_ERR_INVALID_ARGUMENT);  // no prompt
  const int32_t bad[] = {1, 999999};
  p.ids = bad;
  p.n_ids = 2;
  EXPECT_EQ(lfm_request_submit(eng.e, &p, nullptr, &r), LFM_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(lfm_last_error()), "");
  p.ids = nullptr;
  p.n_ids = 0;
  p.text = "hello";  // the fixture has no tokenizer
  EXPECT_EQ(lfm_request_submit(eng.e, &p, nullptr, &r), LFM_ERR_UNSUPPORTED);
  EXPECT_NE(std::string(lfm_last_error()).find("tokenizer"), std::string::npos) << lfm_last_error();
  size_t n = 0;
  EXPECT_EQ(lfm_tokenize(model.m, "hello", 1, nullptr, 0, &n), LFM_ERR_UNSUPPORTED);
  // A good request still runs.
  lfm_request* ok = submit_ids(eng.e, {1, 23, 54}, 4);
  lfm_event ev;
  ev.struct_size = sizeof(ev);
  int tokens = 0;
  while (lfm_request_next(ok, &ev, -1) == LFM_OK && ev.kind == LFM_EVENT_TOKEN) ++tokens;
  EXPECT_EQ(tokens, 4);
  EXPECT_EQ(ev.finish_reason, LFM_FINISH_LENGTH);
  EXPECT_EQ(ev.completion_tokens, 4);
  EXPECT_EQ(ev.prompt_tokens, 3);
  EXPECT_EQ(lfm_request_next(ok, &ev, -1), LFM_ERR_END);
  lfm_request_free(ok);
}

TEST(CApi, PollingWithTimeoutsAndCallbacksGiveTheSameTokens) {
  Model model(kFixture);
  Engine eng(model.m);
  std::vector<int32_t> polled, called;
  lfm_request* a = submit_ids(eng.e, {1, 23, 54, 200, 7}, 12);
  lfm_event ev;
  ev.struct_size = sizeof(ev);
  for (;;) {
    const lfm_status s = lfm_request_next(a, &ev, 0);
    if (s == LFM_ERR_TIMEOUT) continue;
    ASSERT_EQ(s, LFM_OK) << lfm_last_error();
    if (ev.kind == LFM_EVENT_DONE) break;
    EXPECT_LE(ev.logprob, 0.0f);
    polled.push_back(ev.token);
  }
  lfm_request_free(a);
  lfm_request* b = submit_ids(eng.e, {1, 23, 54, 200, 7}, 12);
  auto cb = [](const lfm_event* e, void* ud) -> int32_t {
    if (e->kind == LFM_EVENT_TOKEN) static_cast<std::vector<int32_t>*>(ud)->push_back(e->token);
    return 0;
  };
  ASSERT_EQ(lfm_request_run(b, cb, &called), LFM_OK) << lfm_last_error();
  lfm_request_free(b);
  EXPECT_EQ(polled.size(), 12u);
  EXPECT_EQ(polled, called);
  // The reference's greedy tokens.
  std::ifstream f(kFixture + "/reference.json");
  const auto ref = nlohmann::json::parse(f)["greedy"]["runs"][0]["new_tokens"].get<std::vector<int32_t>>();
  EXPECT_EQ(polled, std::vector<int32_t>(ref.begin(), ref.begin() + 12));
}

TEST(CApi, CallbackAndCancelEndTheRequestCancelled) {
  Model model(kFixture);
  Engine eng(model.m);
  lfm_request* r = submit_ids(eng.e, {1, 23, 54}, 400);
  struct State {
    int tokens = 0;
    int finish = 0;
  } st;
  auto cb = [](const lfm_event* e, void* ud) -> int32_t {
    auto& s = *static_cast<State*>(ud);
    if (e->kind == LFM_EVENT_DONE) s.finish = e->finish_reason;
    return e->kind == LFM_EVENT_TOKEN && ++s.tokens == 3;  // cancel after three tokens
  };
  ASSERT_EQ(lfm_request_run(r, cb, &st), LFM_OK);
  EXPECT_EQ(st.finish, LFM_FINISH_CANCELLED);
  EXPECT_LT(st.tokens, 400);
  lfm_request_free(r);
  // A request freed while running, and an engine freed with one still running: no hang, no leak.
  lfm_request_free(submit_ids(eng.e, {1, 2, 3}, 400));
  lfm_request* left = submit_ids(eng.e, {1, 2, 3}, 400);
  lfm_engine_free(eng.e);
  eng.e = nullptr;
  lfm_event ev;
  ev.struct_size = sizeof(ev);
  while (lfm_request_next(left, &ev, -1) == LFM_OK && ev.kind == LFM_EVENT_TOKEN) {
  }
  EXPECT_EQ(ev.finish_reason, LFM_FINISH_CANCELLED);
  lfm_request_free(left);
}

TEST(CApi, OlderSmallerStructsGetDefaultsAndPartialWrites) {
  Model model(kFixture);
  // An engine options struct from a caller that knows only its first two fields.
  lfm_engine_options o;
  lfm_engine_options_init(&o);
  o.ctx_size = 128;
  o.struct_size = offsetof(lfm_engine_options, parallel);
  lfm_engine* e = nullptr;
  ASSERT_EQ(lfm_engine_create(model.m, &o, &e), LFM_OK) << lfm_last_error();
  lfm_engine_stats st;
  std::memset(&st, 0x7f, sizeof(st));
  st.struct_size = offsetof(lfm_engine_stats, waiting);  // knows only `running`
  ASSERT_EQ(lfm_engine_get_stats(e, &st), LFM_OK);
  EXPECT_EQ(st.running, 0);
  EXPECT_EQ(st.waiting, 0x7f7f7f7f7f7f7f7fLL);  // left alone
  st.struct_size = 0;
  EXPECT_EQ(lfm_engine_get_stats(e, &st), LFM_ERR_INVALID_ARGUMENT);
  lfm_engine_free(e);
}

TEST(CApi, TokenizerAndChatTemplate) {
  Model model(text_model());
  size_t n = 0;
  ASSERT_EQ(lfm_tokenize(model.m, "Hello world", 0, nullptr, 0, &n), LFM_ERR_BUFFER_TOO_SMALL);
  ASSERT_GT(n, 0u);
  std::vector<int32_t> ids(n);
  ASSERT_EQ(lfm_tokenize(model.m, "Hello world", 0, ids.data(), ids.size(), &n), LFM_OK);
  size_t len = 0;
  char small[4];
  ASSERT_EQ(lfm_detokenize(model.m, ids.data(), ids.size(), 0, small, sizeof(small), &len), LFM_ERR_BUFFER_TOO_SMALL);
  ASSERT_EQ(len, 11u);
  std::string text(len + 1, '\0');
  ASSERT_EQ(lfm_detokenize(model.m, ids.data(), ids.size(), 0, text.data(), text.size(), &len), LFM_OK);
  EXPECT_STREQ(text.c_str(), "Hello world");

  const std::string msgs = chat_json(), tools = tools_json();
  ASSERT_EQ(lfm_apply_chat_template(model.m, msgs.c_str(), tools.c_str(), nullptr, 0, &len), LFM_ERR_BUFFER_TOO_SMALL);
  std::string rendered(len + 1, '\0');
  ASSERT_EQ(lfm_apply_chat_template(model.m, msgs.c_str(), tools.c_str(), rendered.data(), rendered.size(), &len), LFM_OK);
  rendered.resize(len);
  EXPECT_NE(rendered.find("get_weather"), std::string::npos) << rendered;
  EXPECT_TRUE(rendered.ends_with("<|im_start|>assistant\n")) << rendered;
  ASSERT_EQ(lfm_chat_tokens(model.m, msgs.c_str(), tools.c_str(), nullptr, 0, &n), LFM_ERR_BUFFER_TOO_SMALL);
  EXPECT_GT(n, 10u);
  EXPECT_EQ(lfm_apply_chat_template(model.m, "[{\"role\": ", nullptr, rendered.data(), rendered.size(), &len),
            LFM_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(lfm_last_error()).find("JSON"), std::string::npos) << lfm_last_error();
  EXPECT_EQ(lfm_chat_tokens(model.m, "{}", nullptr, nullptr, 0, &n), LFM_ERR_INVALID_ARGUMENT);
}

TEST(CApi, ChatAndTextRequestsStreamText) {
  Model model(text_model());
  Engine eng(model.m);
  const std::string msgs = chat_json(), tools = tools_json();
  for (int chat = 0; chat < 2; ++chat) {
    lfm_prompt p;
    lfm_prompt_init(&p);
    if (chat) {
      p.messages_json = msgs.c_str();
      p.tools_json = tools.c_str();
    } else {
      p.text = "The weather today is";
    }
    lfm_sampling_params sp;
    lfm_sampling_params_init(&sp);
    sp.max_tokens = 8;
    sp.temperature = 0.8f;
    sp.has_seed = 1;
    sp.seed = 7;
    lfm_request* r = nullptr;
    ASSERT_EQ(lfm_request_submit(eng.e, &p, &sp, &r), LFM_OK) << lfm_last_error();
    lfm_event ev;
    ev.struct_size = sizeof(ev);
    std::vector<int32_t> ids;
    std::string text;
    while (lfm_request_next(r, &ev, -1) == LFM_OK) {
      text.append(ev.text, ev.text_length);
      if (ev.kind == LFM_EVENT_DONE) break;
      ids.push_back(ev.token);
    }
    EXPECT_TRUE(ev.finish_reason == LFM_FINISH_LENGTH || ev.finish_reason == LFM_FINISH_STOP) << ev.error;
    EXPECT_FALSE(ids.empty());
    lfm_request_free(r);
  }
}

// Issue 55 class 3: the C API parses its JSON arguments once, in order and in linear time, and
// refuses an object of more keys than the cap (200k keys took minutes to parse before) naming
// where it is.
TEST(CApi, JsonArgumentsWithHugeObjectsAreRefusedNamingThePlace) {
  Model model(text_model());
  std::string big = "{";
  for (int i = 0; i < 200000; ++i) big += (i ? ", \"k" : "\"k") + std::to_string(i) + "\": 0";
  big += "}";
  struct Case {
    std::string messages, tools, says;
  };
  const Case cases[] = {
      {R"([{"role": "user", "content": "hi", "extra": )" + big + "}]", "", "chat: messages_json: '[0].extra' has more than 10000 keys"},
      {R"([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "", "tool_calls": [{"type": "function",
          "function": {"name": "get_weather", "arguments": )" + big + "}}]}]",
       "", "chat: messages_json: '[1].tool_calls[0].function.arguments' has more than 10000 keys (limit 10000)"},
      {chat_json(), R"([{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": )" +
                        big + "}}}]",
       "chat: tools_json: '[0].function.parameters.properties' has more than 10000 keys"},
  };
  for (const Case& c : cases) {
    size_t len = 0;
    EXPECT_EQ(lfm_apply_chat_template(model.m, c.messages.c_str(), c.tools.empty() ? nullptr : c.tools.c_str(), nullptr, 0,
                                      &len),
              LFM_ERR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(lfm_last_error()).find(c.says), std::string::npos) << lfm_last_error();
  }
  // Key order is the caller's: the tool's parameters reach the template as written.
  const std::string tools = R"([{"type": "function", "function": {"name": "f", "parameters": {"type": "object",
      "properties": {"zeta": {"type": "integer"}, "alpha": {"type": "string"}}}}}])";
  size_t len = 0;
  std::string rendered(8192, '\0');
  ASSERT_EQ(lfm_apply_chat_template(model.m, chat_json().c_str(), tools.c_str(), rendered.data(), rendered.size(), &len),
            LFM_OK);
  rendered.resize(len);
  ASSERT_NE(rendered.find("zeta"), std::string::npos) << rendered;
  EXPECT_LT(rendered.find("zeta"), rendered.find("alpha")) << rendered;
}

}  // namespace
