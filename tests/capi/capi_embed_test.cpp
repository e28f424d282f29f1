// The C API's retrievers (API level 3: lfm_embed, lfm_rerank) against transformers' fixtures
// (tests/data/retrieval: ids in; vectors, masks and scores within 1e-4 of reference.json), each
// text alone and batched the same bits, and texts through a tokenizer written for a fixture.
// The refusals are in capi_embed_refusals_test.cpp.
#include "capi_embed_util.h"

namespace {

using namespace lfm_capi_embed_test;

// On a copy with a tokenizer: PyLate's skiplist is a lookup of its words in the vocabulary, so
// without one a ColBERT document's punctuation would be scored. The inputs are still ids.
class CApiEmbedFixture : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    ref_ = reference(GetParam());
    fx_ = std::make_unique<TokenizedFixture>(GetParam());
  }
  std::string path() const { return fx_->dir.string(); }
  json ref_;
  std::unique_ptr<TokenizedFixture> fx_;
};

TEST_P(CApiEmbedFixture, InfoSaysWhatTheModelIs) {
  Model model(path());
  lfm_model_info info;
  info.struct_size = sizeof(info);
  ASSERT_EQ(lfm_model_get_info(model.m, &info), LFM_OK) << lfm_last_error();
  const bool colbert = ref_["kind"] == "colbert";
  EXPECT_EQ(info.can_generate, 0);
  EXPECT_EQ(info.retriever, colbert ? LFM_RETRIEVER_COLBERT : LFM_RETRIEVER_DENSE);
  EXPECT_EQ(info.embedding_dim, colbert ? 16 : 64);
  EXPECT_EQ(info.embedding_max_tokens, colbert ? 20 : 24);  // document_length; max_seq_length
  // A level-2 caller's struct ends before the level-3 fields: they are left alone.
  lfm_model_info old;
  std::memset(&old, 0x5a, sizeof(old));
  old.struct_size = offsetof(lfm_model_info, can_generate);
  ASSERT_EQ(lfm_model_get_info(model.m, &old), LFM_OK);
  EXPECT_EQ(old.image_token, -1);
  EXPECT_EQ(old.can_generate, 0x5a5a5a5a);
  EXPECT_EQ(old.embedding_dim, 0x5a5a5a5a5a5a5a5aLL);
}

// Every text's vectors (and ColBERT's scored mask) as the reference's, the texts of each input
// type in one call; each text alone gives the same bits.
TEST_P(CApiEmbedFixture, VectorsMatchTheReferenceAloneAndBatched) {
  Model model(path());
  const bool colbert = ref_["kind"] == "colbert";
  for (int32_t type : {LFM_INPUT_NONE, LFM_INPUT_QUERY, LFM_INPUT_DOCUMENT}) {
    std::vector<json> texts;
    std::vector<std::vector<int32_t>> ids;
    for (const json& t : ref_["texts"])
      if (input_type_of(t) == type) {
        texts.push_back(t);
        ids.push_back(t["ids"].get<std::vector<int32_t>>());
      }
    if (ids.empty()) continue;
    const std::vector<Vec> together = embed(model.m, ids, type);
    ASSERT_EQ(together.size(), ids.size());
    for (size_t i = 0; i < texts.size(); ++i) {
      const json& t = texts[i];
      SCOPED_TRACE(t["name"].get<std::string>());
      const Vec& v = together[i];
      EXPECT_EQ(v.ids, ids[i]);
      EXPECT_FALSE(v.truncated);
      if (colbert) {
        const auto want = t["vectors"].get<std::vector<std::vector<double>>>();
        ASSERT_EQ(v.rows, static_cast<int64_t>(want.size()));
        ASSERT_EQ(v.dim, 16);
        EXPECT_TRUE(v.normalized);
        for (int64_t r = 0; r < v.rows; ++r)
          EXPECT_LT(max_diff(v.values.data() + r * v.dim, want[static_cast<size_t>(r)]), kTol) << "row " << r;
        auto mask = t["vector_mask"].get<std::vector<uint8_t>>();
        if (v.scored.empty())
          EXPECT_EQ(std::count(mask.begin(), mask.end(), 0), 0);
        else
          EXPECT_EQ(v.scored, mask);
      } else {
        ASSERT_EQ(v.rows, 1);
        EXPECT_TRUE(v.scored.empty());
        EXPECT_FALSE(v.normalized);  // no Normalize module, as the real model; the reference's is unit
        const std::vector<float> u = unit(v.values);
        EXPECT_LT(max_diff(u.data(), t["embedding"].get<std::vector<double>>()), kTol);
      }
      const std::vector<Vec> alone = embed(model.m, {ids[i]}, type);
      ASSERT_EQ(alone.size(), 1u);
      EXPECT_EQ(alone[0].values, v.values);
      EXPECT_EQ(alone[0].scored, v.scored);
    }
  }
  if (!colbert) {  // the other poolings, unnormalised as the reference records them
    std::vector<std::vector<int32_t>> ids;
    for (const json& t : ref_["texts"]) ids.push_back(t["ids"].get<std::vector<int32_t>>());
    for (const auto& [mode, pooling] : {std::pair{"mean", LFM_POOLING_MEAN}, std::pair{"last", LFM_POOLING_LAST}}) {
      const std::vector<Vec> got = embed(model.m, ids, LFM_INPUT_NONE, pooling);
      ASSERT_EQ(got.size(), ids.size());
      for (size_t i = 0; i < ids.size(); ++i)
        EXPECT_LT(max_diff(got[i].values.data(), ref_["texts"][i][mode].get<std::vector<double>>()), kTol)
            << mode << " " << ref_["texts"][i]["name"];
    }
  }
}

