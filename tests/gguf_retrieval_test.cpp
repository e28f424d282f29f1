// Retrievers as GGUF (issue 57): each HF fixture (tests/data/retrieval) converted to GGUF as
// `lfm convert` does it gives the same embedder output as the folder (F32: the same bits) and the
// reference's within 1e-4; the head's facts survive the round trip and are written under
// llama.cpp's keys (lfm2.attention.causal, lfm2.pooling_type, dense_2.weight,
// lfm2.embedding_length_out) plus lfm's lfm2.retrieval.*; malformed head metadata is refused with
// the key named.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <set>

#include "convert/gguf_export.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "engine/embedder.h"
#include "formats/gguf_writer.h"
#include "model/gguf_retrieval.h"
#include "model/model.h"
#include "model/retrieval.h"
#include "test_util.h"

namespace lfm {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string fixture(const std::string& name) { return test::data_dir() + "/retrieval/" + name; }

// HF folder → GGUF, as cmd_convert does it (the fixtures have no tokenizer.json: tokenizer "none").
void convert(const std::string& folder, const std::string& out, gguf::FileType ft) {
  auto m = load_model(folder, LoadOptions{.pack = false});
  const std::optional<RetrievalConfig> head = read_retrieval_config(folder, m->config().hidden_size);
  ASSERT_TRUE(head);
  const auto dense = head->dense_out > 0 ? open_dense_module(folder) : nullptr;
  gguf::ExportOptions opt;
  opt.type = ft;
  opt.threads = 2;
  opt.name = "fixture";
  opt.retrieval = &*head;
  opt.dense = dense.get();
  gguf::SourceRowProducer rows(m->source());
  gguf::write_gguf_model(out, m->config(), rows, opt);
}

InputRole role_of(const json& t) {
  if (t["role"].is_null()) return InputRole::kPlain;
  return parse_input_role(t["role"].get<std::string>());
}

// Every text of the reference through the embedder (ids as given, no tokenizer), in one call.
std::vector<Embedding> embed_all(const Model& m, Backend& be, const json& ref) {
  Embedder emb(m, nullptr, be);
  std::vector<PreparedText> prepared;
  for (const json& t : ref["texts"]) prepared.push_back(emb.prepare_ids(t["ids"].get<std::vector<int32_t>>(), role_of(t)));
  return emb.embed(prepared);
}

std::vector<float> normalized(std::vector<float> v) {
  double ss = 0;
  for (float x : v) ss += double(x) * x;
  for (float& x : v) x = static_cast<float>(x / std::max(std::sqrt(ss), 1e-12));
  return v;
}

class GgufRetrieval : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    folder_ = fixture(GetParam());
    ref_ = test::read_json(folder_ + "/reference.json");
    be_ = make_reference_backend(pool_);
  }
  std::string converted(gguf::FileType ft) {
    const std::string out = (dir_.path() / (std::string(gguf::file_type_label(ft)) + ".gguf")).string();
    convert(folder_, out, ft);
    return out;
  }
  ThreadPool pool_{2};
  test::TempDir dir_{"lfm_gguf_retrieval"};
  std::string folder_;
  json ref_;
  std::unique_ptr<Backend> be_;
};

TEST_P(GgufRetrieval, F32GivesTheFoldersVectorsBitForBit) {
  auto hf = load_model(folder_);
  auto g = load_model(converted(gguf::FileType::F32));
  ASSERT_TRUE(g->retrieval());
  const auto a = embed_all(*hf, *be_, ref_), b = embed_all(*g, *be_, ref_);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    SCOPED_TRACE(ref_["texts"][i]["name"].get<std::string>());
    EXPECT_EQ(a[i].rows, b[i].rows);
    EXPECT_EQ(a[i].dim, b[i].dim);
    EXPECT_EQ(a[i].values, b[i].values);
    EXPECT_EQ(a[i].scored, b[i].scored);
  }
}

