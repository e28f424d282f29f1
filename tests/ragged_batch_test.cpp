// Ragged batches, chunked prefill and state reuse through the paged state cache (in each
// checkpoint's default state type: float32, or bfloat16 for fixture d). The bars are bitwise
// equality (the kernels compute each row independently of its neighbours, and every stored state
// value is rounded once and read back the same way whatever the chunking) checked with a 1e-5
// tolerance as well.
#include <gtest/gtest.h>

#include <cstring>

#include "core/error.h"
#include "core/thread_pool.h"
#include "engine/engine.h"
#include "kernels/cpu_backend.h"
#include "model/forward.h"
#include "model_test_util.h"
#include "test_util.h"

namespace lfm {
namespace {

// Parameter: a fixture, with "+bf16act" for LoadOptions::bf16_activations.
class RaggedBatchTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    const std::string suffix = "+bf16act";
    std::string fixture = GetParam();
    const bool bf16act = fixture.ends_with(suffix);
    if (bf16act) fixture.resize(fixture.size() - suffix.size());
    model_ = load_model(test::fixture_dir(fixture), LoadOptions{.bf16_activations = bf16act});
    backend_ = make_cpu_backend(pool_);  // the production backend (AVX2 where available)
    const auto ref = test::reference(fixture);
    for (const auto& run : ref["greedy"]["runs"]) prompts_.push_back(run["prompt"].get<std::vector<int32_t>>());
    prompts_.push_back(ref["full_forward"]["input_ids"].get<std::vector<int32_t>>());
    prompts_.push_back(ref["one_token_prompt"]["prompt"].get<std::vector<int32_t>>());
    plan_.ctx_size = 64;
    plan_.parallel = 8;
    cache_ = make_state_cache(*model_, plan_);
  }

  // All-position logits of one prompt run alone in one step, in a cache of its own.
  std::vector<std::vector<float>> alone(const std::vector<int32_t>& ids) {
    auto cache = make_state_cache(*model_, plan_);
    Forward fwd(*model_, *backend_, *cache);
    StepOutput out;
    BatchItem item{cache->open(64), ids, true};
    fwd.step(std::span<const BatchItem>(&item, 1), out);
    std::vector<std::vector<float>> rows;
    for (size_t p = 0; p < ids.size(); ++p) rows.emplace_back(out.row(0, p), out.row(0, p) + out.vocab);
    return rows;
  }
  std::vector<float> conv_state(const Sequence& seq) const {
    if (model_->config().n_conv_layers() == 0) return {};
    const ConvPool p = cache_->conv_pool(0);
    const auto* b = static_cast<const uint8_t*>(p.state) + seq.conv_slot() * p.slot_bytes();
    return std::vector<float>(reinterpret_cast<const float*>(b), reinterpret_cast<const float*>(b + p.slot_bytes()));
  }

  ThreadPool pool_{2};
  StatePlanOptions plan_;
  std::unique_ptr<StateCache> cache_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<Backend> backend_;
  std::vector<std::vector<int32_t>> prompts_;
};

void expect_rows_equal(const float* got, const std::vector<float>& want, const std::string& what) {
  EXPECT_LE(test::max_abs_diff(std::span<const float>(got, want.size()), std::span<const float>(want)), 1e-5) << what;
  EXPECT_EQ(std::memcmp(got, want.data(), want.size() * sizeof(float)), 0) << what << " (not bitwise equal)";
}

TEST_P(RaggedBatchTest, PackedSequencesMatchSeparateRuns) {
  ASSERT_GE(prompts_.size(), 3u);
  std::vector<BatchItem> items;
  for (const auto& p : prompts_) items.push_back({cache_->open(64), p, true});
  Forward fwd(*model_, *backend_, *cache_);
  StepOutput out;
  fwd.step(items, out);
  for (size_t s = 0; s < prompts_.size(); ++s) {
    const auto want = alone(prompts_[s]);
    ASSERT_EQ(out.n_rows[s], static_cast<int64_t>(prompts_[s].size()));
    for (size_t p = 0; p < want.size(); ++p)
      expect_rows_equal(out.row(s, p), want[p], "sequence " + std::to_string(s) + " position " + std::to_string(p));
  }
}

