// The retriever forward (model/encoder.h) on the causal fixtures (their hidden states times the
// LM head must give transformers' logits) and on a bidirectional variant of one (texts must not
// depend on their neighbours, and the first token must see the last one). The bidirectional
// model against transformers' own Lfm2BidirectionalModel is in retrieval_fixture_test.cpp.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "core/thread_pool.h"
#include "kernels/backend_factory.h"
#include "kernels/cpu_backend.h"
#include "model/encoder.h"
#include "model/forward.h"
#include "model/state_plan.h"
#include "model_test_util.h"
#include "test_util.h"

namespace lfm {
namespace {

// A copy of fixture `name` whose config says `model_type` / `architecture`.
std::unique_ptr<test::TempDir> retyped_fixture(const std::string& name, const std::string& model_type,
                                               const std::string& architecture) {
  auto dir = std::make_unique<test::TempDir>("lfm_encoder");
  const std::filesystem::path src = test::fixture_dir(name);
  std::filesystem::copy_file(src / "model.safetensors", *dir / "model.safetensors");
  nlohmann::json cfg = test::read_json((src / "config.json").string());
  cfg["model_type"] = model_type;
  cfg["architectures"] = {architecture};
  dir->write("config.json", cfg.dump());
  return dir;
}

class EncoderTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (!isa_supported(parse_isa(GetParam()))) GTEST_SKIP() << "CPU lacks " << GetParam();
    be_ = make_backend_for(parse_isa(GetParam()), pool_);
  }
  ThreadPool pool_{2};
  std::unique_ptr<Backend> be_;
};

TEST_P(EncoderTest, CausalHiddenStatesGiveTransformersLogits) {
  for (const std::string fixture : {"lfm2_a_fullattnidxs_tied_f32", "lfm2_c_layertypes_untied_convbias_f32"}) {
    SCOPED_TRACE(fixture);
    const auto model = load_model(test::fixture_dir(fixture));
    const nlohmann::json ref = test::reference(fixture);
    const auto ids = ref["full_forward"]["input_ids"].get<std::vector<int32_t>>();
    const auto expect = ref["full_forward"]["logits"].get<std::vector<std::vector<double>>>();
    Encoder enc(*model, *be_);
    std::vector<float> hidden;
    const EncoderText text{ids, 0};
    enc.run({&text, 1}, EncoderRows::kAll, nullptr, hidden);
    const int64_t n = static_cast<int64_t>(ids.size()), V = model->config().vocab_size;
    ASSERT_EQ(hidden.size(), static_cast<size_t>(n * model->config().hidden_size));
    std::vector<float> logits(static_cast<size_t>(n * V));
    be_->matmul(hidden.data(), n, model->weights().lm_head, logits.data());
    for (int64_t t = 0; t < n; ++t)
      EXPECT_LT(test::max_abs_diff(logits.data() + t * V, V, expect[static_cast<size_t>(t)]), 1e-4) << "position " << t;
    // The last row alone is the last row of all.
    std::vector<float> last;
    enc.run({&text, 1}, EncoderRows::kLast, nullptr, last);
    EXPECT_TRUE(std::equal(last.begin(), last.end(), hidden.end() - model->config().hidden_size));
  }
}

// Every text's rows are the same bits alone and in a batch, in any order, for both kinds.
TEST_P(EncoderTest, TextsDoNotDependOnTheirNeighbours) {
  const auto bidir = retyped_fixture("lfm2_a_fullattnidxs_tied_f32", "lfm2_bidirectional",
                                     "Lfm2BidirectionalModel");
  const auto causal = load_model(test::fixture_dir("lfm2_a_fullattnidxs_tied_f32"));
  const auto bidirectional = load_model(bidir->str());
  ASSERT_TRUE(bidirectional->config().bidirectional);
  const std::vector<std::vector<int32_t>> ids = {{1, 17, 99, 3, 250, 8, 41}, {1}, {1, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22}, {1, 200, 2}};
  for (const Model* model : {causal.get(), bidirectional.get()}) {
    SCOPED_TRACE(model->config().architecture);
    Encoder enc(*model, *be_);
    for (const EncoderRows rows : {EncoderRows::kAll, EncoderRows::kFirst, EncoderRows::kLast}) {
      std::vector<std::vector<float>> alone;
      for (const auto& t : ids) {
        const EncoderText text{t, 0};
        enc.run({&text, 1}, rows, nullptr, alone.emplace_back());
      }
      std::vector<EncoderText> batch;
      for (size_t i = ids.size(); i-- > 0;) batch.push_back({ids[i], 0});  // reversed
      std::vector<float> together;
      enc.run(batch, rows, nullptr, together);
      size_t offset = 0;
      for (size_t i = ids.size(); i-- > 0;) {
        ASSERT_LE(offset + alone[i].size(), together.size());
        EXPECT_TRUE(std::equal(alone[i].begin(), alone[i].end(), together.begin() + static_cast<std::ptrdiff_t>(offset)))
            << "text " << i << " differs in the batch";
        offset += alone[i].size();
      }
      EXPECT_EQ(offset, together.size());
    }
  }
}