TEST_P(GgufRetrieval, F32MatchesTheReference) {
  auto g = load_model(converted(gguf::FileType::F32));
  const auto out = embed_all(*g, *be_, ref_);
  const bool colbert = ref_["kind"] == "colbert";
  for (size_t i = 0; i < out.size(); ++i) {
    const json& t = ref_["texts"][i];
    SCOPED_TRACE(t["name"].get<std::string>());
    const Embedding& e = out[i];
    if (colbert) {
      const auto want = t["vectors"].get<std::vector<std::vector<double>>>();
      ASSERT_EQ(e.rows, static_cast<int64_t>(want.size()));
      for (int64_t r = 0; r < e.rows; ++r)
        EXPECT_LT(test::max_abs_diff(e.row(r), e.dim, want[static_cast<size_t>(r)]), 1e-4) << "row " << r;
    } else {
      ASSERT_EQ(e.rows, 1);
      EXPECT_LT(test::max_abs_diff(normalized(e.values), t["embedding"].get<std::vector<double>>()), 1e-4);
    }
  }
}

TEST_P(GgufRetrieval, HeadAndBackboneFactsRoundTrip) {
  auto hf = load_model(folder_);
  const std::string path = converted(gguf::FileType::F32);
  auto g = load_model(path);
  const ModelConfig &a = hf->config(), &b = g->config();
  EXPECT_EQ(b.bidirectional, a.bidirectional);
  EXPECT_EQ(b.bidirectional, ref_["backbone"] == "bidirectional");
  EXPECT_FALSE(b.has_lm_head);
  EXPECT_EQ(b.architecture, a.bidirectional ? "Lfm2BidirectionalModel" : "Lfm2Model");
  EXPECT_EQ(b.layer_pattern(), a.layer_pattern());
  EXPECT_EQ(b.ffn_dim, a.ffn_dim);
  EXPECT_EQ(b.conv_bias, a.conv_bias);
  ASSERT_TRUE(hf->retrieval() && g->retrieval());
  const RetrievalConfig &x = hf->retrieval()->config(), &y = g->retrieval()->config();
  EXPECT_EQ(y.kind, x.kind);
  EXPECT_EQ(y.pooling, x.pooling);
  EXPECT_EQ(y.normalize, x.normalize);
  EXPECT_EQ(y.max_tokens, x.max_tokens);
  EXPECT_EQ(y.query_prompt, x.query_prompt);
  EXPECT_EQ(y.document_prompt, x.document_prompt);
  EXPECT_EQ(y.query_prefix, x.query_prefix);
  EXPECT_EQ(y.document_prefix, x.document_prefix);
  EXPECT_EQ(y.query_length, x.query_length);
  EXPECT_EQ(y.document_length, x.document_length);
  EXPECT_EQ(y.do_query_expansion, x.do_query_expansion);
  EXPECT_EQ(y.attend_to_expansion_tokens, x.attend_to_expansion_tokens);
  EXPECT_EQ(y.skiplist_words, x.skiplist_words);
  EXPECT_EQ(y.dense_out, x.dense_out);

  // llama.cpp's keys, as its converter (conversion/lfm2.py) writes them.
  const gguf::GgufFile f(path);
  EXPECT_EQ(f.find("general.architecture")->str, "lfm2");
  const gguf::Value* causal = f.find("lfm2.attention.causal");
  if (a.bidirectional) {
    ASSERT_TRUE(causal);
    EXPECT_FALSE(causal->as_bool("causal"));
  } else {
    EXPECT_FALSE(causal);  // the causal default, not written
  }
  EXPECT_FALSE(f.find_tensor("output.weight"));
  EXPECT_EQ(f.find("tokenizer.ggml.model")->str, "none");
  if (ref_["kind"] == "colbert") {
    EXPECT_FALSE(f.find("lfm2.pooling_type"));  // no Pooling module: llama.cpp writes none
    EXPECT_EQ(f.find("lfm2.embedding_length_out")->as_int("out"), 16);
    const gguf::TensorInfo* d = f.find_tensor("dense_2.weight");
    ASSERT_TRUE(d);
    EXPECT_EQ(d->ne, (std::vector<int64_t>{64, 16}));
    EXPECT_EQ(d->dtype, DType::F32);
  } else {
    EXPECT_EQ(f.find("lfm2.pooling_type")->as_int("pooling"), 2);  // LLAMA_POOLING_TYPE_CLS
    EXPECT_FALSE(f.find("lfm2.embedding_length_out"));
    EXPECT_FALSE(f.find_tensor("dense_2.weight"));
  }
}

