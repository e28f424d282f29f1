// Retriever heads and the embedder (model/retrieval.h, engine/embedder.h) on a tiny checkpoint
// dressed as a sentence-transformers embedding model and as a PyLate ColBERT model: pooling,
// Dense, normalisation and scores against plain computations on the encoder's hidden states,
// the prefix / expansion / skiplist rules on token ids, and malformed head files. Parity with
// transformers on real fixtures is in retrieval_fixture_test.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "core/error.h"
#include "core/thread_pool.h"
#include "engine/embedder.h"
#include "formats/safetensors_writer.h"
#include "kernels/backend_factory.h"
#include "kernels/cpu_backend.h"
#include "model/encoder.h"
#include "retrieval_test_util.h"
#include "test_util.h"

namespace lfm {
namespace {

using test::normalized;

namespace fs = std::filesystem;
using nlohmann::json;

constexpr int64_t kHidden = 64;  // the fixture's

// lfm2_a as a bidirectional base model, with `files` (relative path → JSON) beside it.
std::unique_ptr<test::TempDir> retriever_dir(const std::vector<std::pair<std::string, json>>& files) {
  auto dir = std::make_unique<test::TempDir>("lfm_embedder");
  const fs::path src = test::fixture_dir("lfm2_a_fullattnidxs_tied_f32");
  fs::copy_file(src / "model.safetensors", *dir / "model.safetensors");
  json cfg = test::read_json((src / "config.json").string());
  cfg["model_type"] = "lfm2_bidirectional";
  cfg["architectures"] = {"Lfm2BidirectionalModel"};
  dir->write("config.json", cfg.dump());
  for (const auto& [path, j] : files) {
    fs::create_directories((*dir / path).parent_path());
    dir->write(path, j.dump());
  }
  return dir;
}

json st_modules(bool colbert) {
  if (colbert)
    return json::array({{{"idx", 0}, {"name", "0"}, {"path", ""}, {"type", "sentence_transformers.models.Transformer"}},
                        {{"idx", 1}, {"name", "1"}, {"path", "1_Dense"}, {"type", "pylate.models.Dense.Dense"}}});
  return json::array({{{"idx", 0}, {"name", "0"}, {"path", ""}, {"type", "sentence_transformers.models.Transformer"}},
                      {{"idx", 1}, {"name", "1"}, {"path", "1_Pooling"}, {"type", "sentence_transformers.models.Pooling"}},
                      {{"idx", 2}, {"name", "2"}, {"path", "2_Normalize"}, {"type", "sentence_transformers.models.Normalize"}}});
}

json pooling_config(const char* mode) {
  return {{"word_embedding_dimension", kHidden},
          {"pooling_mode_cls_token", std::string(mode) == "cls"},
          {"pooling_mode_mean_tokens", std::string(mode) == "mean"},
          {"pooling_mode_max_tokens", false},
          {"pooling_mode_lasttoken", std::string(mode) == "last"}};
}

// A Dense module [out, 64] of small random weights.
std::vector<float> write_dense(const test::TempDir& dir, int64_t out) {
  fs::create_directories(dir / "1_Dense");
  dir.write("1_Dense/config.json", json{{"in_features", kHidden}, {"out_features", out}, {"bias", false},
                                        {"activation_function", "torch.nn.modules.linear.Identity"}}
                                       .dump());
  const auto w = test::randn(static_cast<size_t>(out * kHidden), 77, 0.2f);
  SafetensorsWriter writer((dir / "1_Dense/model.safetensors").string(), {{"linear.weight", DType::F32, {out, kHidden}}});
  writer.write("linear.weight", w.data(), w.size() * sizeof(float));
  writer.finish();
  return w;
}

class EmbedderTest : public ::testing::Test {
 protected:
  ThreadPool pool_{2};
  std::unique_ptr<Backend> be_ = make_backend_for(parse_isa("generic"), pool_);
  // The encoder's final-normed rows of one text (all of them).
  std::vector<float> hidden(const Model& m, const std::vector<int32_t>& ids, int64_t keys = 0) {
    Encoder enc(m, *be_);
    std::vector<float> out;
    const EncoderText t{ids, keys};
    enc.run({&t, 1}, EncoderRows::kAll, nullptr, out);
    return out;
  }
};


TEST_F(EmbedderTest, SentenceTransformersPoolingAndNormalisation) {
  const std::vector<int32_t> ids = {1, 40, 41, 42, 43};
  for (const char* mode : {"cls", "mean", "last"}) {
    SCOPED_TRACE(mode);
    const auto dir = retriever_dir({{"modules.json", st_modules(false)},
                                    {"1_Pooling/config.json", pooling_config(mode)},
                                    {"2_Normalize/.keep", json::object()},
                                    {"config_sentence_transformers.json",
                                     {{"prompts", {{"query", "query: "}, {"document", "document: "}}}}},
                                    {"sentence_bert_config.json", {{"max_seq_length", 24}}}});
    const auto model = load_model(dir->str());
    ASSERT_TRUE(model->retrieval());
    const RetrievalConfig& c = model->retrieval()->config();
    EXPECT_FALSE(c.colbert());
    EXPECT_TRUE(c.normalize);
    EXPECT_EQ(c.max_tokens, 24);
    EXPECT_EQ(c.query_prompt, "query: ");
    EXPECT_EQ(c.pooling, parse_pooling(mode));
    Embedder emb(*model, nullptr, *be_);
    const std::vector<PreparedText> texts = {emb.prepare_ids(ids, InputRole::kDocument)};
    const auto out = emb.embed(texts);
    ASSERT_EQ(out.size(), 1u);
    ASSERT_EQ(out[0].rows, 1);
    ASSERT_EQ(out[0].dim, kHidden);
    const auto h = hidden(*model, ids);
    std::vector<float> want(kHidden, 0.0f);
    const int64_t n = static_cast<int64_t>(ids.size());
    for (int64_t c2 = 0; c2 < kHidden; ++c2) {
      if (std::string(mode) == "cls") want[c2] = h[c2];
      if (std::string(mode) == "last") want[c2] = h[(n - 1) * kHidden + c2];
      if (std::string(mode) == "mean") {
        double s = 0;
        for (int64_t r = 0; r < n; ++r) s += h[r * kHidden + c2];
        want[c2] = static_cast<float>(s / n);
      }
    }
    EXPECT_LT(test::max_abs_diff(out[0].values, normalized(want)), 1e-6);  // with the Normalize module
    // Per-token vectors when asked, each normalised; the cosine of a text with itself is 1.
    const auto rows = emb.embed(texts, Pooling::kNone);
    EXPECT_EQ(rows[0].rows, n);
    EXPECT_NEAR(Embedder::score(out[0], out[0]), 1.0, 1e-6);
  }
}

TEST_F(EmbedderTest, ColbertDenseNormalisationAndMaxSim) {
  const auto dir = retriever_dir({{"modules.json", st_modules(true)},
                                  {"config_sentence_transformers.json",
                                   {{"query_prefix", "[Q] "},
                                    {"document_prefix", "[D] "},
                                    {"query_length", 8},
                                    {"document_length", 12},
                                    {"attend_to_expansion_tokens", false},
                                    {"skiplist_words", {"!", ","}}}}});
  const auto w = write_dense(*dir, 16);
  const auto model = load_model(dir->str());
  ASSERT_TRUE(model->retrieval());
  const RetrievalConfig& c = model->retrieval()->config();
  EXPECT_TRUE(c.colbert());
  EXPECT_EQ(c.dense_out, 16);
  EXPECT_EQ(c.query_length, 8);
  Embedder emb(*model, nullptr, *be_);
  EXPECT_EQ(emb.dim(), 16);
  // A query given with its expansion (the end-of-sequence id 2 of the config): the expansion is not a key.
  const std::vector<int32_t> q = {1, 250, 30, 31, 2, 2, 2, 2}, d = {1, 251, 50, 51, 52, 53};
  const PreparedText pq = emb.prepare_ids(q, InputRole::kQuery), pd = emb.prepare_ids(d, InputRole::kDocument);
  EXPECT_EQ(pq.keys, 4);
  const auto out = emb.embed(std::vector<PreparedText>{pq, pd});
  ASSERT_EQ(out[0].rows, 8);
  ASSERT_EQ(out[1].rows, 6);
  // Each row: the encoder's row through the Dense weights, normalised.
  const auto h = hidden(*model, q, 4);
  for (int64_t r = 0; r < 8; ++r) {
    std::vector<float> want(16);
    for (int64_t o = 0; o < 16; ++o) {
      double s = 0;
      for (int64_t i = 0; i < kHidden; ++i) s += double(w[o * kHidden + i]) * h[r * kHidden + i];
      want[o] = static_cast<float>(s);
    }
    EXPECT_LT(test::max_abs_diff(std::vector<float>(out[0].row(r), out[0].row(r) + 16), normalized(want)), 1e-5)
        << "row " << r;
  }
  // MaxSim: Σ over query rows of the best dot product with a document row.
  double want = 0;
  for (int64_t i = 0; i < 8; ++i) {
    double best = -1e9;
    for (int64_t j = 0; j < 6; ++j) {
      double s = 0;
      for (int64_t k = 0; k < 16; ++k) s += double(out[0].row(i)[k]) * out[1].row(j)[k];
      best = std::max(best, s);
    }
    want += best;
  }
  EXPECT_NEAR(Embedder::score(out[0], out[1]), want, 1e-9);
  // Unscored document rows are left out of the max.
  Embedding masked = out[1];
  masked.scored.assign(6, 0);
  masked.scored[2] = 1;
  double only = 0;
  for (int64_t i = 0; i < 8; ++i) {
    double s = 0;
    for (int64_t k = 0; k < 16; ++k) s += double(out[0].row(i)[k]) * out[1].row(2)[k];
    only += s;
  }
  EXPECT_NEAR(Embedder::score(out[0], masked), only, 1e-9);
}

// Texts never depend on the batch: a call split by a small token budget gives the same bits.
TEST_F(EmbedderTest, BatchBudgetDoesNotChangeResults) {
  const auto dir = retriever_dir({{"modules.json", st_modules(false)}, {"1_Pooling/config.json", pooling_config("mean")}});
  const auto model = load_model(dir->str());
  std::vector<PreparedText> texts;
  for (int i = 0; i < 7; ++i) {
    std::vector<int32_t> ids = {1};
    for (int j = 0; j < 3 + 4 * i; ++j) ids.push_back(10 + (i * 7 + j) % 200);
    texts.push_back({ids, 0, {}, static_cast<int64_t>(ids.size()), false});
  }
  Embedder big(*model, nullptr, *be_), small(*model, nullptr, *be_, EmbedderOptions{9, std::nullopt, std::nullopt});
  const auto a = big.embed(texts), b = small.embed(texts);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i].values, b[i].values) << "text " << i;
}

