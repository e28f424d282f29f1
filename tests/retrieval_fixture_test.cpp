// Parity with transformers' own Lfm2BidirectionalModel / Lfm2Model plus the sentence-transformers
// and PyLate processing around them (tests/data/retrieval, made by
// tools/retrieval_reference/make_retrieval_fixtures.py): per-token hidden states, pooled
// vectors, ColBERT vectors and their masks, cosine and MaxSim scores, on every CPU backend and
// the device backends (tests/test_backends.h: the fake device, the CUDA emulator, a GPU where
// present), each text alone and all of them in one batch. Tolerance 1e-4 (float32); ids and
// masks exact.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "core/thread_pool.h"
#include "engine/embedder.h"
#include "kernels/backend_factory.h"
#include "kernels/cpu_backend.h"
#include "model/encoder.h"
#include "retrieval_test_util.h"
#include "test_backends.h"
#include "test_util.h"
#include "tokenizer/load_tokenizer.h"

namespace lfm {
namespace {

using test::normalized;

namespace fs = std::filesystem;
using nlohmann::json;

constexpr double kTol = 1e-4;


InputRole role_of(const json& t) {
  if (t["role"].is_null()) return InputRole::kPlain;
  return parse_input_role(t["role"].get<std::string>());
}

bool is_device(const std::string& backend) {
  return backend == "fake-device" || backend == "cuda" || backend == "cuda-emu";
}

class RetrievalFixtureTest : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {
 protected:
  void SetUp() override {
    const auto& [fixture, backend] = GetParam();
    LoadOptions load;
    if (is_device(backend)) {
      std::string why;
      be_ = test::make_named_backend(backend, pool_, load, &why);
      if (!be_) GTEST_SKIP() << why;
    } else {
      if (!isa_supported(parse_isa(backend))) GTEST_SKIP() << "CPU lacks " << backend;
      be_ = make_backend_for(parse_isa(backend), pool_);
    }
    ref_ = test::read_json(test::retrieval_fixture(fixture) + "/reference.json");
    dir_ = test::with_tokenizer(fixture, ref_["tokens"]);
    model_ = load_model(dir_->str(), load);
    tok_ = load_tokenizer(dir_->str());
  }
  ThreadPool pool_{2};
  json ref_;
  std::unique_ptr<test::TempDir> dir_;
  std::unique_ptr<Backend> be_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<Tokenizer> tok_;
};

TEST_P(RetrievalFixtureTest, ConfigIsReadFromTheCheckpointFiles) {
  const ModelConfig& c = model_->config();
  EXPECT_EQ(c.bidirectional, ref_["backbone"] == "bidirectional");
  EXPECT_FALSE(c.has_lm_head);
  ASSERT_TRUE(model_->retrieval());
  const RetrievalConfig& r = model_->retrieval()->config();
  EXPECT_EQ(r.colbert(), ref_["kind"] == "colbert");
  if (r.colbert()) {
    EXPECT_EQ(r.dense_out, 16);
    EXPECT_EQ(r.query_length, 12);
    EXPECT_EQ(r.document_length, 20);
    EXPECT_FALSE(r.attend_to_expansion_tokens);
    EXPECT_EQ(r.skiplist_words.size(), 32u);
  } else {
    EXPECT_EQ(r.pooling, Pooling::kCls);
    EXPECT_FALSE(r.normalize);  // no Normalize module, as the real model
    EXPECT_EQ(r.max_tokens, 24);
  }
}

// Hidden states of each text run alone, with the attention mask the reference used.
TEST_P(RetrievalFixtureTest, HiddenStatesMatchTransformers) {
  Encoder enc(*model_, *be_);
  Embedder emb(*model_, tok_.get(), *be_);
  for (const json& t : ref_["texts"]) {
    SCOPED_TRACE(t["name"].get<std::string>());
    const PreparedText p = emb.prepare_ids(t["ids"].get<std::vector<int32_t>>(), role_of(t));
    // The attention mask the reference used: keys are the mask-1 prefix.
    const auto mask = t["attention_mask"].get<std::vector<int>>();
    int64_t keys = 0;
    while (keys < static_cast<int64_t>(mask.size()) && mask[static_cast<size_t>(keys)]) ++keys;
    EXPECT_EQ(p.keys == 0 ? static_cast<int64_t>(mask.size()) : p.keys, keys);
    std::vector<float> hidden;
    const EncoderText text{p.ids, p.keys};
    enc.run({&text, 1}, EncoderRows::kAll, nullptr, hidden);
    const auto want = t["hidden"].get<std::vector<std::vector<double>>>();
    ASSERT_EQ(hidden.size(), want.size() * 64);
    for (size_t r = 0; r < want.size(); ++r)
      EXPECT_LT(test::max_abs_diff(hidden.data() + r * 64, 64, want[r]), kTol) << "row " << r;
  }
}

// Vectors and scores through the embedder, all texts in one call (and so in shared batches).
TEST_P(RetrievalFixtureTest, VectorsAndScoresMatchTheReference) {
  Embedder emb(*model_, tok_.get(), *be_);
  std::vector<PreparedText> prepared;
  std::map<std::string, size_t> index;
  for (const json& t : ref_["texts"]) {
    index[t["name"].get<std::string>()] = prepared.size();
    prepared.push_back(emb.prepare_ids(t["ids"].get<std::vector<int32_t>>(), role_of(t)));
  }
  const std::vector<Embedding> out = emb.embed(prepared);
  const bool colbert = ref_["kind"] == "colbert";
  for (const json& t : ref_["texts"]) {
    const std::string name = t["name"];
    SCOPED_TRACE(name);
    const Embedding& e = out[index[name]];
    if (colbert) {
      const auto want = t["vectors"].get<std::vector<std::vector<double>>>();
      ASSERT_EQ(e.rows, static_cast<int64_t>(want.size()));
      for (int64_t r = 0; r < e.rows; ++r)
        EXPECT_LT(test::max_abs_diff(e.row(r), e.dim, want[static_cast<size_t>(r)]), kTol) << "row " << r;
      const auto mask = t["vector_mask"].get<std::vector<uint8_t>>();
      if (e.scored.empty())
        EXPECT_EQ(std::count(mask.begin(), mask.end(), 0), 0);
      else
        EXPECT_EQ(e.scored, mask);
    } else {
      ASSERT_EQ(e.rows, 1);
      EXPECT_LT(test::max_abs_diff(normalized(e.values), t["embedding"].get<std::vector<double>>()), kTol);
    }
  }
  if (!colbert) {  // the other pooling modes, unnormalised as the reference records them
    for (const char* mode : {"mean", "last"}) {
      const auto pooled = emb.embed(prepared, parse_pooling(mode));
      for (const json& t : ref_["texts"])
        EXPECT_LT(test::max_abs_diff(pooled[index[t["name"]]].values, t[mode].get<std::vector<double>>()), kTol)
            << mode << " " << t["name"];
    }
  }
  const auto& s = ref_["scores"];
  const auto values = s["values"].get<std::vector<std::vector<double>>>();
  for (size_t qi = 0; qi < s["queries"].size(); ++qi)
    for (size_t di = 0; di < s["documents"].size(); ++di)
      EXPECT_NEAR(Embedder::score(out[index[s["queries"][qi]]], out[index[s["documents"][di]]]), values[qi][di], kTol)
          << s["queries"][qi] << " x " << s["documents"][di];
}

// Every text's vectors are the same bits alone as in the shared call above; on a backend that is
// not bitwise batch-invariant (CUDA's cuBLAS sums a pass of 64+ tokens in its own order;
// LFM_CUDA_GEMM=own is) the same within float32 noise.
TEST_P(RetrievalFixtureTest, TextsAloneAndBatchedAreTheSameBits) {
  Embedder emb(*model_, tok_.get(), *be_);
  std::vector<PreparedText> prepared;
  for (const json& t : ref_["texts"]) prepared.push_back(emb.prepare_ids(t["ids"].get<std::vector<int32_t>>(), role_of(t)));
  const auto together = emb.embed(prepared);
  for (size_t i = 0; i < prepared.size(); ++i) {
    const auto alone = emb.embed(std::span<const PreparedText>(&prepared[i], 1));
    if (be_->bitwise_batch_invariant())
      EXPECT_EQ(alone[0].values, together[i].values) << ref_["texts"][i]["name"];
    else
      EXPECT_LT(test::max_abs_diff(alone[0].values, together[i].values), 1e-5) << ref_["texts"][i]["name"];
  }
}

std::vector<std::tuple<std::string, std::string>> cases() {
  std::vector<std::tuple<std::string, std::string>> out;
  for (const char* f : {"lfm25_embedding_tiny_f32", "lfm25_colbert_tiny_f32", "lfm2_colbert_tiny_f32"})
    for (const std::string& b : test::all_isas()) out.emplace_back(f, b);
  for (const char* f : {"lfm25_embedding_tiny_f32", "lfm25_colbert_tiny_f32", "lfm2_colbert_tiny_f32"})
    for (const char* b : {"fake-device", "cuda", "cuda-emu"}) out.emplace_back(f, b);
  return out;
}

INSTANTIATE_TEST_SUITE_P(Fixtures, RetrievalFixtureTest, ::testing::ValuesIn(cases()),
                         [](const auto& info) {
                           std::string b = std::get<1>(info.param);
                           for (char& ch : b)
                             if (ch == '-') ch = '_';
                           return std::get<0>(info.param) + "_" + b;
                         });

}  // namespace
}  // namespace lfm