// GGUF → GGUF (a re-convert) writes the same file.
TEST_P(GgufRetrieval, ReconvertingTheGgufGivesTheSameBytes) {
  const std::string first = converted(gguf::FileType::F32);
  auto src = std::make_shared<const gguf::GgufFile>(first);
  auto m = load_model(first, LoadOptions{.pack = false});
  const auto head = gguf::retrieval_config_from_gguf(*src, m->config());
  ASSERT_TRUE(head);
  const auto dense = gguf::gguf_dense_source(*src);
  gguf::ExportOptions opt;
  opt.threads = 2;
  opt.name = "fixture";
  opt.retrieval = &*head;
  opt.dense = dense.get();
  const std::string second = (dir_.path() / "again.gguf").string();
  gguf::SourceRowProducer rows(m->source());
  gguf::write_gguf_model(second, m->config(), rows, opt);
  EXPECT_EQ(test::read_file(first), test::read_file(second));
}

// The lossy types load with the Dense projection stored as the type asks and stay near F32. The
// bounds on the unit vectors are 5–10× what these deliberately hot fixtures show (measured F16
// 4e-4–2e-3, BF16 3e-3–1.4e-2, Q8_0 1.6e-2–4e-2; relative weight errors as gguf_convert_test.cpp
// derives them, through 6 layers and the Dense): they catch a wrong type or layout, not rounding.
TEST_P(GgufRetrieval, LossyTypesLoadAndStayClose) {
  auto f32 = load_model(converted(gguf::FileType::F32));
  const auto want = embed_all(*f32, *be_, ref_);
  const bool colbert = ref_["kind"] == "colbert";
  for (auto [ft, dt, tol] : {std::tuple{gguf::FileType::F16, DType::F16, 0.02}, {gguf::FileType::BF16, DType::BF16, 0.1},
                             {gguf::FileType::Q8_0, DType::Q8_0, 0.2}}) {
    SCOPED_TRACE(gguf::file_type_label(ft));
    const std::string path = converted(ft);
    if (colbert) {
      EXPECT_EQ(gguf::GgufFile(path).find_tensor("dense_2.weight")->dtype, dt);
    }
    auto g = load_model(path);
    const auto got = embed_all(*g, *be_, ref_);
    double worst = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_EQ(got[i].values.size(), want[i].values.size());
      worst = std::max(worst, test::max_abs_diff(colbert ? got[i].values : normalized(got[i].values),
                                                 colbert ? want[i].values : normalized(want[i].values)));
    }
    std::printf("[ %s ] %s: max |Δ| of the unit vectors vs F32 %.3g (bound %.3g)\n", GetParam().c_str(),
                gguf::file_type_label(ft), worst, tol);
    EXPECT_LT(worst, tol);
  }
}

