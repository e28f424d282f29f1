// Speculative steps over the hybrid state (issue 37, item 1): a verification step feeds a token
// and k drafts; keeping any prefix of it (StateCache::commit_accepted) must leave the sequence
// bit for bit as if only that prefix had been fed: the KV past it unread, the conv state restored
// from the snapshot after its last token, and only kept tokens in the prefix cache. Checked on
// the CPU backend, the fake device backend (whose memory the host cannot touch) and, with a GPU,
// the CUDA backend (every step here is short: its own batch-invariant kernels), at block
// sizes 1 (every position a block end, so prefix-cache and speculative snapshots coincide) and
// 16, with float32 and bf16 state.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "core/error.h"
#include "core/thread_pool.h"
#include "engine/sampler.h"
#include "model/forward.h"
#include "model_test_util.h"
#include "test_backends.h"
#include "test_util.h"

namespace lfm {
namespace {

constexpr int64_t kDrafts = 4;

// (fixture, backend, block tokens, state type)
using Param = std::tuple<std::string, std::string, int64_t, std::string>;

class SpeculativeStateTest : public ::testing::TestWithParam<Param> {
 protected:
  void SetUp() override {
    LoadOptions load;
    std::string why;
    backend_ = test::make_named_backend(std::get<1>(GetParam()), pool_, load, &why);
    if (!backend_) GTEST_SKIP() << why;
    model_ = load_model(test::fixture_dir(std::get<0>(GetParam())), load);
    vocab_ = model_->config().vocab_size;
    plan_ = test::f32_plan(128, std::get<2>(GetParam()));
    plan_.type = parse_state_type(std::get<3>(GetParam()), DType::F32);
    plan_.parallel = 3;
    plan_.draft_tokens = kDrafts;
    std::mt19937 rng(5);
    for (int i = 0; i < 13; ++i) prompt_.push_back(static_cast<int32_t>(rng() % vocab_));
  }

  // One step of `tokens` for `seq`; returns every row's logits.
  std::vector<std::vector<float>> step(Forward& fwd, Sequence* seq, const std::vector<int32_t>& tokens,
                                       bool speculative = false) {
    BatchItem item{seq, tokens, true, false, speculative};
    StepOutput out;
    fwd.step(std::span<const BatchItem>(&item, 1), out);
    std::vector<std::vector<float>> rows;
    for (int64_t r = 0; r < out.n_rows[0]; ++r) rows.emplace_back(out.row(0, r), out.row(0, r) + vocab_);
    return rows;
  }
  int32_t best(const std::vector<float>& row) const { return argmax(row.data(), vocab_); }
  static bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
  }

