// Speculative decoding in the engine (issue 37): with every drafter (prompt lookup, a draft model
// that is always right: the model itself, and one that is mostly wrong: another model with the
// same vocabulary), greedy outputs are bit for bit those of plain greedy decoding: alone, in
// batches of 16 mixed requests (plain, lookup and model drafting side by side), under a token
// budget that leaves drafts little room, with prefix-cache hits, in a pool small enough to
// preempt, at KV block sizes 1 and 16; stop ids, max_tokens, penalties and logprobs behave as
// without. Sampled requests: a fixed seed reproduces, and a draft model equal to the target
// (q = p) has every draft accepted, which holds only if the rejection rule and the draft state's
// rollback are exact. The sampler's distribution itself is tested in speculative_sampler_test.
#include <gtest/gtest.h>

#include <random>

#include "core/error.h"
#include "core/thread_pool.h"
#include "engine/engine.h"
#include "engine_test_util.h"
#include "model_test_util.h"
#include "test_backends.h"
#include "test_util.h"

namespace lfm {
namespace {

using test::collect;
using test::Result;

// (target fixture, backend, KV block tokens)
using Param = std::tuple<std::string, std::string, int64_t>;

constexpr int64_t kDrafts = 4;

class EngineSpeculativeTest : public ::testing::TestWithParam<Param> {
 protected:
  void SetUp() override {
    LoadOptions load;
    std::string why;
    backend_ = test::make_named_backend(std::get<1>(GetParam()), pool_, load, &why);
    if (!backend_) GTEST_SKIP() << why;
    const std::string target = std::get<0>(GetParam());
    model_ = load_model(test::fixture_dir(target), load);
    self_draft_ = load_model(test::fixture_dir(target), load);
    // Another model with the same vocabulary: its guesses are mostly wrong.
    other_draft_ = load_model(
        test::fixture_dir(target.rfind("lfm2moe", 0) == 0 ? "lfm2_a_fullattnidxs_tied_f32" : "lfm2moe_f_tied_expertbias_f32"),
        load);
    prompts_ = test::random_prompts(model_->config().vocab_size, {1, 3, 5, 8, 13, 17, 21, 30}, 23);
  }

  EngineOptions options(int64_t parallel, int64_t batch_tokens = 512) const {
    EngineOptions o;
    o.state.ctx_size = 128;
    o.state.parallel = parallel;
    o.state.type = DType::F32;
    o.state.block_tokens = std::get<2>(GetParam());
    o.state.draft_tokens = kDrafts;
    o.batch_tokens = batch_tokens;
    return o;
  }
  // Prompt i, or for i ≥ 8 prompt i - 8 followed by its own greedy continuation and itself
  // again (prompt lookup then drafts that continuation).
  Request request(size_t i, Drafter d, int64_t n = 20) {
    Request r;
    r.prompt = prompts_[i % prompts_.size()];
    if (i >= prompts_.size()) {
      Engine plain(*model_, *backend_, nullptr, options(1));
      Request g = r;
      g.max_tokens = 16;
      g.ignore_eos = true;
      const std::vector<int32_t> cont = collect(*plain.submit(g)).tokens;
      r.prompt.insert(r.prompt.end(), cont.begin(), cont.end());
      r.prompt.insert(r.prompt.end(), prompts_[i % prompts_.size()].begin(), prompts_[i % prompts_.size()].end());
    }
    r.max_tokens = n;
    r.ignore_eos = true;
    r.drafter = d;
    r.max_drafts = kDrafts;
    return r;
  }
  std::vector<Result> plain_results(const std::vector<Request>& reqs) {
    Engine plain(*model_, *backend_, nullptr, options(1));
    std::vector<Result> out;
    for (Request r : reqs) {
      r.drafter = Drafter::kNone;
      out.push_back(collect(*plain.submit(r)));
    }
    return out;
  }
  size_t requests() const { return std::get<1>(GetParam()) == "fake-device" ? 8 : 16; }
  static void expect_all_free(const Engine& e) {
    const EngineStats s = e.stats();
    EXPECT_EQ(s.running, 0);
    EXPECT_EQ(s.cache.blocks_used, 0);
    EXPECT_EQ(s.cache.slots_used, 0);
  }