// The command line: `lfm convert` of the folder (and of the file again), then `lfm embed` on the
// file prints what it prints for the folder (the file has no tokenizer: ids only).
TEST_P(GgufRetrieval, CliConvertThenEmbedPrintsWhatTheFolderGives) {
  const std::string out = (dir_.path() / "cli.gguf").string();
  const test::RunResult conv = test::run_lfm("convert -q -t 1 --type f32 -m " + folder_ + " -o " + out);
  ASSERT_EQ(conv.code, 0) << conv.out;
  // GGUF → GGUF through the command keeps every byte (the head included).
  const std::string again = (dir_.path() / "cli_again.gguf").string();
  const test::RunResult reconv = test::run_lfm("convert -q -t 1 --type f32 -m " + out + " -o " + again);
  ASSERT_EQ(reconv.code, 0) << reconv.out;
  EXPECT_EQ(test::read_file(out), test::read_file(again));
  for (const json& t : ref_["texts"]) {
    std::string ids;
    for (int id : t["ids"]) ids += (ids.empty() ? "" : ",") + std::to_string(id);
    const std::string args = std::string(t["role"].is_null() ? "" : " --" + t["role"].get<std::string>()) +
                             " -t 1 --json --ids " + ids;
    const test::RunResult a = test::run_lfm("embed -m " + folder_ + args, test::Stderr::kDiscard);
    const test::RunResult b = test::run_lfm("embed -m " + out + args, test::Stderr::kDiscard);
    ASSERT_EQ(a.code, 0) << t["name"];
    ASSERT_EQ(b.code, 0) << t["name"] << ": " << test::run_lfm("embed -m " + out + args).out;
    EXPECT_EQ(a.out, b.out) << t["name"];
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, GgufRetrieval,
                         ::testing::Values("lfm25_embedding_tiny_f32", "lfm25_colbert_tiny_f32", "lfm2_colbert_tiny_f32"));

// A copy of a GGUF with metadata keys replaced / dropped and tensors dropped.
void rewrite(const std::string& from, const std::string& to, const std::vector<std::pair<std::string, gguf::Value>>& set,
             const std::set<std::string>& drop) {
  const gguf::GgufFile f(from);
  gguf::GgufWriter w;
  for (const auto& [k, v] : f.metadata())
    if (k != "general.alignment" && !drop.count(k)) w.set(k, v);
  for (const auto& [k, v] : set) w.set(k, v);
  std::vector<const gguf::TensorInfo*> kept;
  for (const gguf::TensorInfo& t : f.tensors()) {
    if (drop.count(t.name)) continue;
    w.add_tensor(t.name, t.ne, t.dtype);
    kept.push_back(&t);
  }
  w.begin(to);
  for (const gguf::TensorInfo* t : kept) w.write(t->data, t->nbytes);
  w.finish();
}

std::string load_error(const std::string& path) {
  try {
    load_model(path);
  } catch (const Error& e) {
    return e.what();
  }
  return "(loaded)";
}

class GgufRetrievalMalformed : public ::testing::Test {
 protected:
  std::string variant(const std::string& fixture_name, const std::vector<std::pair<std::string, gguf::Value>>& set,
                      const std::set<std::string>& drop = {}) {
    const std::string base = (dir_.path() / (fixture_name + ".gguf")).string();
    if (!fs::exists(base)) convert(fixture(fixture_name), base, gguf::FileType::F32);
    const std::string out = (dir_.path() / ("bad" + std::to_string(n_++) + ".gguf")).string();
    rewrite(base, out, set, drop);
    return out;
  }
  test::TempDir dir_{"lfm_gguf_retrieval_bad"};
  int n_ = 0;
};

TEST_F(GgufRetrievalMalformed, TheUnchangedCopyLoads) {
  EXPECT_EQ(load_error(variant("lfm25_colbert_tiny_f32", {})), "(loaded)");
  EXPECT_EQ(load_error(variant("lfm25_embedding_tiny_f32", {})), "(loaded)");
}

TEST_F(GgufRetrievalMalformed, PoolingTypeOutOfRange) {
  const std::string e = load_error(variant("lfm25_embedding_tiny_f32", {{"lfm2.pooling_type", gguf::Value::of_u32(7)}}));
  EXPECT_NE(e.find("lfm2.pooling_type = 7"), std::string::npos) << e;
  const std::string rank = load_error(variant("lfm25_embedding_tiny_f32", {{"lfm2.pooling_type", gguf::Value::of_u32(4)}}));
  EXPECT_NE(rank.find("lfm2.pooling_type = 4 (RANK"), std::string::npos) << rank;
  const std::string colbert = load_error(variant("lfm25_colbert_tiny_f32", {{"lfm2.pooling_type", gguf::Value::of_u32(2)}}));
  EXPECT_NE(colbert.find("lfm2.pooling_type = 2 for a ColBERT model"), std::string::npos) << colbert;
}

TEST_F(GgufRetrievalMalformed, EmbeddingLengthOutDiffersFromTheDenseTensor) {
  const std::string e =
      load_error(variant("lfm25_colbert_tiny_f32", {{"lfm2.embedding_length_out", gguf::Value::of_u32(8)}}));
  EXPECT_NE(e.find("tensor 'dense_2.weight' has ggml dims [64, 16], expected [64, 8]"), std::string::npos) << e;
  EXPECT_NE(e.find("lfm2.embedding_length_out 8"), std::string::npos) << e;
}

TEST_F(GgufRetrievalMalformed, DenseTensorWithoutItsWidth) {
  const std::string e = load_error(variant("lfm2_colbert_tiny_f32", {}, {"lfm2.embedding_length_out"}));
  EXPECT_NE(e.find("has tensor 'dense_2.weight' but lacks lfm2.embedding_length_out"), std::string::npos) << e;
}

TEST_F(GgufRetrievalMalformed, WidthWithoutTheDenseTensor) {
  const std::string e = load_error(variant("lfm2_colbert_tiny_f32", {}, {"dense_2.weight"}));
  EXPECT_NE(e.find("sets lfm2.embedding_length_out = 16 but has no tensor 'dense_2.weight'"), std::string::npos) << e;
}

TEST_F(GgufRetrievalMalformed, BadRetrievalKeys) {
  const std::string kind =
      load_error(variant("lfm25_colbert_tiny_f32", {{"lfm2.retrieval.kind", gguf::Value::of_string("splade")}}));
  EXPECT_NE(kind.find("lfm2.retrieval.kind = 'splade'"), std::string::npos) << kind;
  const std::string len =
      load_error(variant("lfm25_colbert_tiny_f32", {{"lfm2.retrieval.query_length", gguf::Value::of_string("12")}}));
  EXPECT_NE(len.find("lfm2.retrieval.query_length"), std::string::npos) << len;
}

// LiquidAI's published GGUFs of the bidirectional retrievers name the architecture `lfm2-bidir`
// (a llama.cpp fork's), with every key under that prefix and no attention.causal: the same model.
TEST_F(GgufRetrievalMalformed, TheLfm2BidirArchitectureIsTheBidirectionalModel) {
  for (const char* name : {"lfm25_embedding_tiny_f32", "lfm25_colbert_tiny_f32"}) {
    SCOPED_TRACE(name);
    const std::string base = variant(name, {});
    std::vector<std::pair<std::string, gguf::Value>> set = {{"general.architecture", gguf::Value::of_string("lfm2-bidir")}};
    std::set<std::string> drop = {"general.architecture"};
    const gguf::GgufFile file(base);
    for (const auto& [k, v] : file.metadata()) {
      if (k.rfind("lfm2.", 0) != 0) continue;
      drop.insert(k);
      if (k != "lfm2.attention.causal") set.emplace_back("lfm2-bidir." + k.substr(5), v);
    }
    const std::string bidir = variant(name, set, drop);
    auto a = load_model(base), b = load_model(bidir);
    EXPECT_TRUE(b->config().bidirectional);
    EXPECT_FALSE(b->config().has_lm_head);
    ASSERT_TRUE(b->retrieval());
    EXPECT_EQ(b->retrieval()->config().colbert(), a->retrieval()->config().colbert());
    ThreadPool pool(1);
    auto be = make_reference_backend(pool);
    const json ref = test::read_json(fixture(name) + "/reference.json");
    const auto va = embed_all(*a, *be, ref), vb = embed_all(*b, *be, ref);
    ASSERT_EQ(va.size(), vb.size());
    for (size_t i = 0; i < va.size(); ++i) EXPECT_EQ(va[i].values, vb[i].values) << i;
    // attention.causal, when present, still decides.
    set.emplace_back("lfm2-bidir.attention.causal", gguf::Value::of_bool(true));
    EXPECT_FALSE(load_model(variant(name, set, drop))->config().bidirectional);
  }
  const std::string moe = load_error(variant("lfm25_embedding_tiny_f32", {{"general.architecture", gguf::Value::of_string("lfm3")}}));
  EXPECT_NE(moe.find("has architecture 'lfm3' (lfm supports 'lfm2', 'lfm2moe' and 'lfm2-bidir')"), std::string::npos) << moe;
}

// What llama.cpp's own converter writes (no lfm2.retrieval.* keys) reads with PyLate's defaults.
TEST_F(GgufRetrievalMalformed, AColbertFileWithoutLfmKeysGetsPylatesDefaults) {
  std::set<std::string> drop;
  for (const char* k : {"kind", "normalize", "max_tokens", "query_prefix", "document_prefix", "query_length",
                        "document_length", "do_query_expansion", "attend_to_expansion_tokens", "skiplist_words"})
    drop.insert(std::string("lfm2.retrieval.") + k);
  auto m = load_model(variant("lfm2_colbert_tiny_f32", {}, drop));
  ASSERT_TRUE(m->retrieval());
  const RetrievalConfig& r = m->retrieval()->config();
  EXPECT_TRUE(r.colbert());
  EXPECT_EQ(r.dense_out, 16);
  EXPECT_EQ(r.query_prefix, "[Q] ");
  EXPECT_EQ(r.query_length, 32);
  EXPECT_EQ(r.document_length, 180);
  EXPECT_EQ(r.skiplist_words.size(), 32u);
  EXPECT_FALSE(m->config().has_lm_head);
}

}  // namespace
}  // namespace lfm
