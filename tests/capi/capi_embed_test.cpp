// The C API's retrievers (API level 3: lfm_embed, lfm_rerank) against transformers' fixtures
// (tests/data/retrieval: ids in; vectors, masks and scores within 1e-4 of reference.json), each
// text alone and batched the same bits, texts through a tokenizer written for the fixture, and
// the refusals: bad arguments, limits, generation on a retriever, embedding a generative model
// without asking for a pooling.
#include <gtest/gtest.h>
#include <lfm/lfm.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <numeric>
#include <string>
#include <vector>

#include "capi_test_util.h"

namespace {

using namespace lfm_capi_test;
using nlohmann::json;
namespace fs = std::filesystem;

constexpr double kTol = 1e-4;

std::string fixture_dir(const std::string& name) { return kData + "/retrieval/" + name; }

json reference(const std::string& name) {
  std::ifstream f(fixture_dir(name) + "/reference.json");
  return json::parse(f);
}

// The fixture's files linked into a temporary folder with a tokenizer.json whose vocabulary is
// the fixture's notional one (punctuation character c is id ord(c), the special tokens and
// markers at their ids; tests/data/retrieval/README.md), so that texts can be given.
struct TokenizedFixture {
  fs::path dir;
  // `bos`: the tokenizer puts <|startoftext|> first, as LFM2's do.
  explicit TokenizedFixture(const std::string& name, bool bos = true) {
    dir = fs::temp_directory_path() / ("lfm_capi_embed_" + name + "_" + std::to_string(::getpid()));
    fs::create_directories(dir);
    for (const auto& entry : fs::directory_iterator(fixture_dir(name)))
      fs::create_symlink(entry.path(), dir / entry.path().filename());
    const json tokens = reference(name)["tokens"];
    std::map<int, std::string> special = {{0, "<|pad|>"}, {1, "<|startoftext|>"}, {7, "<|im_end|>"}};
    if (tokens.contains("query_prefix")) special[tokens["query_prefix"].get<int>()] = "[Q] ";
    if (tokens.contains("document_prefix")) special[tokens["document_prefix"].get<int>()] = "[D] ";
    json vocab = json::object(), added = json::array();
    for (int id = 0; id < tokens["vocab_size"].get<int>(); ++id) {
      if (special.count(id)) {
        vocab[special[id]] = id;
        added.push_back({{"id", id}, {"content", special[id]}, {"special", true}});
      } else if (id >= 33 && id < 127 && !std::isalnum(id)) {
        vocab[std::string(1, static_cast<char>(id))] = id;
      } else {
        vocab["t" + std::to_string(id)] = id;
      }
    }
    const json tok = {
        {"added_tokens", added},
        {"normalizer", nullptr},
        {"pre_tokenizer",
         {{"type", "Sequence"},
          {"pretokenizers",
           json::array({{{"type", "Split"}, {"pattern", {{"Regex", "\\p{L}+|\\s+"}}}, {"behavior", "Isolated"},
                         {"invert", false}},
                        {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}})}}},
        {"post_processor",
         {{"type", "TemplateProcessing"},
          {"single", json::array({{{"SpecialToken", {{"id", "<|startoftext|>"}, {"type_id", 0}}}},
                                  {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})}}},
        {"decoder", {{"type", "ByteLevel"}}},
        {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", json::array()}}}};
    json t = tok;
    if (!bos) {  // neither the post-processor nor tokenizer_config.json's add_bos_token
      t["post_processor"] = nullptr;
      std::ifstream in(fixture_dir(name) + "/tokenizer_config.json");
      json config = json::parse(in);
      config["add_bos_token"] = false;
      fs::remove(dir / "tokenizer_config.json");
      std::ofstream(dir / "tokenizer_config.json") << config.dump();
    }
    std::ofstream(dir / "tokenizer.json") << t.dump();
  }
  ~TokenizedFixture() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
};

// One result copied out of an lfm_embeddings handle.
struct Vec {
  int64_t rows = 0, dim = 0;
  std::vector<float> values;
  std::vector<uint8_t> scored;  // empty: every row
  std::vector<int32_t> ids;
  int64_t input_tokens = 0;
  bool truncated = false, normalized = false;
};

// lfm_embed over texts or ids (exactly one non-empty); EXPECTs success.
std::vector<Vec> embed(lfm_model* m, const std::vector<std::vector<int32_t>>& ids, int32_t input_type,
                       int32_t pooling = LFM_POOLING_DEFAULT, const std::vector<std::string>& texts = {}) {
  std::vector<const int32_t*> ptrs;
  std::vector<size_t> counts;
  for (const auto& v : ids) {
    ptrs.push_back(v.data());
    counts.push_back(v.size());
  }
  std::vector<const char*> tptrs;
  std::vector<size_t> lengths;
  for (const auto& t : texts) {
    tptrs.push_back(t.data());
    lengths.push_back(t.size());
  }
  lfm_embed_request r;
  lfm_embed_request_init(&r);
  r.n_texts = texts.empty() ? ids.size() : texts.size();
  if (texts.empty()) {
    r.ids = ptrs.data();
    r.n_ids = counts.data();
  } else {
    r.texts = tptrs.data();
    r.text_lengths = lengths.data();
  }
  r.input_type = input_type;
  r.pooling = pooling;
  lfm_embeddings* out = nullptr;
  std::vector<Vec> got;
  EXPECT_EQ(lfm_embed(m, &r, &out), LFM_OK) << lfm_last_error();
  if (!out) return got;
  for (size_t i = 0; i < r.n_texts; ++i) {
    lfm_embedding e;
    e.struct_size = sizeof(e);
    EXPECT_EQ(lfm_embeddings_get(out, i, &e), LFM_OK) << lfm_last_error();
    Vec v;
    v.rows = e.rows;
    v.dim = e.dim;
    v.values.assign(e.values, e.values + e.rows * e.dim);
    if (e.scored) v.scored.assign(e.scored, e.scored + e.rows);
    v.ids.assign(e.ids, e.ids + e.n_ids);
    v.input_tokens = e.input_tokens;
    v.truncated = e.truncated;
    v.normalized = e.normalized;
    got.push_back(std::move(v));
  }
  lfm_embeddings_free(out);
  return got;
}

double max_diff(const float* a, const std::vector<double>& b) {
  double m = 0;
  for (size_t i = 0; i < b.size(); ++i) m = std::max(m, std::abs(static_cast<double>(a[i]) - b[i]));
  return m;
}

std::vector<float> unit(std::vector<float> v) {
  double ss = 0;
  for (float x : v) ss += static_cast<double>(x) * x;
  for (float& x : v) x = static_cast<float>(x / std::max(std::sqrt(ss), 1e-12));
  return v;
}

int32_t input_type_of(const json& t) {
  if (t["role"].is_null()) return LFM_INPUT_NONE;
  return t["role"] == "query" ? LFM_INPUT_QUERY : LFM_INPUT_DOCUMENT;
}

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

struct Rerank {
  lfm_status status;
  std::vector<double> scores;
  std::vector<size_t> order;
};

Rerank rerank_ids(lfm_model* m, const std::vector<int32_t>& query, const std::vector<std::vector<int32_t>>& docs) {
  std::vector<const int32_t*> ptrs;
  std::vector<size_t> counts;
  for (const auto& d : docs) {
    ptrs.push_back(d.data());
    counts.push_back(d.size());
  }
  lfm_rerank_request r;
  lfm_rerank_request_init(&r);
  r.query_ids = query.data();
  r.n_query_ids = query.size();
  r.n_documents = docs.size();
  r.document_ids = ptrs.data();
  r.n_document_ids = counts.data();
  Rerank out{LFM_OK, std::vector<double>(docs.size(), NAN), std::vector<size_t>(docs.size(), SIZE_MAX)};
  out.status = lfm_rerank(m, &r, out.scores.data(), out.order.data());
  return out;
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

// A retriever cannot generate (a status, not a crash); a generative model embeds only when asked
// for a pooling, and has no relevance score.
TEST(CApiEmbed, RetrieversRefuseGenerationAndGenerativeModelsEmbedOnlyWhenAsked) {
  Model retriever(fixture_dir("lfm25_embedding_tiny_f32"));
  lfm_engine* e = reinterpret_cast<lfm_engine*>(1);
  EXPECT_EQ(lfm_engine_create(retriever.m, nullptr, &e), LFM_ERR_UNSUPPORTED);
  EXPECT_EQ(e, nullptr);
  EXPECT_NE(std::string(lfm_last_error()).find("has no language-model head"), std::string::npos) << lfm_last_error();

  Model gen(kFixture);
  lfm_model_info info;
  info.struct_size = sizeof(info);
  ASSERT_EQ(lfm_model_get_info(gen.m, &info), LFM_OK);
  EXPECT_EQ(info.can_generate, 1);
  EXPECT_EQ(info.retriever, LFM_RETRIEVER_NONE);
  EXPECT_GT(info.embedding_dim, 0);
  const std::vector<int32_t> ids = {1, 23, 54};
  const int32_t* p = ids.data();
  const size_t n = ids.size();
  lfm_embed_request r;
  lfm_embed_request_init(&r);
  r.n_texts = 1;
  r.ids = &p;
  r.n_ids = &n;
  lfm_embeddings* out = nullptr;
  EXPECT_EQ(lfm_embed(gen.m, &r, &out), LFM_ERR_UNSUPPORTED);
  EXPECT_NE(std::string(lfm_last_error()).find("ask for a pooling"), std::string::npos) << lfm_last_error();
  EXPECT_EQ(out, nullptr);
  const std::vector<Vec> mean = embed(gen.m, {ids}, LFM_INPUT_NONE, LFM_POOLING_MEAN);
  ASSERT_EQ(mean.size(), 1u);
  EXPECT_EQ(mean[0].rows, 1);
  EXPECT_EQ(mean[0].dim, info.embedding_dim);
  EXPECT_FALSE(mean[0].normalized);
  const std::vector<Vec> tokens = embed(gen.m, {ids}, LFM_INPUT_NONE, LFM_POOLING_NONE);
  ASSERT_EQ(tokens.size(), 1u);
  EXPECT_EQ(tokens[0].rows, 3);
  EXPECT_EQ(rerank_ids(gen.m, ids, {ids}).status, LFM_ERR_UNSUPPORTED);
  EXPECT_NE(std::string(lfm_last_error()).find("no retriever"), std::string::npos) << lfm_last_error();
  // The engine still runs on the model that embedded.
  Engine eng(gen.m);
  EXPECT_NE(eng.e, nullptr);
}

// Every refusal: a status, a message naming the argument, nothing allocated.
TEST(CApiEmbed, BadArgumentsAndLimitsAreRefusedNamingThem) {
  Model model(fixture_dir("lfm25_colbert_tiny_f32"));  // no tokenizer: ids only
  const std::vector<int32_t> good = {1, 251, 100, 101};
  std::vector<int32_t> past(21, 100);  // document_length is 20
  struct Case {
    std::vector<std::vector<int32_t>> ids;
    int32_t input_type = LFM_INPUT_DOCUMENT, pooling = LFM_POOLING_DEFAULT;
    lfm_status status;
    std::string says;
  };
  const Case cases[] = {
      {{}, LFM_INPUT_DOCUMENT, LFM_POOLING_DEFAULT, LFM_ERR_INVALID_ARGUMENT, "no inputs"},
      {{good, {}}, LFM_INPUT_DOCUMENT, LFM_POOLING_DEFAULT, LFM_ERR_INVALID_ARGUMENT, "ids[1] holds no token ids"},
      {{past}, LFM_INPUT_DOCUMENT, LFM_POOLING_DEFAULT, LFM_ERR_INVALID_ARGUMENT, "ids[0] holds 21 token ids, past the model's limit of 20"},
      {{good, {1, 256}}, LFM_INPUT_DOCUMENT, LFM_POOLING_DEFAULT, LFM_ERR_INVALID_ARGUMENT, "ids[1]: embed: token id 256 is outside the vocabulary"},
      {{{-1}}, LFM_INPUT_DOCUMENT, LFM_POOLING_DEFAULT, LFM_ERR_INVALID_ARGUMENT, "token id -1"},
      {{good}, 7, LFM_POOLING_DEFAULT, LFM_ERR_INVALID_ARGUMENT, "input_type 7"},
      {{good}, LFM_INPUT_DOCUMENT, 9, LFM_ERR_INVALID_ARGUMENT, "pooling 9"},
      {{good}, LFM_INPUT_DOCUMENT, LFM_POOLING_CLS, LFM_ERR_INVALID_ARGUMENT, "ColBERT model keeps one vector per token"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.says);
    std::vector<const int32_t*> ptrs;
    std::vector<size_t> counts;
    for (const auto& v : c.ids) {
      ptrs.push_back(v.data());
      counts.push_back(v.size());
    }
    lfm_embed_request r;
    lfm_embed_request_init(&r);
    r.n_texts = c.ids.size();
    r.ids = ptrs.data();
    r.n_ids = counts.data();
    r.input_type = c.input_type;
    r.pooling = c.pooling;
    lfm_embeddings* out = reinterpret_cast<lfm_embeddings*>(1);
    EXPECT_EQ(lfm_embed(model.m, &r, &out), c.status);
    EXPECT_NE(std::string(lfm_last_error()).find(c.says), std::string::npos) << lfm_last_error();
    EXPECT_EQ(out, nullptr);
  }
  const int32_t* p = good.data();
  size_t n = good.size();
  lfm_embed_request r;
  lfm_embed_request_init(&r);
  r.n_texts = 1;
  r.ids = &p;
  r.n_ids = &n;
  lfm_embeddings* out = nullptr;
  // NULLs.
  EXPECT_EQ(lfm_embed(nullptr, &r, &out), LFM_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(lfm_embed(model.m, nullptr, &out), LFM_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(lfm_embed(model.m, &r, nullptr), LFM_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(lfm_embed_request_init(nullptr), LFM_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(lfm_embeddings_free(nullptr), LFM_OK);
  r.n_ids = nullptr;
  EXPECT_EQ(lfm_embed(model.m, &r, &out), LFM_ERR_INVALID_ARGUMENT);
  r.n_ids = &n;
  const int32_t* null_ids = nullptr;
  r.ids = &null_ids;
  EXPECT_EQ(lfm_embed(model.m, &r, &out), LFM_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(lfm_last_error()).find("ids[0] is NULL"), std::string::npos) << lfm_last_error();
  r.ids = &p;
  // A wild count is refused before anything is read or allocated.
  n = SIZE_MAX;
  EXPECT_EQ(lfm_embed(model.m, &r, &out), LFM_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(lfm_last_error()).find("past the model's limit"), std::string::npos) << lfm_last_error();
  n = good.size();
  // Texts and ids both, or texts without a tokenizer.
  const char* text = "!";
  r.texts = &text;
  EXPECT_EQ(lfm_embed(model.m, &r, &out), LFM_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(lfm_last_error()).find("exactly one of texts and ids"), std::string::npos) << lfm_last_error();
  r.ids = nullptr;
  EXPECT_EQ(lfm_embed(model.m, &r, &out), LFM_ERR_UNSUPPORTED);
  EXPECT_NE(std::string(lfm_last_error()).find("tokenizer"), std::string::npos) << lfm_last_error();
  r.texts = nullptr;
  r.ids = &p;
  // More texts than a call takes: refused before any is read (the pointers past the first are
  // never looked at).
  r.n_texts = LFM_EMBED_MAX_TEXTS + 1;
  EXPECT_EQ(lfm_embed(model.m, &r, &out), LFM_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(lfm_last_error()).find("LFM_EMBED_MAX_TEXTS"), std::string::npos) << lfm_last_error();
  r.n_texts = 1;
  r.struct_size = 0;
  EXPECT_EQ(lfm_embed(model.m, &r, &out), LFM_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(lfm_last_error()).find("struct_size"), std::string::npos) << lfm_last_error();
  EXPECT_EQ(out, nullptr);
  // A good call, then its results read badly and well (an older lfm_embedding gets a prefix).
  r.struct_size = sizeof(r);
  ASSERT_EQ(lfm_embed(model.m, &r, &out), LFM_OK) << lfm_last_error();
  lfm_embedding e;
  e.struct_size = sizeof(e);
  EXPECT_EQ(lfm_embeddings_get(out, 1, &e), LFM_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(lfm_last_error()).find("index 1"), std::string::npos) << lfm_last_error();
  EXPECT_EQ(lfm_embeddings_get(nullptr, 0, &e), LFM_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(lfm_embeddings_get(out, 0, nullptr), LFM_ERR_INVALID_ARGUMENT);
  std::memset(&e, 0x5a, sizeof(e));
  e.struct_size = offsetof(lfm_embedding, ids);
  ASSERT_EQ(lfm_embeddings_get(out, 0, &e), LFM_OK);
  EXPECT_EQ(e.rows, 4);
  EXPECT_EQ(e.dim, 16);
  EXPECT_EQ(e.n_ids, size_t{0x5a5a5a5a5a5a5a5aULL});  // past the caller's struct: left alone
  lfm_embeddings_free(out);

  // lfm_rerank: the query, the documents, the limit.
  double scores[2] = {NAN, NAN};
  lfm_rerank_request q;
  lfm_rerank_request_init(&q);
  q.n_documents = 1;
  q.document_ids = &p;
  q.n_document_ids = &n;
  EXPECT_EQ(lfm_rerank(model.m, &q, scores, nullptr), LFM_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(lfm_last_error()).find("give exactly one of query and query_ids"), std::string::npos)
      << lfm_last_error();
  q.query = "!";
  q.query_ids = good.data();
  q.n_query_ids = good.size();
  EXPECT_EQ(lfm_rerank(model.m, &q, scores, nullptr), LFM_ERR_INVALID_ARGUMENT);  // both
  EXPECT_NE(std::string(lfm_last_error()).find("give exactly one of query and query_ids"), std::string::npos)
      << lfm_last_error();
  q.query = nullptr;
  q.query_ids = past.data();
  q.n_query_ids = past.size();
  EXPECT_EQ(lfm_rerank(model.m, &q, scores, nullptr), LFM_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(lfm_last_error()).find("query_ids[0] holds 21 token ids"), std::string::npos) << lfm_last_error();
  q.query_ids = good.data();
  q.n_query_ids = good.size();
  EXPECT_EQ(lfm_rerank(model.m, &q, nullptr, nullptr), LFM_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(lfm_rerank(nullptr, &q, scores, nullptr), LFM_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(lfm_rerank(model.m, nullptr, scores, nullptr), LFM_ERR_INVALID_ARGUMENT);
  q.n_documents = 0;
  EXPECT_EQ(lfm_rerank(model.m, &q, scores, nullptr), LFM_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(lfm_last_error()).find("no inputs (documents is empty)"), std::string::npos) << lfm_last_error();
  q.n_documents = 10000;  // issue 57: 10,000 documents in one call are refused, naming the limit
  EXPECT_EQ(lfm_rerank(model.m, &q, scores, nullptr), LFM_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(lfm_last_error()).find("10000 inputs, past the limit of 4096"), std::string::npos) << lfm_last_error();
  EXPECT_TRUE(std::isnan(scores[0]));  // a refused call writes nothing
  q.n_documents = 1;
  ASSERT_EQ(lfm_rerank(model.m, &q, scores, nullptr), LFM_OK) << lfm_last_error();
  EXPECT_GT(scores[0], 0);
}

// An empty text is what its prompt, marker and special tokens make it; with none of them there is
// nothing to embed, and the call is refused naming the text.
TEST(CApiEmbed, EmptyTextsAreTheirSpecialTokensOrRefused) {
  {
    TokenizedFixture fx("lfm25_colbert_tiny_f32");
    Model model(fx.dir.string());
    const std::vector<Vec> v = embed(model.m, {}, LFM_INPUT_DOCUMENT, LFM_POOLING_DEFAULT, {""});
    ASSERT_EQ(v.size(), 1u);
    EXPECT_EQ(v[0].ids, (std::vector<int32_t>{1, 251}));
    EXPECT_EQ(v[0].input_tokens, 0);
  }
  TokenizedFixture fx("lfm25_embedding_tiny_f32", false);
  Model model(fx.dir.string());
  const char* texts[] = {"!", ""};
  lfm_embed_request r;
  lfm_embed_request_init(&r);
  r.n_texts = 2;
  r.texts = texts;
  lfm_embeddings* out = nullptr;
  EXPECT_EQ(lfm_embed(model.m, &r, &out), LFM_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(lfm_last_error()).find("texts[1] has no tokens"), std::string::npos) << lfm_last_error();
  EXPECT_EQ(out, nullptr);
  r.n_texts = 1;
  ASSERT_EQ(lfm_embed(model.m, &r, &out), LFM_OK) << lfm_last_error();
  lfm_embeddings_free(out);
}

// Text that is not UTF-8 is refused naming the text and the byte; a text's length may be given
// (bytes past it are not read).
TEST(CApiEmbed, NonUtf8TextIsRefusedNamingIt) {
  TokenizedFixture fx("lfm25_colbert_tiny_f32");
  Model model(fx.dir.string());
  const char* texts[] = {"!?", "!\xff?"};
  lfm_embed_request r;
  lfm_embed_request_init(&r);
  r.n_texts = 2;
  r.texts = texts;
  r.input_type = LFM_INPUT_DOCUMENT;
  lfm_embeddings* out = nullptr;
  EXPECT_EQ(lfm_embed(model.m, &r, &out), LFM_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(lfm_last_error()).find("texts[1]"), std::string::npos) << lfm_last_error();
  EXPECT_NE(std::string(lfm_last_error()).find("UTF-8"), std::string::npos) << lfm_last_error();
  EXPECT_EQ(out, nullptr);
  const size_t lengths[] = {2, 1};  // "!" only: the bad byte is past the length
  r.text_lengths = lengths;
  ASSERT_EQ(lfm_embed(model.m, &r, &out), LFM_OK) << lfm_last_error();
  lfm_embedding e;
  e.struct_size = sizeof(e);
  ASSERT_EQ(lfm_embeddings_get(out, 1, &e), LFM_OK);
  EXPECT_EQ(std::vector<int32_t>(e.ids, e.ids + e.n_ids), (std::vector<int32_t>{1, 251, 33}));
  lfm_embeddings_free(out);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CApiEmbedFixture,
                         ::testing::Values("lfm25_embedding_tiny_f32", "lfm25_colbert_tiny_f32", "lfm2_colbert_tiny_f32"));

}  // namespace