  ThreadPool pool_{2};
  std::unique_ptr<Backend> backend_;  // outlives the model whose weights it prepared
  std::unique_ptr<Model> model_;
  int64_t vocab_ = 0;
  StatePlanOptions plan_;
  std::vector<int32_t> prompt_;
};

// For every number of accepted drafts a: the verification rows up to a, and every later step,
// are the bits of a sequence fed only the kept tokens; a third sequence resuming from the prefix
// cache afterwards agrees too.
TEST_P(SpeculativeStateTest, KeepingAnyPrefixIsExactlyFeedingOnlyThatPrefix) {
  std::mt19937 rng(9);
  for (int64_t a = 0; a <= kDrafts; ++a) {
    auto cache = make_state_cache(*model_, plan_, *backend_);
    Forward fwd(*model_, *backend_, *cache);
    std::vector<int32_t> verify;  // the last sampled token, then k drafts
    for (int64_t i = 0; i <= kDrafts; ++i) verify.push_back(static_cast<int32_t>(rng() % vocab_));

    Sequence* spec = cache->open(128);
    step(fwd, spec, prompt_);
    const auto rows = step(fwd, spec, verify, /*speculative=*/true);
    ASSERT_EQ(static_cast<int64_t>(rows.size()), kDrafts + 1);
    cache->commit_accepted(*spec, a + 1);
    ASSERT_EQ(spec->n_past(), static_cast<int64_t>(prompt_.size()) + a + 1);

    Sequence* plain = cache->open(128);
    std::vector<int32_t> kept = prompt_;
    kept.insert(kept.end(), verify.begin(), verify.begin() + a + 1);
    const auto want = step(fwd, plain, kept);
    for (int64_t r = 0; r <= a; ++r)
      EXPECT_TRUE(same_bits(rows[r], want[prompt_.size() + r])) << "accepted " << a << ", verify row " << r;

    // Four more tokens, greedy, on both: the same logits, bit for bit.
    int32_t next = best(rows[a]);
    std::vector<std::vector<float>> last(2);
    for (int i = 0; i < 4; ++i) {
      last[0] = step(fwd, spec, {next})[0];
      last[1] = step(fwd, plain, {next})[0];
      ASSERT_TRUE(same_bits(last[0], last[1])) << "accepted " << a << ", token " << i << " after the rollback";
      next = best(last[0]);
    }
    // Only kept tokens reached the prefix cache: a sequence resuming from it gets the bits of one
    // computing everything.
    std::vector<int32_t> history(spec->tokens().begin(), spec->tokens().end());
    cache->close(spec);
    Sequence* fresh = cache->open(128);
    const auto fresh_rows = step(fwd, fresh, history);
    Sequence* resumed = cache->open(128);
    const int64_t reused = cache->attach_prefix(*resumed, history);
    EXPECT_GT(reused, 0);
    const auto resumed_rows = step(fwd, resumed, std::vector<int32_t>(history.begin() + reused, history.end()));
    EXPECT_TRUE(same_bits(resumed_rows.back(), fresh_rows.back()))
        << "accepted " << a << ", resumed after " << reused << " cached tokens";
    for (Sequence* s : {plain, fresh, resumed}) cache->close(s);
  }
}

// Greedy decoding through verification steps with a drafter that is right, then wrong, in turns:
// the same tokens (and logits) as plain greedy decoding, with a plain sequence in the same steps.
TEST_P(SpeculativeStateTest, GreedyVerificationWithAnyDrafterEqualsPlainGreedy) {
  constexpr int kTokens = 24;
  auto cache = make_state_cache(*model_, plan_, *backend_);
  Forward fwd(*model_, *backend_, *cache);
  // Plain greedy: the reference.
  Sequence* ref = cache->open(128);
  std::vector<int32_t> want;
  std::vector<std::vector<float>> want_logits;
  auto row = step(fwd, ref, prompt_).back();
  for (int i = 0; i < kTokens; ++i) {
    want.push_back(best(row));
    want_logits.push_back(row);
    row = step(fwd, ref, {want.back()})[0];
  }
  cache->close(ref);

  Sequence* spec = cache->open(128);
  Sequence* neighbour = cache->open(128);  // decodes plainly in the same steps
  auto first = step(fwd, spec, prompt_).back();
  step(fwd, neighbour, prompt_);
  std::vector<int32_t> got = {best(first)};
  std::vector<std::vector<float>> got_logits = {first};
  int round = 0;
  while (static_cast<int>(got.size()) < kTokens) {
    // Drafts: the true continuation, with one wrong token at a position that moves each round.
    std::vector<int32_t> verify = {got.back()};
    const size_t at = got.size();
    for (int64_t i = 0; i < kDrafts && at + i < want.size(); ++i) {
      int32_t d = want[at + i];
      if (i == round % (kDrafts + 1)) d = static_cast<int32_t>((d + 1) % vocab_);
      verify.push_back(d);
    }
    ++round;
    std::vector<BatchItem> items = {{spec, verify, true, false, true}, {neighbour, std::span<const int32_t>(&want[0], 1), false}};
    StepOutput out;
    fwd.step(items, out);
    // Accept drafts while each equals the greedy choice after the previous row.
    int64_t accepted = 0;
    while (accepted + 1 < static_cast<int64_t>(verify.size()) &&
           argmax(out.row(0, accepted), vocab_) == verify[accepted + 1])
      ++accepted;
    for (int64_t r = 0; r <= accepted; ++r) {
      const int32_t tok = argmax(out.row(0, r), vocab_);
      if (r < accepted) {
        ASSERT_EQ(tok, verify[r + 1]);
      }
      got.push_back(tok);
      got_logits.emplace_back(out.row(0, r), out.row(0, r) + vocab_);
    }
    cache->commit_accepted(*spec, accepted + 1);
  }
  got.resize(kTokens);
  EXPECT_EQ(got, want);
  for (int i = 0; i < kTokens; ++i) EXPECT_TRUE(same_bits(got_logits[i], want_logits[i])) << "token " << i;
}

// A draft model's chain: a step of pending tokens whose last opens the chain (the ones before it
// sure), then one-token speculative steps; keeping any prefix of the chain leaves the bits of a
// sequence fed only the kept tokens, and plain steps continue from there.
TEST_P(SpeculativeStateTest, ChainsOfOneTokenStepsRollBackExactly) {
  std::mt19937 rng(11);
  for (int64_t keep = 1; keep <= kDrafts + 1; ++keep) {
    auto cache = make_state_cache(*model_, plan_, *backend_);
    Forward fwd(*model_, *backend_, *cache);
    Sequence* spec = cache->open(128);
    step(fwd, spec, std::vector<int32_t>(prompt_.begin(), prompt_.begin() + 5));
    // Pending: the rest of the prompt; the chain starts at its last token.
    const std::vector<int32_t> pending(prompt_.begin() + 5, prompt_.end());
    std::vector<int32_t> chain = {pending.back()};
    {
      BatchItem item{spec, pending, false, false, true, static_cast<int64_t>(pending.size()) - 1};
      StepOutput out;
      fwd.step(std::span<const BatchItem>(&item, 1), out);
    }
    std::vector<std::vector<float>> rows;
    for (int64_t j = 0; j < kDrafts; ++j) {
      chain.push_back(static_cast<int32_t>(rng() % vocab_));
      rows.push_back(step(fwd, spec, {chain.back()}, true)[0]);
    }
    ASSERT_EQ(spec->speculative_tokens(), kDrafts + 1);
    EXPECT_THROW(step(fwd, spec, {1}, true), Error);  // past the room for drafts
    cache->commit_accepted(*spec, keep);
    ASSERT_EQ(spec->speculative_tokens(), 0);
    ASSERT_EQ(spec->n_past(), static_cast<int64_t>(prompt_.size()) + keep - 1);

    Sequence* plain = cache->open(128);
    std::vector<int32_t> kept = prompt_;
    kept.insert(kept.end(), chain.begin() + 1, chain.begin() + keep);
    const auto want = step(fwd, plain, kept);
    for (int64_t r = 1; r < keep; ++r)
      EXPECT_TRUE(same_bits(rows[r - 1], want[prompt_.size() + r - 1])) << "kept " << keep << ", chain row " << r;
    int32_t next = best(want.back());
    for (int i = 0; i < 3; ++i) {
      const auto a = step(fwd, spec, {next})[0];
      const auto b = step(fwd, plain, {next})[0];
      ASSERT_TRUE(same_bits(a, b)) << "kept " << keep << ", token " << i << " after the rollback";
      next = best(a);
    }
  }
}

// Misuse is refused before anything changes: a step longer than the room for drafts, keeping
// tokens after a plain step, keeping none or more than were fed.
TEST_P(SpeculativeStateTest, MisuseIsRefusedNamingTheProblem) {
  auto cache = make_state_cache(*model_, plan_, *backend_);
  Forward fwd(*model_, *backend_, *cache);
  Sequence* seq = cache->open(128);
  step(fwd, seq, prompt_);
  const std::vector<int32_t> too_long(kDrafts + 2, 1);
  EXPECT_THROW(step(fwd, seq, too_long, true), Error);
  EXPECT_EQ(seq->n_past(), static_cast<int64_t>(prompt_.size()));
  const std::vector<int32_t> one = {3};
  step(fwd, seq, one);
  try {
    cache->commit_accepted(*seq, 1);
    ADD_FAILURE() << "a plain step's tokens were kept again";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not speculative"), std::string::npos) << e.what();
  }
  const std::vector<int32_t> verify = {3, 4, 5};
  step(fwd, seq, verify, true);
  EXPECT_THROW(cache->commit_accepted(*seq, 0), Error);
  EXPECT_THROW(cache->commit_accepted(*seq, 4), Error);
  EXPECT_THROW(step(fwd, seq, one), Error);  // a plain step while the chain is open
  cache->commit_accepted(*seq, 2);
  EXPECT_EQ(seq->n_past(), static_cast<int64_t>(prompt_.size()) + 3);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, SpeculativeStateTest,
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
                                            ::testing::Values(int64_t{1}, int64_t{16}), ::testing::Values("f32", "bf16")),
                         [](const auto& info) {
                           return test::fixture_backend_block_name(info) + "_" + std::get<3>(info.param);
                         });

}  // namespace
}  // namespace lfm