  ThreadPool pool_{2};
  std::unique_ptr<Backend> backend_;  // outlives the models whose weights it prepared
  std::unique_ptr<Model> model_, self_draft_, other_draft_;
  std::vector<std::vector<int32_t>> prompts_;
};

TEST_P(EngineSpeculativeTest, GreedyOutputsAreThoseOfPlainDecodingWithEveryDrafter) {
  // 16 mixed requests: plain, lookup and model drafting; short and long (repeating) prompts. (8
  // on the fake device backend, whose reference kernels are slow; the logic is the same.)
  std::vector<Request> reqs;
  for (size_t i = 0; i < 16; i += 16 / requests())
    reqs.push_back(request(i, i % 3 == 0 ? Drafter::kNone : i % 3 == 1 ? Drafter::kModel : Drafter::kNgram, 12 + i % 5));
  const std::vector<Result> want = plain_results(reqs);
  for (const Model* draft : {self_draft_.get(), other_draft_.get()}) {
    const bool self = draft == self_draft_.get();
    const char* which = self ? "self draft" : "other draft";
    for (int64_t budget : {int64_t{4096}, int64_t{5}}) {
      Engine e(*model_, *backend_, nullptr, options(16, budget), draft);
      // Alone, twice (the second round resumes from the prefix caches), then all at once; with
      // the small budget only all at once.
      for (int round = 0; round < (budget == 4096 ? 2 : 0); ++round)
        for (size_t i = 0; i < reqs.size(); ++i) {
          const Result r = collect(*e.submit(reqs[i]));
          ASSERT_EQ(r.tokens, want[i].tokens) << which << ", request " << i << ", round " << round << " " << r.error;
          if (self && reqs[i].drafter == Drafter::kModel) {
            EXPECT_GT(r.usage.drafted_tokens, 0) << "request " << i;
            EXPECT_EQ(r.usage.accepted_tokens, r.usage.drafted_tokens) << "the model drafting for itself, request " << i;
          }
        }
      std::vector<std::shared_ptr<RequestStream>> streams;
      for (const Request& r : reqs) streams.push_back(e.submit(r));
      for (size_t i = 0; i < reqs.size(); ++i)
        EXPECT_EQ(collect(*streams[i]).tokens, want[i].tokens) << which << ", request " << i << " in a batch, budget " << budget;
      e.wait_idle();
      expect_all_free(e);
      const EngineStats st = e.stats();
      EXPECT_GT(st.drafted_tokens, 0) << which;
      if (!self && budget == 4096) {
        EXPECT_LT(st.accepted_tokens, st.drafted_tokens) << which << ": nothing was rejected";
      }
    }
    if (!self) continue;
    // A pool too small for everyone: preempted speculating requests resume exactly.
    EngineOptions o = options(16, 64);
    o.state.pad_rows = backend_->decode_step_max_pad();  // as the engine plans it
    o.state.memory_bytes = kv_memory_for_blocks(model_->config(), o.state, (64 / o.state.block_tokens + 1) * 2);
    Engine small(*model_, *backend_, nullptr, o, draft);
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (const Request& r : reqs) streams.push_back(small.submit(r));
    for (size_t i = 0; i < reqs.size(); ++i)
      EXPECT_EQ(collect(*streams[i]).tokens, want[i].tokens) << which << ", request " << i << " in a small pool";
    small.wait_idle();
    EXPECT_GT(small.stats().preemptions, 0) << which;
    expect_all_free(small);
  }
}

// Stop ids and max_tokens end a request inside a verification exactly where plain decoding ends
// it; penalties (greedy, not plain: the host sampler verifies) and logprobs are unchanged (bit for
// bit on a bitwise batch-invariant backend, within float32 noise on the others).
TEST_P(EngineSpeculativeTest, StopsPenaltiesAndLogprobsBehaveAsWithout) {
  std::vector<Request> reqs;
  for (size_t i = 0; i < 16; ++i) {
    Request r = request(i, i % 2 ? Drafter::kModel : Drafter::kNgram, 5 + static_cast<int64_t>(i));
    if (i % 4 == 1) r.sampling.frequency_penalty = 0.7f;
    if (i % 4 == 2) r.sampling.repetition_penalty = 1.2f;
    r.sampling.logprobs = i % 3 == 0;
    reqs.push_back(r);
  }
  // A stop id: a token each request's plain output has in its middle.
  std::vector<Result> base = plain_results(reqs);
  for (size_t i = 0; i < reqs.size(); ++i)
    if (i % 2 == 0 && base[i].tokens.size() > 3) reqs[i].stop_ids = {base[i].tokens[base[i].tokens.size() / 2]};
  const std::vector<Result> want = plain_results(reqs);
  Engine e(*model_, *backend_, nullptr, options(16), self_draft_.get());
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (const Request& r : reqs) streams.push_back(e.submit(r));
  for (size_t i = 0; i < reqs.size(); ++i) {
    const Result r = collect(*streams[i]);
    EXPECT_EQ(r.tokens, want[i].tokens) << "request " << i;
    EXPECT_EQ(r.finish, want[i].finish) << "request " << i;
    EXPECT_EQ(r.usage.completion_tokens, want[i].usage.completion_tokens) << "request " << i;
    if (reqs[i].sampling.logprobs) {
      if (backend_->bitwise_batch_invariant()) {
        EXPECT_EQ(r.logprobs, want[i].logprobs) << "request " << i;
      } else {
        // cuBLAS sums a verification batch of 64+ rows in another order than plain decoding's
        // kernels: float32 noise (the fixtures are float32).
        ASSERT_EQ(r.logprobs.size(), want[i].logprobs.size()) << "request " << i;
        for (size_t t = 0; t < r.logprobs.size(); ++t)
          EXPECT_NEAR(r.logprobs[t], want[i].logprobs[t], 1e-4) << "request " << i << " token " << t;
      }
    }
  }
  e.wait_idle();
  expect_all_free(e);
  EXPECT_GT(e.stats().accepted_tokens, 0);
}

// Sampled requests: the same seed gives the same tokens (alone and in a batch), and a draft model
// equal to the target has every draft accepted (q = p: the rule accepts with probability 1).
TEST_P(EngineSpeculativeTest, SampledRequestsReproduceAndAcceptEqualDistributions) {
  auto sampled = [&](size_t i, Drafter d) {
    Request r = request(i, d, 16);
    r.sampling.temperature = 0.9f;
    r.sampling.top_k = 40;
    r.sampling.seed = 500 + i;
    return r;
  };
  for (Drafter d : {Drafter::kModel, Drafter::kNgram}) {
    Engine e(*model_, *backend_, nullptr, options(8), self_draft_.get());
    std::vector<Result> first;
    for (size_t i = 0; i < 8; ++i) first.push_back(collect(*e.submit(sampled(i, d))));
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (size_t i = 0; i < 8; ++i) streams.push_back(e.submit(sampled(i, d)));
    for (size_t i = 0; i < 8; ++i) {
      const Result r = collect(*streams[i]);
      EXPECT_EQ(r.tokens, first[i].tokens) << drafter_name(d) << ", request " << i;
      EXPECT_EQ(r.usage.completion_tokens, 16);
      if (d == Drafter::kModel) {
        EXPECT_GT(r.usage.drafted_tokens, 0);
        EXPECT_EQ(r.usage.accepted_tokens, r.usage.drafted_tokens) << "request " << i << ": q = p, yet a rejection";
      }
    }
    e.wait_idle();
    expect_all_free(e);
  }
}

TEST_P(EngineSpeculativeTest, AskingForAMissingDraftModelIsRefused) {
  Engine e(*model_, *backend_, nullptr, options(1));
  try {
    e.submit(request(0, Drafter::kModel));
    ADD_FAILURE() << "a model-drafted request ran without a draft model";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("no draft model"), std::string::npos) << err.what();
  }
  EngineOptions no_room = options(1);
  no_room.state.draft_tokens = 0;
  EXPECT_THROW(Engine(*model_, *backend_, nullptr, no_room, self_draft_.get()), Error);
  EXPECT_EQ(collect(*e.submit(request(0, Drafter::kNone))).tokens.size(), 20u);  // the engine still serves
}

// Found by fuzz_engine: a request asking the draft model for 0 drafts has no draft length, and
// the draft model's prefill read it (a null dereference in the scheduler thread). It decodes
// plainly now.
TEST_P(EngineSpeculativeTest, ZeroDraftsFromTheDraftModelDecodePlainly) {
  Engine e(*model_, *backend_, nullptr, options(2), self_draft_.get());
  Request r = request(0, Drafter::kModel);
  r.max_drafts = 0;
  const Result got = collect(*e.submit(r));
  EXPECT_EQ(got.tokens, plain_results({r})[0].tokens);
  EXPECT_EQ(e.stats().drafted_tokens, 0);
  expect_all_free(e);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, EngineSpeculativeTest,
                         ::testing::Combine(::testing::Values("lfm2_c_layertypes_untied_convbias_f32",
                                                              "lfm2moe_g_untied_nobias_scaled_f32"),
                                            ::testing::Values("cpu", "fake-device"
#if LFM_HAVE_CUDA
                                                              ,
                                                              "cuda"  // skipped without a GPU
#endif
#if LFM_HAVE_CUDA_EMU
                                                              ,
                                                              "cuda-emu"  // the CUDA backend on the CPU emulator
#endif
                                                              ),
                                            ::testing::Values(int64_t{1}, int64_t{16})),
                         [](const auto& info) { return test::fixture_backend_block_name(info); });

}  // namespace
}  // namespace lfm