TEST_P(RaggedBatchTest, MixedPrefillAndDecodeInOneStep) {
  // Sequence 0 is mid-decode while sequence 1 prefills: continue 0 by one token and prefill 1.
  const auto& a = prompts_[3];  // 16 tokens
  const auto& b = prompts_[0];
  Forward fwd(*model_, *backend_, *cache_);
  Sequence* sa = cache_->open(64);
  Sequence* sb = cache_->open(64);
  StepOutput out;
  BatchItem first{sa, std::span<const int32_t>(a.data(), a.size() - 1), false};
  fwd.step(std::span<const BatchItem>(&first, 1), out);
  std::vector<BatchItem> items = {{sa, std::span<const int32_t>(&a.back(), 1), true}, {sb, b, true}};
  fwd.step(items, out);
  expect_rows_equal(out.row(0, 0), alone(a).back(), "decode row next to a prefill");
  const auto wb = alone(b);
  for (size_t p = 0; p < b.size(); ++p) expect_rows_equal(out.row(1, p), wb[p], "prefill row " + std::to_string(p));
}

TEST_P(RaggedBatchTest, ChunkedPrefillEqualsOnePrefill) {
  const auto& ids = prompts_[3];
  ASSERT_EQ(ids.size(), 16u);
  const auto want = alone(ids);
  for (const std::vector<size_t>& chunks : {std::vector<size_t>{5, 7, 4}, {1, 1, 14}, {2, 1, 3, 10}, {15, 1}}) {
    Forward fwd(*model_, *backend_, *cache_);
    Sequence* st = cache_->open(64);
    StepOutput out;
    size_t pos = 0;
    for (size_t n : chunks) {
      BatchItem item{st, std::span<const int32_t>(ids.data() + pos, n), true};
      fwd.step(std::span<const BatchItem>(&item, 1), out);
      for (size_t r = 0; r < n; ++r) expect_rows_equal(out.row(0, r), want[pos + r], "chunk split at position " + std::to_string(pos + r));
      pos += n;
    }
    cache_->close(st);
  }
}

TEST_P(RaggedBatchTest, ReusedStateGivesIdenticalOutputs) {
  // A, B, C, A, B, C through one engine: slots and blocks are reused, and the second round
  // resumes from the prefix cache.
  EngineOptions eo;
  eo.state = plan_;
  eo.state.parallel = 1;
  Engine engine(*model_, *backend_, nullptr, eo);
  std::vector<std::vector<int32_t>> first;
  for (int round = 0; round < 2; ++round)
    for (size_t i = 0; i < 3; ++i) {
      const auto got = test::generated_ids(*engine.submit(test::greedy_request(prompts_[i], 8)));
      if (round == 0)
        first.push_back(got);
      else
        EXPECT_EQ(got, first[i]) << "prompt " << i << " after reuse";
    }
}

TEST_P(RaggedBatchTest, BadInputLeavesStateUntouched) {
  Forward fwd(*model_, *backend_, *cache_);
  Sequence* st = cache_->open(8);
  StepOutput out;
  const std::vector<int32_t> ok = {1, 2, 3};
  BatchItem item{st, ok, false};
  fwd.step(std::span<const BatchItem>(&item, 1), out);
  const std::vector<float> conv_before = conv_state(*st);

  const std::vector<int32_t> bad_id = {5, static_cast<int32_t>(model_->config().vocab_size)};
  BatchItem bad{st, bad_id, false};
  EXPECT_THROW(fwd.step(std::span<const BatchItem>(&bad, 1), out), Error);
  const std::vector<int32_t> too_long(6, 3);  // 3 + 6 > context 8
  BatchItem over{st, too_long, false};
  try {
    fwd.step(std::span<const BatchItem>(&over, 1), out);
    FAIL() << "context overflow not reported";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("context size 8"), std::string::npos) << e.what();
  }
  EXPECT_EQ(st->n_past(), 3);
  EXPECT_EQ(conv_state(*st), conv_before);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, RaggedBatchTest,
                         ::testing::Values("lfm2_a_fullattnidxs_tied_f32", "lfm2_c_layertypes_untied_convbias_f32",
                                           "lfm2_d_fullattnidxs_tied_bf16", "lfm2_d_fullattnidxs_tied_bf16+bf16act",
                                           "lfm2_e_allattn_noadjust_f32",
                                           "lfm2moe_g_untied_nobias_scaled_f32"));

}  // namespace
}  // namespace lfm
