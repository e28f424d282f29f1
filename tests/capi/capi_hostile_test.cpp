// The C API under hostile input (issue 55): a bad lfm_event struct_size is refused before the
// event is taken off the stream, max_tokens near 2^63 is refused at submit, and a request whose
// grammar fails once it runs ends alone with LFM_FINISH_ERROR while its neighbour finishes.
#include <gtest/gtest.h>
#include <lfm/lfm.h>

#include <cstdint>
#include <string>

#include "capi_test_util.h"

namespace {

using namespace lfm_capi_test;

lfm_request* submit_ids(lfm_engine* e, int64_t max_tokens, lfm_status* status) {
  static const int32_t ids[] = {1, 17, 200, 5};
  lfm_prompt p;
  lfm_prompt_init(&p);
  p.ids = ids;
  p.n_ids = 4;
  lfm_sampling_params sp;
  lfm_sampling_params_init(&sp);
  sp.max_tokens = max_tokens;
  sp.ignore_eos = 1;
  lfm_request* r = nullptr;
  *status = lfm_request_submit(e, &p, &sp, &r);
  return r;
}

TEST(CApiHostile, BadEventStructSizeLosesNoEvent) {
  Model model(kFixture);
  Engine eng(model.m);
  lfm_status st;
  lfm_request* r = submit_ids(eng.e, 4, &st);
  ASSERT_EQ(st, LFM_OK) << lfm_last_error();
  for (size_t bad : {size_t{0}, size_t{3}}) {
    lfm_event ev;
    ev.struct_size = bad;
    EXPECT_EQ(lfm_request_next(r, &ev, -1), LFM_ERR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(lfm_last_error()).find("struct_size"), std::string::npos) << lfm_last_error();
  }
  EXPECT_EQ(lfm_request_next(r, nullptr, -1), LFM_ERR_INVALID_ARGUMENT);
  // Every token is still there, then DONE.
  lfm_event ev;
  ev.struct_size = sizeof(ev);
  int tokens = 0;
  while (lfm_request_next(r, &ev, -1) == LFM_OK && ev.kind == LFM_EVENT_TOKEN) ++tokens;
  EXPECT_EQ(tokens, 4);
  EXPECT_EQ(ev.kind, LFM_EVENT_DONE);
  EXPECT_EQ(ev.finish_reason, LFM_FINISH_LENGTH);
  EXPECT_EQ(ev.completion_tokens, 4);
  lfm_request_free(r);
}

TEST(CApiHostile, MaxTokensNearInt64MaxIsRefused) {
  Model model(kFixture);
  Engine eng(model.m);
  for (int64_t n : {INT64_MAX, INT64_MAX - 1, INT64_MAX - 4}) {
    lfm_status st;
    lfm_request* r = submit_ids(eng.e, n, &st);
    EXPECT_EQ(st, LFM_ERR_INVALID_ARGUMENT) << n;
    EXPECT_EQ(r, nullptr);
    EXPECT_NE(std::string(lfm_last_error()).find("max_tokens"), std::string::npos) << lfm_last_error();
    lfm_request_free(r);
  }
}

TEST(CApiHostile, GrammarFailingAfterForcedTextEndsOnlyItsRequest) {
  Model model(text_model());
  Engine eng(model.m, 2);
  // Compiles; its state set explodes only after 64 forced bytes (tests/hostile_request_test.cpp).
  std::string g = "root ::= \"" + std::string(64, 'a') + "\" r0\n";
  for (int i = 0; i < 18; ++i)
    g += "r" + std::to_string(i) + " ::= r" + std::to_string(i + 1) + " \"a\" | r" + std::to_string(i + 1) + " \"b\"\n";
  g += "r18 ::= \"c\"\n";
  lfm_status st;
  lfm_request* plain = submit_ids(eng.e, 24, &st);
  ASSERT_EQ(st, LFM_OK) << lfm_last_error();
  lfm_prompt p;
  lfm_prompt_init(&p);
  p.text = "Say a";
  lfm_sampling_params sp;
  lfm_sampling_params_init(&sp);
  sp.max_tokens = 40;
  sp.grammar = g.c_str();
  lfm_request* bad = nullptr;
  ASSERT_EQ(lfm_request_submit(eng.e, &p, &sp, &bad), LFM_OK) << lfm_last_error();
  lfm_event ev;
  ev.struct_size = sizeof(ev);
  while (lfm_request_next(bad, &ev, -1) == LFM_OK && ev.kind == LFM_EVENT_TOKEN) {
  }
  EXPECT_EQ(ev.finish_reason, LFM_FINISH_ERROR);
  EXPECT_NE(std::string(ev.error).find("too ambiguous"), std::string::npos) << ev.error;
  int tokens = 0;
  while (lfm_request_next(plain, &ev, -1) == LFM_OK && ev.kind == LFM_EVENT_TOKEN) ++tokens;
  EXPECT_EQ(ev.finish_reason, LFM_FINISH_LENGTH);
  EXPECT_EQ(tokens, 24);
  lfm_request_free(bad);
  lfm_request_free(plain);
}

}  // namespace
