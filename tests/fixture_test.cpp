// End-to-end parity with Hugging Face transformers on the bundled fixtures
// (tests/data/hf/*/reference.json, computed by transformers v5.2.0 in float32), through the paged
// state cache with float32 K/V and conv states (as transformers' float32 references keep them) and
// KV blocks of 1, 16 and 256 tokens.
// Tolerances: logits within 1e-4 absolute (float32 engines differ only in summation order);
// greedy tokens exactly equal (every recorded step wins its argmax by >= 5e-3).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/thread_pool.h"
#include "engine/engine.h"
#include "kernels/cpu_backend.h"
#include "model/forward.h"
#include "model_test_util.h"
#include "test_util.h"

namespace lfm {
namespace {

constexpr double kLogitTol = 1e-4;

// Parameters: (fixture, backend, KV block size) — every fixture runs on the portable reference
// backend and each SIMD backend the CPU has, with blocks of 1, 16 and 256 tokens.
class FixtureTest : public ::testing::TestWithParam<std::tuple<std::string, std::string, int64_t>> {
 protected:
  void SetUp() override {
    const auto& [fixture, backend, block] = GetParam();
    if (!isa_supported(parse_isa(backend))) GTEST_SKIP() << "CPU lacks " << backend;
    model_ = load_model(test::fixture_dir(fixture));
    backend_ = make_backend_for(parse_isa(backend), pool_);
    ref_ = test::reference(fixture);
    plan_.ctx_size = 128;
    plan_.block_tokens = block;
    plan_.type = DType::F32;
    cache_ = make_state_cache(*model_, plan_);
    fwd_ = std::make_unique<Forward>(*model_, *backend_, *cache_);
    seq_ = cache_->open(plan_.ctx_size);
  }
  // The live conv state of conv layer `conv_layer` of the sequence, [K-1, d] float32.
  const float* conv_state(int64_t conv_layer) const {
    const ConvPool p = cache_->conv_pool(conv_layer);
    return reinterpret_cast<const float*>(static_cast<const uint8_t*>(p.state) + seq_->conv_slot() * p.slot_bytes());
  }
  ThreadPool pool_{2};
  StatePlanOptions plan_;
  std::unique_ptr<StateCache> cache_;
  std::unique_ptr<Forward> fwd_;
  Sequence* seq_ = nullptr;
  std::unique_ptr<Model> model_;
  std::unique_ptr<Backend> backend_;
  nlohmann::json ref_;
};

TEST_P(FixtureTest, FullForwardLogits) {
  const auto ids = ref_["full_forward"]["input_ids"].get<std::vector<int32_t>>();
  const auto expect = ref_["full_forward"]["logits"].get<std::vector<std::vector<double>>>();
  StepOutput out;
  BatchItem item{seq_, ids, true};
  fwd_->step(std::span<const BatchItem>(&item, 1), out);
  ASSERT_EQ(out.n_rows[0], static_cast<int64_t>(ids.size()));
  for (size_t p = 0; p < ids.size(); ++p)
    EXPECT_LE(test::max_abs_diff(out.row(0, p), out.vocab, expect[p]), kLogitTol) << "position " << p;
}

TEST_P(FixtureTest, PrefillThenDecodeLogits) {
  const auto& pd = ref_["prefill_decode"];
  const auto ids = pd["input_ids"].get<std::vector<int32_t>>();
  const int64_t n_prefill = pd["n_prefill"].get<int64_t>();
  const auto expect = pd["logits"].get<std::vector<std::vector<double>>>();
  StepOutput out;
  BatchItem item{seq_, std::span<const int32_t>(ids.data(), n_prefill), true};
  fwd_->step(std::span<const BatchItem>(&item, 1), out);
  for (int64_t p = 0; p < n_prefill; ++p)
    EXPECT_LE(test::max_abs_diff(out.row(0, p), out.vocab, expect[p]), kLogitTol) << "prefill position " << p;
  for (size_t p = n_prefill; p < ids.size(); ++p) {
    BatchItem one{seq_, std::span<const int32_t>(ids.data() + p, 1), true};
    fwd_->step(std::span<const BatchItem>(&one, 1), out);
    EXPECT_LE(test::max_abs_diff(out.row(0, 0), out.vocab, expect[p]), kLogitTol) << "decode position " << p;
  }
  EXPECT_EQ(seq_->n_past(), static_cast<int64_t>(ids.size()));
  // The first conv layer's final state: HF keeps the last K u's [d, K]; we keep the last K-1.
  if (pd.contains("first_conv_layer_final_conv_state") && !pd["first_conv_layer_final_conv_state"].is_null()) {
    const auto& cs = pd["first_conv_layer_final_conv_state"];
    const int64_t layer = cs["layer"].get<int64_t>();
    const auto hf = cs["values"][0].get<std::vector<std::vector<double>>>();  // [d][K]
    const auto& cfg = model_->config();
    const float* s = conv_state(model_->state_slot(layer));
    for (int64_t c = 0; c < cfg.hidden_size; ++c)
      for (int64_t k = 1; k < cfg.conv_kernel; ++k)
        EXPECT_NEAR(s[(k - 1) * cfg.hidden_size + c], hf[c][k], 1e-4) << "channel " << c << " tap " << k;
  }
}

TEST_P(FixtureTest, GreedyRunsMatchExactly) {
  for (const auto& run : ref_["greedy"]["runs"]) {
    const auto prompt = run["prompt"].get<std::vector<int32_t>>();
    const auto expect = run["new_tokens"].get<std::vector<int32_t>>();
    const auto step_logits = run["step_logits"].get<std::vector<std::vector<double>>>();
    // Through the engine, as every front end generates.
    EXPECT_EQ(test::greedy(*model_, *backend_, prompt, static_cast<int64_t>(expect.size()), nullptr, plan_), expect);
    // Step by step to check every step's logits as well.
    cache_->reset(*seq_);
    StepOutput out;
    BatchItem item{seq_, prompt, false};
    fwd_->step(std::span<const BatchItem>(&item, 1), out);
    for (size_t s = 0; s < expect.size(); ++s) {
      EXPECT_LE(test::max_abs_diff(out.row(0), out.vocab, step_logits[s]), kLogitTol) << "greedy step " << s;
      BatchItem next{seq_, std::span<const int32_t>(&expect[s], 1), false};
      if (s + 1 < expect.size()) fwd_->step(std::span<const BatchItem>(&next, 1), out);
    }
  }
}

TEST_P(FixtureTest, OneTokenPromptMatchesNoCacheAnswer) {
  const auto& otp = ref_["one_token_prompt"];
  const auto prompt = otp["prompt"].get<std::vector<int32_t>>();
  const auto expect = otp["nocache_new_tokens"].get<std::vector<int32_t>>();
  const auto step_logits = otp["nocache_step_logits"].get<std::vector<std::vector<double>>>();
  StepOutput out;
  BatchItem item{seq_, prompt, false};
  fwd_->step(std::span<const BatchItem>(&item, 1), out);
  std::vector<int32_t> got;
  for (size_t s = 0; s < expect.size(); ++s) {
    EXPECT_LE(test::max_abs_diff(out.row(0), out.vocab, step_logits[s]), kLogitTol) << "step " << s;
    got.push_back(argmax(out.row(0), out.vocab));
    BatchItem next{seq_, std::span<const int32_t>(&got.back(), 1), false};
    if (s + 1 < expect.size()) fwd_->step(std::span<const BatchItem>(&next, 1), out);
  }
  EXPECT_EQ(got, expect);
}

// Half-precision state (K/V and conv states stored in f16 or bf16, as transformers keeps them for
// bf16 checkpoints and llama.cpp by default) against float32 state, on the full-forward logits. Each stored value is rounded once (unit roundoff u = 2^-11 for f16, 2^-8
// for bf16) and the errors of many values add up through the layers: the bound is 8u times the
// largest |logit| of the f32 run (measured on these fixtures: 2.1u to 5.6u).
class StateTypeTest : public ::testing::TestWithParam<std::string> {};

TEST_P(StateTypeTest, HalfPrecisionStateStaysWithinItsBound) {
  auto model = load_model(test::fixture_dir(GetParam()));
  ThreadPool pool(2);
  auto be = make_reference_backend(pool);
  const auto ref = test::reference(GetParam());
  const auto ids = ref["full_forward"]["input_ids"].get<std::vector<int32_t>>();
  StatePlanOptions plan = test::f32_plan(64);
  const auto f32 = test::prompt_logits(*model, *be, ids, plan);
  double scale = test::max_abs(f32);
  for (const auto& [type, rel] : {std::pair{DType::F16, 8.0 / 2048}, std::pair{DType::BF16, 8.0 / 256}}) {
    plan.type = type;
    const double d = test::max_abs_diff(test::prompt_logits(*model, *be, ids, plan), f32);
    std::printf("[ %s %-4s state ] max|dlogit| %.3g  (max|logit| %.3g, bound %.3g)\n", GetParam().c_str(),
                dtype_name(type), d, scale, rel * scale);
    EXPECT_LE(d, rel * scale) << dtype_name(type);
    EXPECT_GT(d, 0.0) << dtype_name(type) << " should round something";
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, StateTypeTest, ::testing::ValuesIn(test::all_fixtures()));

// bf16 activations (LoadOptions::bf16_activations): every input of a matmul over a BF16 matrix is
// rounded once (u = 2^-8), on the reference, AVX2 (rounded, then the float kernels) and AVX-512
// (VDPBF16PS over kPairs16 panels where the CPU has AVX-512 BF16, AMX with one term where it has
// that). Bound as for bf16 state: 8u times the largest |logit| of transformers' float32 run
// (measured on the BF16 fixture: about 2.6u). Float32 checkpoints are untouched by the option.
TEST(Bf16Activations, StayWithinTheirBoundOnEveryPath) {
  const std::string fixture = "lfm2_d_fullattnidxs_tied_bf16";
  auto model = load_model(test::fixture_dir(fixture), LoadOptions{.bf16_activations = true});
  ASSERT_TRUE(model->bf16_activations());
  const bool pairs = model->weights().layers[0].ffn.w1.packed_layout == PackedLayout::kPairs16;
  std::printf("[ bf16 activations ] feed-forward matrices packed in column pairs: %s\n", pairs ? "yes" : "no");
  const auto ref = test::reference(fixture);
  const auto ids = ref["full_forward"]["input_ids"].get<std::vector<int32_t>>();
  const auto hf = ref["full_forward"]["logits"].get<std::vector<std::vector<double>>>();
  double scale = 0;
  for (const auto& row : hf)
    for (double v : row) scale = std::max(scale, std::abs(v));
  ThreadPool pool(2);
  for (const std::string& isa : test::all_isas()) {
    if (!isa_supported(parse_isa(isa))) continue;
    auto be = make_backend_for(parse_isa(isa), pool);
    const auto got = test::prompt_logits(*model, *be, ids);
    double d = 0;
    for (size_t t = 0; t < got.size(); ++t) d = std::max(d, test::max_abs_diff(got[t], hf[t]));
    std::printf("[ bf16 activations %-7s ] max|dlogit| %.3g  (max|logit| %.3g, bound %.3g)\n", isa.c_str(), d, scale,
                8.0 / 256 * scale);
    EXPECT_LE(d, 8.0 / 256 * scale) << isa;
    EXPECT_GT(d, 10 * kLogitTol) << isa << ": the activations should have been rounded";
  }
  // A float32 checkpoint: the option changes nothing, bit for bit.
  auto f32 = load_model(test::fixture_dir("lfm2_a_fullattnidxs_tied_f32"), LoadOptions{.bf16_activations = true});
  auto plain = load_model(test::fixture_dir("lfm2_a_fullattnidxs_tied_f32"));
  EXPECT_FALSE(f32->bf16_activations());
  auto be = make_cpu_backend(pool);
  EXPECT_EQ(test::prompt_logits(*f32, *be, ids), test::prompt_logits(*plain, *be, ids));
}

std::string param_name(const ::testing::TestParamInfo<FixtureTest::ParamType>& info) {
  return std::get<0>(info.param) + "_" + std::get<1>(info.param) + "_block" + std::to_string(std::get<2>(info.param));
}

INSTANTIATE_TEST_SUITE_P(Dense, FixtureTest,
                         ::testing::Combine(::testing::ValuesIn(test::dense_fixtures()),
                                            ::testing::ValuesIn(test::all_isas()),
                                            ::testing::Values(int64_t{1}, int64_t{16}, int64_t{256})),
                         param_name);
INSTANTIATE_TEST_SUITE_P(Moe, FixtureTest,
                         ::testing::Combine(::testing::ValuesIn(test::moe_fixtures()),
                                            ::testing::ValuesIn(test::all_isas()),
                                            ::testing::Values(int64_t{1}, int64_t{16}, int64_t{256})),
                         param_name);

}  // namespace
}  // namespace lfm