namespace lfm {
namespace {

// Every fixture (dense and MoE, f32 and bf16, tied and untied, all-attention): greedy tokens with
// each drafter equal plain decoding's, on the CPU backend, at block sizes 1 and 16.
TEST(EngineSpeculativeFixtures, EveryFixtureKeepsGreedyOutputsWithEveryDrafter) {
  ThreadPool pool(2);
  const std::vector<std::string> fixtures = {"lfm2_a_fullattnidxs_tied_f32",       "lfm2_b_layertypes_tied_f32",
                                             "lfm2_c_layertypes_untied_convbias_f32", "lfm2_d_fullattnidxs_tied_bf16",
                                             "lfm2_e_allattn_noadjust_f32",       "lfm2moe_f_tied_expertbias_f32",
                                             "lfm2moe_g_untied_nobias_scaled_f32"};
  for (const std::string& name : fixtures) {
    LoadOptions load;
    std::string why;
    auto backend = test::make_named_backend("cpu", pool, load, &why);
    ASSERT_TRUE(backend) << why;
    auto model = load_model(test::fixture_dir(name), load);
    auto self = load_model(test::fixture_dir(name), load);
    auto other = load_model(test::fixture_dir(name == fixtures[0] ? fixtures[1] : fixtures[0]), load);
    std::mt19937 rng(3);
    std::vector<int32_t> prompt(9);
    for (auto& t : prompt) t = static_cast<int32_t>(rng() % model->config().vocab_size);
    for (int64_t block : {int64_t{1}, int64_t{16}}) {
      EngineOptions o;
      o.state.ctx_size = 96;
      o.state.parallel = 2;
      o.state.block_tokens = block;
      o.state.draft_tokens = 4;
      Request r;
      r.prompt = prompt;
      r.max_tokens = 16;
      r.ignore_eos = true;
      std::vector<int32_t> want;
      {
        Engine plain(*model, *backend, nullptr, o);
        want = collect(*plain.submit(r)).tokens;
        // P + G + P: prompt lookup then finds drafts.
        r.prompt.insert(r.prompt.end(), want.begin(), want.end());
        r.prompt.insert(r.prompt.end(), prompt.begin(), prompt.end());
        want = collect(*plain.submit(r)).tokens;
      }
      for (const Model* draft : {self.get(), other.get()})
        for (Drafter d : {Drafter::kNgram, Drafter::kModel}) {
          Engine e(*model, *backend, nullptr, o, draft);
          Request s = r;
          s.drafter = d;
          s.max_drafts = 4;
          const Result got = collect(*e.submit(s));
          EXPECT_EQ(got.tokens, want) << name << ", block " << block << ", " << drafter_name(d)
                                      << (draft == self.get() ? " (self)" : " (other)") << " " << got.error;
          if (d == Drafter::kModel && draft == self.get()) {
            EXPECT_EQ(got.usage.accepted_tokens, got.usage.drafted_tokens) << name;
          }
        }
    }
  }
}

}  // namespace
}  // namespace lfm