// Each query against every document: the reference's cosine / MaxSim scores, and the order.
TEST_P(CApiEmbedFixture, RerankScoresMatchTheReference) {
  Model model(path());
  std::map<std::string, std::vector<int32_t>> ids;
  for (const json& t : ref_["texts"]) ids[t["name"]] = t["ids"].get<std::vector<int32_t>>();
  const json& s = ref_["scores"];
  std::vector<std::vector<int32_t>> docs;
  for (const json& d : s["documents"]) docs.push_back(ids[d]);
  const auto values = s["values"].get<std::vector<std::vector<double>>>();
  for (size_t qi = 0; qi < s["queries"].size(); ++qi) {
    SCOPED_TRACE(s["queries"][qi].get<std::string>());
    const Rerank r = rerank_ids(model.m, ids[s["queries"][qi]], docs);
    ASSERT_EQ(r.status, LFM_OK) << lfm_last_error();
    for (size_t di = 0; di < docs.size(); ++di) EXPECT_NEAR(r.scores[di], values[qi][di], kTol) << s["documents"][di];
    std::vector<size_t> want(docs.size());
    std::iota(want.begin(), want.end(), size_t{0});
    std::stable_sort(want.begin(), want.end(), [&](size_t a, size_t b) { return r.scores[a] > r.scores[b]; });
    EXPECT_EQ(r.order, want);
    for (size_t k = 1; k < want.size(); ++k)  // the reference agrees with the order, up to the tolerance
      EXPECT_GE(values[qi][r.order[k - 1]] + 2 * kTol, values[qi][r.order[k]]);
  }
  // More documents than lfm_rerank embeds at a time: every copy scores as the single one did.
  std::vector<std::vector<int32_t>> many;
  for (int i = 0; i < 150; ++i) many.push_back(docs[static_cast<size_t>(i) % docs.size()]);
  const Rerank one = rerank_ids(model.m, ids[s["queries"][0]], docs);
  const Rerank all = rerank_ids(model.m, ids[s["queries"][0]], many);
  ASSERT_EQ(all.status, LFM_OK) << lfm_last_error();
  for (size_t i = 0; i < many.size(); ++i) EXPECT_EQ(all.scores[i], one.scores[i % docs.size()]) << i;
}

// Texts through the tokenizer: the model's marker, the skiplist, query expansion and truncation as
// PyLate applies them, and the same vectors as the ids they became.
TEST(CApiEmbed, TextsTakeTheMarkersSkiplistExpansionAndLength) {
  TokenizedFixture fx("lfm25_colbert_tiny_f32");
  Model model(fx.dir.string());
  const std::vector<Vec> docs =
      embed(model.m, {}, LFM_INPUT_DOCUMENT, LFM_POOLING_DEFAULT, {"!?", std::string(30, '!')});
  ASSERT_EQ(docs.size(), 2u);
  EXPECT_EQ(docs[0].ids, (std::vector<int32_t>{1, 251, 33, 63}));  // BOS, [D], "!", "?"
  EXPECT_EQ(docs[0].scored, (std::vector<uint8_t>{1, 1, 0, 0}));   // punctuation is not scored
  EXPECT_EQ(docs[0].input_tokens, 2);
  EXPECT_FALSE(docs[0].truncated);
  EXPECT_EQ(docs[1].ids.size(), 20u);  // document_length
  EXPECT_TRUE(docs[1].truncated);
  const std::vector<Vec> same = embed(model.m, {docs[0].ids}, LFM_INPUT_DOCUMENT);
  ASSERT_EQ(same.size(), 1u);
  EXPECT_EQ(same[0].values, docs[0].values);
  const std::vector<Vec> query = embed(model.m, {}, LFM_INPUT_QUERY, LFM_POOLING_DEFAULT, {"?"});
  ASSERT_EQ(query.size(), 1u);
  EXPECT_EQ(query[0].ids, (std::vector<int32_t>{1, 250, 63, 7, 7, 7, 7, 7, 7, 7, 7, 7}));  // expanded to 12
  // A query given as text and as those ids scores alike.
  lfm_rerank_request r;
  lfm_rerank_request_init(&r);
  const char* doc_texts[] = {"!?", "?"};
  r.query = "?";
  r.n_documents = 2;
  r.documents = doc_texts;
  double scores[2];
  ASSERT_EQ(lfm_rerank(model.m, &r, scores, nullptr), LFM_OK) << lfm_last_error();
  const Rerank by_ids = rerank_ids(model.m, query[0].ids, {docs[0].ids, {1, 251, 63}});
  ASSERT_EQ(by_ids.status, LFM_OK) << lfm_last_error();
  EXPECT_EQ(scores[0], by_ids.scores[0]);
  EXPECT_EQ(scores[1], by_ids.scores[1]);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CApiEmbedFixture,
                         ::testing::Values("lfm25_embedding_tiny_f32", "lfm25_colbert_tiny_f32", "lfm2_colbert_tiny_f32"));


}  // namespace