TEST_F(EmbedderTest, MalformedHeadFilesAreRefusedNamingTheFile) {
  auto refused = [&](const std::vector<std::pair<std::string, json>>& files, const std::string& says) {
    const auto dir = retriever_dir(files);
    try {
      load_model(dir->str());
      return std::string("accepted");
    } catch (const Error& e) {
      return std::string(e.what()).find(says) != std::string::npos ? std::string() : std::string(e.what());
    }
  };
  EXPECT_EQ(refused({{"modules.json", json::object()}}, "modules.json' is not a JSON array"), "");
  EXPECT_EQ(refused({{"modules.json", st_modules(false)}}, "1_Pooling/config.json"), "");  // missing
  json two = pooling_config("cls");
  two["pooling_mode_mean_tokens"] = true;
  EXPECT_EQ(refused({{"modules.json", st_modules(false)}, {"1_Pooling/config.json", two}}, "2 pooling modes"), "");
  json maxp = pooling_config("cls");
  maxp["pooling_mode_max_tokens"] = true;
  EXPECT_EQ(refused({{"modules.json", st_modules(false)}, {"1_Pooling/config.json", maxp}}, "pooling_mode_max_tokens"),
            "");
  json escape = st_modules(false);
  escape[1]["path"] = "../../etc";
  EXPECT_EQ(refused({{"modules.json", escape}}, "leaves the folder"), "");
  EXPECT_EQ(refused({{"modules.json", st_modules(false)},
                     {"1_Pooling/config.json", pooling_config("cls")},
                     {"sentence_bert_config.json", {{"max_seq_length", "long"}}}},
                    "'max_seq_length' has the wrong type"),
            "");
  EXPECT_EQ(refused({{"modules.json", st_modules(true)}, {"1_Dense/config.json", {{"in_features", 63}, {"out_features", 8}}}},
                    "in_features 63"),
            "");
  EXPECT_THROW(parse_pooling("max"), Error);
  EXPECT_THROW(parse_input_role("passage"), Error);
}

}  // namespace
}  // namespace lfm
