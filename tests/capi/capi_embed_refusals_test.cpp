// The C API's retrievers refusing what they cannot do, each with a status and a message naming
// the argument, before the model runs: bad arguments and limits, empty and non-UTF-8 texts,
// generation on a retriever, embedding a generative model without asking for a pooling.
#include "capi_embed_util.h"

namespace {

using namespace lfm_capi_embed_test;

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

}  // namespace
