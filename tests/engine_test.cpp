// The engine: continuous batching must never change what a request generates. Each request's
// greedy tokens alone are the reference; the same requests submitted together, staggered, under
// token budgets of 1, 7 and 4096 tokens per step, and in a pool so small that requests are
// preempted and recomputed, must give exactly those tokens. Afterwards every block and slot is
// free. Also: cancellation in every phase, requests that can never fit, the prefix cache (second
// turns, eviction), and seeded sampling.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <random>
#include <thread>

#include "core/error.h"
#include "core/thread_pool.h"
#include "engine/engine.h"
#include "kernels/cpu_backend.h"
#include "model/forward.h"
#include "model_test_util.h"
#include "engine_test_util.h"
#include "test_backends.h"
#include "test_util.h"

namespace lfm {
namespace {

using test::collect;
using test::Result;

// Parameters: (fixture, backend): the CPU backend, a backend whose memory the host may not read
// (tests/fake_device_backend.h: every op checks that it only receives backend memory), so the
// engine's batching, preemption, cancellation and prefix cache are proven device-neutral, and, in
// a CUDA build on a machine with a GPU, the CUDA backend (skipped elsewhere).
class EngineTest : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {
 protected:
  void SetUp() override {
    LoadOptions load;
    std::string why;
    backend_ = test::make_named_backend(std::get<1>(GetParam()), pool_, load, &why);
    if (!backend_) GTEST_SKIP() << why;
    model_ = load_model(test::fixture_dir(std::get<0>(GetParam())), load);
    prompts_ = test::random_prompts(model_->config().vocab_size, {1, 3, 5, 8, 13, 17, 21, 30, 2, 11}, 17);
  }

  EngineOptions options(int64_t parallel, int64_t batch_tokens = 512) const {
    EngineOptions o;
    o.state.ctx_size = 64;
    o.state.parallel = parallel;
    o.state.type = DType::F32;
    o.batch_tokens = batch_tokens;
    return o;
  }
  Request greedy(size_t i, int64_t n = 12) const {
    Request r;
    r.prompt = prompts_[i];
    r.max_tokens = n;
    r.ignore_eos = true;
    return r;
  }
  // Each request alone, one at a time.
  std::vector<std::vector<int32_t>> alone() {
    std::vector<std::vector<int32_t>> out;
    Engine e(*model_, *backend_, nullptr, options(1));
    for (size_t i = 0; i < prompts_.size(); ++i) out.push_back(collect(*e.submit(greedy(i))).tokens);
    return out;
  }
  static void expect_all_free(const Engine& e) {
    const EngineStats s = e.stats();
    EXPECT_EQ(s.running, 0);
    EXPECT_EQ(s.waiting, 0);
    EXPECT_EQ(s.cache.blocks_used, 0);
    EXPECT_EQ(s.cache.slots_used, 0);
    EXPECT_EQ(s.cache.blocks_free + s.cache.blocks_cached, s.cache.blocks_total);
  }

  // A second chat turn through the prefix cache, with the state stored in `type`.
  void check_second_turn(DType type);