// Bidirectional: the first token sees a change at the end of its text (through attention and
// the centred conv); causal: it does not.
TEST_P(EncoderTest, OnlyTheBidirectionalModelLooksAhead) {
  const auto bidir = retyped_fixture("lfm2_a_fullattnidxs_tied_f32", "lfm2_bidirectional",
                                     "Lfm2BidirectionalModel");
  const auto causal = load_model(test::fixture_dir("lfm2_a_fullattnidxs_tied_f32"));
  const auto bidirectional = load_model(bidir->str());
  const std::vector<int32_t> a = {1, 30, 31, 32}, b = {1, 30, 31, 33};
  for (const Model* model : {causal.get(), bidirectional.get()}) {
    Encoder enc(*model, *be_);
    std::vector<float> first_a, first_b;
    const EncoderText ta{a, 0}, tb{b, 0};
    enc.run({&ta, 1}, EncoderRows::kFirst, nullptr, first_a);
    enc.run({&tb, 1}, EncoderRows::kFirst, nullptr, first_b);
    EXPECT_EQ(first_a == first_b, !model->config().bidirectional) << model->config().architecture;
  }
  // Limiting the keys to the first 3 tokens hides the 4th from attention, not from the conv.
  Encoder enc(*bidirectional, *be_);
  std::vector<float> limited_a, limited_b;
  const EncoderText ta{a, 3}, tb{b, 3};
  enc.run({&ta, 1}, EncoderRows::kFirst, nullptr, limited_a);
  enc.run({&tb, 1}, EncoderRows::kFirst, nullptr, limited_b);
  EXPECT_NE(limited_a, limited_b);
}

TEST_P(EncoderTest, BadTextsAreRefusedBeforeAnyWork) {
  const auto model = load_model(test::fixture_dir("lfm2_a_fullattnidxs_tied_f32"));
  Encoder enc(*model, *be_);
  std::vector<float> out;
  const std::vector<int32_t> ok = {1, 2, 3}, empty, outside = {1, 256};
  auto refused = [&](const EncoderText& t, const std::string& says) {
    try {
      enc.run({&t, 1}, EncoderRows::kAll, nullptr, out);
      return std::string("accepted");
    } catch (const Error& e) {
      return std::string(e.what()).find(says) != std::string::npos ? std::string() : std::string(e.what());
    }
  };
  EXPECT_EQ(refused({empty, 0}, "empty text"), "");
  EXPECT_EQ(refused({outside, 0}, "token id 256"), "");
  EXPECT_EQ(refused({ok, 4}, "4 attention keys"), "");
  EXPECT_THROW(enc.run({}, EncoderRows::kAll, nullptr, out), Error);
}

INSTANTIATE_TEST_SUITE_P(Isa, EncoderTest, ::testing::ValuesIn(test::all_isas()));

// A retriever has no LM head: generation refuses it with a message that says what it is for.
TEST(Encoder, RetrieversCannotGenerate) {
  const auto dir = retyped_fixture("lfm2_a_fullattnidxs_tied_f32", "lfm2_bidirectional", "Lfm2BidirectionalModel");
  const auto model = load_model(dir->str());
  EXPECT_FALSE(model->config().has_lm_head);
  ThreadPool pool(1);
  auto be = make_backend_for(parse_isa("generic"), pool);
  auto cache = make_state_cache(*model, test::f32_plan());
  try {
    Forward fwd(*model, *be, *cache);
    FAIL() << "a retriever got a generating forward";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("embeds text"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace lfm