  ThreadPool pool_{2};
  std::unique_ptr<Backend> backend_;  // outlives the model whose weights it prepared
  std::unique_ptr<Model> model_;
  std::vector<std::vector<int32_t>> prompts_;
};

TEST_P(EngineTest, BatchedSubmissionsMatchRequestsAlone) {
  const auto want = alone();
  for (int64_t budget : {int64_t{4096}, int64_t{7}, int64_t{1}}) {
    Engine e(*model_, *backend_, nullptr, options(10, budget));
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (size_t i = 0; i < prompts_.size(); ++i) streams.push_back(e.submit(greedy(i)));
    for (size_t i = 0; i < prompts_.size(); ++i) {
      const Result r = collect(*streams[i]);
      EXPECT_EQ(r.tokens, want[i]) << "request " << i << ", budget " << budget;
      EXPECT_EQ(r.finish, FinishReason::kLength);
      EXPECT_EQ(r.usage.completion_tokens, 12);
    }
    e.wait_idle();
    expect_all_free(e);
    EXPECT_GT(e.stats().steps, 0);
  }
}

TEST_P(EngineTest, StaggeredSubmissionsMatchRequestsAlone) {
  const auto want = alone();
  Engine e(*model_, *backend_, nullptr, options(4, 16));
  std::vector<std::shared_ptr<RequestStream>> streams;
  std::vector<Result> got(prompts_.size());
  for (size_t i = 0; i < prompts_.size(); ++i) {
    streams.push_back(e.submit(greedy(i)));
    // Take a few events of the previous request before the next arrives, so requests join
    // while others are mid-prefill or mid-decode.
    if (i > 0) {
      Event ev;
      for (int k = 0; k < 1 + static_cast<int>(i % 3) && streams[i - 1]->next(ev); ++k)
        if (ev.kind == Event::Kind::kToken) got[i - 1].tokens.push_back(ev.token);
    }
  }
  for (size_t i = 0; i < prompts_.size(); ++i) {
    const Result rest = collect(*streams[i]);
    got[i].tokens.insert(got[i].tokens.end(), rest.tokens.begin(), rest.tokens.end());
    EXPECT_EQ(got[i].tokens, want[i]) << "request " << i << " " << rest.error;
  }
  e.wait_idle();
  expect_all_free(e);
}

// While a request decodes, a newcomer's prompt is prefilled in chunks that keep each step within
// prefill_chunk prompt tokens (the decoder still gets its token every step); outputs do not change.
TEST_P(EngineTest, DecodeStepCapChunksPrefillWhileOthersDecode) {
  std::vector<int32_t> long_prompt;
  while (long_prompt.size() < 30) long_prompt.insert(long_prompt.end(), prompts_[0].begin(), prompts_[0].end());
  long_prompt.resize(30);
  std::vector<int32_t> want_b;
  for (int64_t cap : {int64_t{0}, int64_t{5}}) {
    EngineOptions o = options(2, 512);
    o.state.ctx_size = 2048;
    o.prefill_chunk = cap;
    Engine e(*model_, *backend_, nullptr, o);
    Request a = greedy(0, 2000);  // decodes all through B's prefill; cancelled afterwards
    a.prompt.resize(std::min<size_t>(a.prompt.size(), 3));
    auto sa = e.submit(a);
    Event ev;
    while (sa->next(ev) && ev.kind != Event::Kind::kToken) {
    }
    Request b;
    b.prompt = long_prompt;
    b.max_tokens = 3;
    b.ignore_eos = true;
    const Result rb = collect(*e.submit(b));
    e.cancel(sa->id());
    collect(*sa);
    if (cap == 0) {
      EXPECT_EQ(rb.usage.prefill_steps, 1);
      want_b = rb.tokens;
    } else {
      EXPECT_GE(rb.usage.prefill_steps, 6);  // at most 5 of its tokens next to A's each step
      EXPECT_EQ(rb.tokens, want_b);
    }
    e.wait_idle();
    expect_all_free(e);
  }
}

// Under an inter-token latency target the prompt tokens next to decode tokens follow the step
// cost model: an unreachable target leaves the minimum of kMinPromptTokens per step, a generous
// one lets a prompt fill the step; a fixed prefill_chunk wins over the target. Outputs never change.
TEST_P(EngineTest, ItlTargetSizesPrefillNextToDecodersAndKeepsOutputs) {
  std::vector<int32_t> long_prompt;
  while (long_prompt.size() < 40) long_prompt.insert(long_prompt.end(), prompts_[1].begin(), prompts_[1].end());
  long_prompt.resize(40);
  struct Case {
    double target_ms;
    int64_t chunk;
    int64_t min_steps, max_steps;
  };
  std::vector<int32_t> want_b;
  for (const Case c : {Case{0, -1, 1, 1}, Case{1e-3, -1, 3, 3}, Case{1e9, -1, 1, 3}, Case{1e9, 5, 8, 100}}) {
    EngineOptions o = options(2, 512);
    o.state.ctx_size = 2048;
    o.itl_target_ms = c.target_ms;
    o.prefill_chunk = c.chunk;
    Engine e(*model_, *backend_, nullptr, o);
    Request a = greedy(0, 2000);  // decodes all through B's prefill; cancelled afterwards
    auto sa = e.submit(a);
    Event ev;
    for (int tokens = 0; tokens < 6 && sa->next(ev);) tokens += ev.kind == Event::Kind::kToken ? 1 : 0;
    Request b;
    b.prompt = long_prompt;
    b.max_tokens = 4;
    b.ignore_eos = true;
    const Result rb = collect(*e.submit(b));
    e.cancel(sa->id());
    collect(*sa);
    const std::string what = "target " + std::to_string(c.target_ms) + " ms, chunk " + std::to_string(c.chunk);
    // 40 tokens: 16 + 16 + 8 at the minimum, one step when nothing holds them back; until the
    // cost model is fitted a generous target gives the minimum too.
    EXPECT_GE(rb.usage.prefill_steps, c.min_steps) << what;
    EXPECT_LE(rb.usage.prefill_steps, c.max_steps) << what;
    if (want_b.empty())
      want_b = rb.tokens;
    else
      EXPECT_EQ(rb.tokens, want_b) << what;
    e.wait_idle();
    expect_all_free(e);
  }
}

TEST_P(EngineTest, ItlTargetKeepsBatchedOutputs) {
  const auto want = alone();
  for (double target_ms : {1e-3, 1.0, 1e9}) {
    EngineOptions o = options(4, 64);
    o.prefill_chunk = -1;  // the target decides
    o.itl_target_ms = target_ms;
    Engine e(*model_, *backend_, nullptr, o);
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (size_t i = 0; i < prompts_.size(); ++i) streams.push_back(e.submit(greedy(i)));
    for (size_t i = 0; i < prompts_.size(); ++i)
      EXPECT_EQ(collect(*streams[i]).tokens, want[i]) << "request " << i << ", target " << target_ms << " ms";
    e.wait_idle();
    expect_all_free(e);
  }
}

TEST_P(EngineTest, PreemptionUnderASmallPoolKeepsOutputs) {
  const auto want = alone();
  EngineOptions o = options(10, 32);
  // Room for 6 blocks of 16 tokens: one full context (4 blocks) plus a little.
  o.state.pad_rows = backend_->decode_step_max_pad();  // as the engine plans it
  o.state.memory_bytes = kv_memory_for_blocks(model_->config(), o.state, 6);
  // The references first: a backend serves one engine's steps at a time.
  std::vector<std::vector<int32_t>> want20;
  {
    Engine solo(*model_, *backend_, nullptr, options(1));
    for (size_t i = 0; i < prompts_.size(); ++i) want20.push_back(collect(*solo.submit(greedy(i, 20))).tokens);
  }
  Engine e(*model_, *backend_, nullptr, o);
  ASSERT_EQ(e.cache_options().n_blocks, 6);
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (size_t i = 0; i < prompts_.size(); ++i) streams.push_back(e.submit(greedy(i, 20)));
  for (size_t i = 0; i < prompts_.size(); ++i) {
    const Result r = collect(*streams[i]);
    EXPECT_EQ(r.tokens, want20[i]) << "request " << i << ": " << r.error;
    ASSERT_EQ(r.tokens.size(), 20u) << r.error;
    EXPECT_EQ(std::vector<int32_t>(r.tokens.begin(), r.tokens.begin() + 12), want[i]);
  }
  e.wait_idle();
  EXPECT_GT(e.stats().preemptions, 0) << "the pool was meant to be too small";
  expect_all_free(e);
}

TEST_P(EngineTest, CancellationInEveryPhaseFreesEverything) {
  EngineOptions o = options(1, 1);  // one running request, one token per step: long prefills
  o.state.ctx_size = 256;
  Engine e(*model_, *backend_, nullptr, o);
  std::vector<int32_t> long_prompt;
  for (int i = 0; i < 240; ++i) long_prompt.push_back(prompts_[i % prompts_.size()][0]);
  // Prefilling: cancel once the engine has computed some of its 240 prompt tokens.
  {
    Request r;
    r.prompt = long_prompt;
    r.max_tokens = 4;
    auto s = e.submit(r);
    while (e.stats().computed_tokens == 0) std::this_thread::sleep_for(std::chrono::microseconds(50));
    s->cancel();
    const Result got = collect(*s);
    EXPECT_EQ(got.finish, FinishReason::kCancelled);
    EXPECT_LT(got.tokens.size(), 4u);
  }
  // Decoding: cancel after the first token; waiting: a second request queued behind it.
  {
    auto running = e.submit(greedy(0, 200));
    auto queued = e.submit(greedy(1, 200));
    Event ev;
    ASSERT_TRUE(running->next(ev));
    EXPECT_EQ(ev.kind, Event::Kind::kToken);
    queued->cancel();
    const Result q = collect(*queued);
    EXPECT_EQ(q.finish, FinishReason::kCancelled);
    EXPECT_TRUE(q.tokens.empty()) << "the queued request ran";
    e.cancel(running->id());
    const Result r = collect(*running);
    EXPECT_EQ(r.finish, FinishReason::kCancelled);
    EXPECT_LT(r.tokens.size(), 199u);
  }
  // Finished: cancelling afterwards changes nothing.
  {
    auto done = e.submit(greedy(2, 3));
    const Result r = collect(*done);
    EXPECT_EQ(r.finish, FinishReason::kLength);
    done->cancel();
    e.cancel(done->id());
  }
  e.wait_idle();
  expect_all_free(e);
  EXPECT_EQ(e.stats().cancelled, 3);
  // The engine still serves requests normally.
  EXPECT_EQ(collect(*e.submit(greedy(3))).tokens.size(), 12u);
}

// Issue 38 item 7: the published stats move when work is admitted, not only after a step: a
// request counts as waiting once submit() returns, and as running, holding KV blocks, while its
// one-step prefill is still being computed (before, a long cold prefill read as an idle engine).
TEST_P(EngineTest, StatsCountWorkAsSoonAsItIsAdmitted) {
  EngineOptions o = options(1, 4096);
  o.state.ctx_size = 2048;
  Engine e(*model_, *backend_, nullptr, o);
  Request r;
  for (int i = 0; i < 2000; ++i) r.prompt.push_back(prompts_[i % prompts_.size()][i % 2]);
  r.max_tokens = 4;
  r.ignore_eos = true;
  auto s = e.submit(r);
  EngineStats st = e.stats();
  EXPECT_GE(st.waiting + st.running, 1) << "a submitted request is not counted";
  // Poll until it reads as running; its first token (the end of the prefill step) must not have
  // arrived by then.
  Event ev;
  bool token_first = false;
  for (st = e.stats(); st.running == 0; st = e.stats()) {
    if (s->next_for(ev, std::chrono::milliseconds(0))) {
      token_first = true;
      break;
    }
    // Leave the core to the engine's thread: the prefill takes far longer than a pause.
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  EXPECT_FALSE(token_first) << "the prefill step finished before the request was reported running";
  EXPECT_EQ(st.running, 1);
  EXPECT_GT(st.cache.blocks_used, 0);
  EXPECT_EQ(collect(*s).finish, FinishReason::kLength);
  e.wait_idle();
  expect_all_free(e);
}

TEST_P(EngineTest, RequestsThatCanNeverFitAreRefusedAndOthersGoOn) {
  Engine e(*model_, *backend_, nullptr, options(2));
  auto ok = e.submit(greedy(0, 30));
  std::vector<int32_t> huge(64, 1);
  try {
    Request r;
    r.prompt = huge;
    e.submit(r);
    FAIL() << "a prompt as long as the context was accepted";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("past the context size 64"), std::string::npos) << err.what();
  }
  Request too_many = greedy(7, 60);  // 30 + 60 > 64
  EXPECT_THROW(e.submit(too_many), Error);
  Request bad_id = greedy(1);
  bad_id.prompt.push_back(static_cast<int32_t>(model_->config().vocab_size));
  EXPECT_THROW(e.submit(bad_id), Error);
  Request empty;
  EXPECT_THROW(e.submit(empty), Error);
  Request bad_sampling = greedy(1);
  bad_sampling.sampling.top_p = 0;
  EXPECT_THROW(e.submit(bad_sampling), Error);
  Request no_tokenizer = greedy(1);
  no_tokenizer.stop = {"x"};
  EXPECT_THROW(e.submit(no_tokenizer), Error);
  EXPECT_EQ(collect(*ok).tokens.size(), 30u);
  e.wait_idle();
  expect_all_free(e);
}

TEST_P(EngineTest, PrefixCacheResumesASecondTurnWithUnchangedOutputs) {
  for (DType type : {DType::F32, DType::BF16}) {
    SCOPED_TRACE(dtype_name(type));
    check_second_turn(type);
  }
}

void EngineTest::check_second_turn(DType type) {
  const int64_t B = 16;
  std::vector<int32_t> turn1 = prompts_[7];  // 30 tokens
  turn1.insert(turn1.end(), prompts_[6].begin(), prompts_[6].end());  // 47
  auto second = [&](const std::vector<int32_t>& reply) {
    std::vector<int32_t> t = turn1;
    t.insert(t.end(), reply.begin(), reply.end());
    t.insert(t.end(), prompts_[2].begin(), prompts_[2].end());
    return t;
  };
  EngineOptions with = options(2);
  with.state.ctx_size = 128;
  with.state.type = type;
  EngineOptions without = with;
  without.state.prefix_cache = false;

  Engine cold(*model_, *backend_, nullptr, without);
  const Result r1 = collect(*cold.submit(test::greedy_request(turn1, 10)));
  const std::vector<int32_t> turn2 = second(r1.tokens);
  const Result want = collect(*cold.submit(test::greedy_request(turn2, 10)));
  EXPECT_EQ(want.usage.cached_tokens, 0);

  Engine warm(*model_, *backend_, nullptr, with);
  EXPECT_EQ(collect(*warm.submit(test::greedy_request(turn1, 10))).tokens, r1.tokens);
  const Result got = collect(*warm.submit(test::greedy_request(turn2, 10)));
  EXPECT_EQ(got.tokens, want.tokens);
  // The history (turn 1 and its reply) is 57 tokens, 56 of them computed: 3 whole blocks reused.
  const int64_t history = static_cast<int64_t>(turn1.size() + r1.tokens.size());
  EXPECT_GE(got.usage.cached_tokens, history - B);
  EXPECT_EQ(got.usage.cached_tokens, 48);
  EXPECT_EQ(warm.stats().cache.prefix_hit_tokens, 48);
  warm.wait_idle();
  expect_all_free(warm);

  // Logits of the resumed prefill are bitwise those of a cold prefill of the whole second turn.
  const auto full = test::prompt_logits(*model_, *backend_, turn2, with.state);
  auto cache = make_state_cache(*model_, with.state, *backend_);
  Forward fwd(*model_, *backend_, *cache);
  StepOutput out;
  {
    Sequence* a = cache->open(128);
    std::vector<int32_t> hist = turn1;
    hist.insert(hist.end(), r1.tokens.begin(), r1.tokens.end() - 1);
    BatchItem it{a, hist, false};
    fwd.step(std::span<const BatchItem>(&it, 1), out);
    cache->close(a);
  }
  Sequence* b = cache->open(128);
  const int64_t reused = cache->attach_prefix(*b, turn2);
  ASSERT_EQ(reused, 48);
  BatchItem rest{b, std::span<const int32_t>(turn2.data() + reused, turn2.size() - reused), true};
  fwd.step(std::span<const BatchItem>(&rest, 1), out);
  // A backend that is not bitwise batch-invariant (cuBLAS sums long prefills in another order):
  // float32 noise with float32 state; with bf16 state that noise can move a stored value by one
  // bf16 step (u = 2^-8), so the state-type bound of fixture_test.cpp: 8u times max|logit|.
  for (size_t p = reused; p < turn2.size(); ++p) {
    const float* row = out.row(0, static_cast<int64_t>(p - reused));
    if (backend_->bitwise_batch_invariant()) {
      EXPECT_EQ(std::memcmp(row, full[p].data(), full[p].size() * 4), 0) << "position " << p;
    } else {
      double scale = 0;
      for (float v : full[p]) scale = std::max(scale, static_cast<double>(std::fabs(v)));
      const double tol = type == DType::F32 ? 1e-4 : 8.0 / 256.0 * scale;
      EXPECT_LE(test::max_abs_diff(std::vector<float>(row, row + full[p].size()), full[p]), tol) << "position " << p;
    }
  }
}

// Four requests with one 51-token prompt submitted at once (n candidates, or users sharing a
// system prompt): the first prefills it, the others wait for its 3 whole blocks to be cached and
// compute only the rest; a request with another prompt does not wait. Outputs as alone.
TEST_P(EngineTest, RequestsSharingAPromptPrefillItOnce) {
  std::vector<int32_t> prompt = prompts_[7];
  prompt.insert(prompt.end(), prompts_[6].begin(), prompts_[6].end());
  const int64_t P = static_cast<int64_t>(prompt.size()), blocks = (P - 1) / 16 * 16;
  ASSERT_EQ(P, 51);
  EngineOptions o = options(8);
  o.state.ctx_size = 128;
  o.prefill_chunk = 0;  // prompts fill the step: nothing stops the copies from running together
  Engine cold(*model_, *backend_, nullptr, o);
  const Result want = collect(*cold.submit(test::greedy_request(prompt, 8)));
  const Result other_alone = collect(*cold.submit(greedy(9)));

  Engine warm(*model_, *backend_, nullptr, o);
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int i = 0; i < 4; ++i) streams.push_back(warm.submit(test::greedy_request(prompt, 8)));
  auto other = warm.submit(greedy(9));
  int64_t cached = 0;
  for (auto& s : streams) {
    const Result r = collect(*s);
    EXPECT_EQ(r.tokens, want.tokens);
    cached += r.usage.cached_tokens;
  }
  const Result o2 = collect(*other);
  EXPECT_EQ(o2.tokens, other_alone.tokens);
  EXPECT_EQ(o2.usage.cached_tokens, 0);
  EXPECT_EQ(cached, 3 * blocks) << "three copies should take the first one's whole blocks";
  warm.wait_idle();
  // Computed: the prompt once, its last partial block for each copy, the other prompt, and every
  // generated token but each request's last.
  const EngineStats st = warm.stats();
  EXPECT_EQ(st.computed_tokens,
            P + 3 * (P - blocks) + static_cast<int64_t>(prompts_[9].size()) + st.generated_tokens - 5);
  expect_all_free(warm);

  // Without the prefix cache they all compute it.
  o.state.prefix_cache = false;
  Engine plain(*model_, *backend_, nullptr, o);
  for (int i = 0; i < 4; ++i) streams[static_cast<size_t>(i)] = plain.submit(test::greedy_request(prompt, 8));
  for (auto& s : streams) EXPECT_EQ(collect(*s).tokens, want.tokens);
}

TEST_P(EngineTest, EvictedPrefixIsRecomputedCorrectly) {
  EngineOptions o = options(1);
  o.state.ctx_size = 64;
  o.state.memory_bytes = 0;
  Engine e(*model_, *backend_, nullptr, o);  // 4 blocks: one context, nothing to spare
  std::vector<int32_t> p = prompts_[7];      // 30 tokens
  p.insert(p.end(), prompts_[5].begin(), prompts_[5].end());  // 47
  const Result first = collect(*e.submit(test::greedy_request(p, 8)));
  const Result hit = collect(*e.submit(test::greedy_request(p, 8)));
  EXPECT_EQ(hit.usage.cached_tokens, 32);
  EXPECT_EQ(hit.tokens, first.tokens);
  // Two other long requests push it out of the 4-block pool.
  for (size_t i : {3, 4}) {
    std::vector<int32_t> other(50, prompts_[i][0]);
    collect(*e.submit(test::greedy_request(other, 4)));
  }
  const Result again = collect(*e.submit(test::greedy_request(p, 8)));
  EXPECT_LT(again.usage.cached_tokens, 32);
  EXPECT_EQ(again.tokens, first.tokens);
  EXPECT_GT(e.stats().cache.evicted_blocks, 0);
  e.wait_idle();
  expect_all_free(e);
}

TEST_P(EngineTest, SeededSamplingIsTheSameAloneAndInABatch) {
  auto sampled = [&](size_t i, uint64_t seed) {
    Request r = greedy(i, 16);
    r.sampling.temperature = 1.3f;
    r.sampling.top_k = 50;
    r.sampling.top_p = 0.95f;
    r.sampling.seed = seed;
    return r;
  };
  std::vector<std::vector<int32_t>> want;
  {
    Engine e(*model_, *backend_, nullptr, options(1));
    for (size_t i = 0; i < 4; ++i) want.push_back(collect(*e.submit(sampled(i, 100 + i))).tokens);
  }
  Engine e(*model_, *backend_, nullptr, options(8, 5));
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (size_t i = 0; i < 8; ++i) streams.push_back(e.submit(i < 4 ? sampled(i, 100 + i) : greedy(i)));
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(collect(*streams[i]).tokens, want[i]) << "request " << i;
  for (size_t i = 4; i < 8; ++i) collect(*streams[i]);
  // A different seed gives a different stream somewhere.
  Engine solo(*model_, *backend_, nullptr, options(1));
  int differ = 0;
  for (size_t i = 0; i < 4; ++i) differ += collect(*solo.submit(sampled(i, 900 + i))).tokens != want[i];
  EXPECT_GT(differ, 0);
}

// Sampled requests take their tokens from the candidates the step sends down (8 of the 256 ids
// here, so that flat rows send draws past them and the whole row is fetched): the tokens of the
// same requests sampled from whole rows (asking for logprobs takes that path; it does not change
// the draws), alone and in a batch with greedy ones. On the fake device, a top-k request's
// tokens come down as candidates, never as rows.
TEST_P(EngineTest, SampledRequestsFromCandidatesMatchTheWholeRowSampler) {
  auto sampled = [&](size_t i) {
    Request r = greedy(i, 14);
    r.sampling.seed = 500 + i;
    r.sampling.temperature = 0.6f + 0.2f * static_cast<float>(i);
    if (i % 4 == 1) r.sampling.top_p = 0.9f, r.sampling.min_p = 0.02f;
    if (i % 4 == 2) r.sampling.repetition_penalty = 1.4f, r.sampling.presence_penalty = 0.4f,
                    r.sampling.frequency_penalty = 0.3f, r.sampling.logit_bias = {{7, 2.5f}, {11, -1.0f}};
    if (i % 4 == 3) r.sampling.top_k = 5;
    return r;
  };
  EngineOptions o = options(8, 7);
  std::vector<std::vector<int32_t>> want;
  {
    o.sample_candidates = 0;  // whole rows
    Engine e(*model_, *backend_, nullptr, o);
    for (size_t i = 0; i < 6; ++i) want.push_back(collect(*e.submit(sampled(i))).tokens);
  }
  o.sample_candidates = 8;
  Engine e(*model_, *backend_, nullptr, o);
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (size_t i = 0; i < 8; ++i) streams.push_back(e.submit(i < 6 ? sampled(i) : greedy(i)));
  for (size_t i = 0; i < 6; ++i) EXPECT_EQ(collect(*streams[i]).tokens, want[i]) << "request " << i;
  for (size_t i = 6; i < 8; ++i) collect(*streams[i]);
  e.wait_idle();
  expect_all_free(e);

  auto* dev = dynamic_cast<test::FakeDeviceBackend*>(backend_.get());
  if (!dev) return;
  const size_t row_bytes = static_cast<size_t>(model_->config().vocab_size) * sizeof(float);
  Engine top_k(*model_, *backend_, nullptr, o);
  const size_t before = dev->downloaded_bytes;
  const int64_t n = 14;
  std::vector<std::shared_ptr<RequestStream>> three;
  for (size_t i = 0; i < 3; ++i) three.push_back(top_k.submit(sampled(3)));
  for (auto& s : three) EXPECT_EQ(collect(*s).tokens.size(), static_cast<size_t>(n));
  EXPECT_LT(dev->downloaded_bytes - before, 3 * n * row_bytes / 4);

  // A penalised request's edits grow by one a token; padded, its decode steps keep their ops and
  // are replayed as recorded graphs.
  if (std::string(dev->name()) != "fake-device-replay") return;
  Engine penalised(*model_, *backend_, nullptr, o);
  const int64_t replayed = dev->replay_stats().replayed;
  EXPECT_EQ(collect(*penalised.submit(sampled(2))).tokens.size(), static_cast<size_t>(n));
  EXPECT_GE(dev->replay_stats().replayed - replayed, n / 2);  // 0 unpadded, 11 of 13 decode steps padded
}

// Logprobs and top_logprobs of requests without edits come from the candidates and the row's
// logsumexp (Backend::logsumexp_rows): the tokens and logprobs of the whole-row path, bit for bit
// (the logsumexp is the host's arithmetic on these backends), greedy and sampled. (What comes
// down is measured on a 65,536-id vocabulary in EngineGrammarTest.)
TEST_P(EngineTest, LogprobsFromCandidatesAreTheWholeRowsLogprobs) {
  auto request = [&](size_t i) {
    Request r = greedy(i, 10);
    r.sampling.seed = 700 + i;
    r.sampling.logprobs = true;
    r.sampling.top_logprobs = i % 2 == 1 ? 5 : 0;
    if (i >= 2) r.sampling.temperature = 0.9f, r.sampling.top_p = 0.95f;
    return r;
  };
  auto run = [&](int64_t candidates) {
    EngineOptions o = options(4, 7);
    o.sample_candidates = candidates;
    Engine e(*model_, *backend_, nullptr, o);
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (size_t i = 0; i < 4; ++i) streams.push_back(e.submit(request(i)));
    std::vector<Result> out;
    for (auto& s : streams) out.push_back(collect(*s));
    return out;
  };
  const std::vector<Result> want = run(0), got = run(16);
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_EQ(got[i].error, "");
    EXPECT_EQ(got[i].tokens, want[i].tokens) << "request " << i;
    EXPECT_EQ(got[i].logprobs, want[i].logprobs) << "request " << i;
    ASSERT_EQ(got[i].top_logprobs.size(), want[i].top_logprobs.size());
    for (size_t t = 0; t < want[i].top_logprobs.size(); ++t) {
      ASSERT_EQ(got[i].top_logprobs[t].size(), i % 2 == 1 ? 5u : 0u);
      for (size_t k = 0; k < want[i].top_logprobs[t].size(); ++k) {
        EXPECT_EQ(got[i].top_logprobs[t][k].token, want[i].top_logprobs[t][k].token) << "request " << i << " token " << t;
        EXPECT_EQ(got[i].top_logprobs[t][k].logprob, want[i].top_logprobs[t][k].logprob);
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, EngineTest,
                         ::testing::Combine(::testing::Values("lfm2_c_layertypes_untied_convbias_f32",
                                                              "lfm2moe_g_untied_nobias_scaled_f32"),
                                            ::testing::Values("cpu", "fake-device", "fake-device-replay"
#if LFM_HAVE_CUDA
                                                              ,
                                                              "cuda"
#endif
#if LFM_HAVE_CUDA_EMU
                                                              ,
                                                              "cuda-emu"  // the CUDA backend on the CPU emulator
#endif
                                                              )),
                         [](const auto& info) { return test::fixture_backend_name(info, 9); });

}  // namespace
}  // namespace lfm
