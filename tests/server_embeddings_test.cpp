// `lfm serve` on a retriever over loopback HTTP: /v1/embeddings (OpenAI's shape, token-id and
// text inputs, float and base64, the openai npm client's embeddings.create) against transformers'
// fixtures, /v1/rerank and /rerank, concurrent calls sharing encoder passes, bad input as 400s,
// generation refused, and /metrics.
#include <gtest/gtest.h>
#include <httplib.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <future>
#include <nlohmann/json.hpp>
#include <thread>

#include "core/base64.h"
#include "retrieval_test_util.h"
#include "server_test_util.h"
#include "test_util.h"

namespace lfm {
namespace {

using test::normalized;

using json = nlohmann::json;
using test::post;
using test::ServerProc;


class ServerEmbeddingsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    for (const char* f : {"lfm25_embedding_tiny_f32", "lfm25_colbert_tiny_f32"}) {
      refs_[f] = test::read_json(test::retrieval_fixture(f) + "/reference.json");
      dirs_[f] = test::with_tokenizer(f, refs_[f]["tokens"]).release();
    }
    embed_ = new ServerProc(dirs_["lfm25_embedding_tiny_f32"]->str(), {"--embed-batch-tokens", "40"});
    colbert_ = new ServerProc(dirs_["lfm25_colbert_tiny_f32"]->str(), {"--rerank-max-documents", "8"});
  }
  static void TearDownTestSuite() {
    delete embed_;
    delete colbert_;
    for (auto& [k, d] : dirs_) delete d;
    dirs_.clear();
  }
  // The reference texts of a fixture with the given role.
  static std::vector<json> texts(const std::string& f, const char* role) {
    std::vector<json> out;
    for (const json& t : refs_[f]["texts"])
      if (t["role"] == role) out.push_back(t);
    return out;
  }
  static inline std::map<std::string, json> refs_;
  static inline std::map<std::string, test::TempDir*> dirs_;
  static inline ServerProc *embed_ = nullptr, *colbert_ = nullptr;
};

TEST_F(ServerEmbeddingsTest, TokenIdInputsGiveTheReferenceVectors) {
  auto c = embed_->client();
  const auto docs = texts("lfm25_embedding_tiny_f32", "document");
  json input = json::array();
  for (const json& t : docs) input.push_back(t["ids"]);
  int st = 0;
  const json r = post(c, "/v1/embeddings", {{"input", input}}, &st);
  ASSERT_EQ(st, 200) << r.dump();
  EXPECT_EQ(r["object"], "list");
  ASSERT_EQ(r["data"].size(), docs.size());
  int64_t tokens = 0;
  for (size_t i = 0; i < docs.size(); ++i) {
    EXPECT_EQ(r["data"][i]["index"], i);
    EXPECT_EQ(r["data"][i]["object"], "embedding");
    // The model has no Normalize module: the raw CLS vector, whose direction the reference records.
    EXPECT_LT(test::max_abs_diff(normalized(r["data"][i]["embedding"].get<std::vector<float>>()),
                                 docs[i]["embedding"].get<std::vector<double>>()),
              1e-4)
        << docs[i]["name"];
    tokens += static_cast<int64_t>(docs[i]["ids"].size());
  }
  EXPECT_EQ(r["usage"]["prompt_tokens"], tokens);
  EXPECT_EQ(r["usage"]["total_tokens"], tokens);
  // base64: the same float32 bytes.
  const json b = post(c, "/v1/embeddings", {{"input", input}, {"encoding_format", "base64"}}, &st);
  ASSERT_EQ(st, 200) << b.dump();
  for (size_t i = 0; i < docs.size(); ++i) {
    const auto bytes = decode_base64(b["data"][i]["embedding"].get<std::string>());
    ASSERT_TRUE(bytes);
    std::vector<float> v(bytes->size() / 4);
    std::memcpy(v.data(), bytes->data(), bytes->size());
    EXPECT_EQ(v, r["data"][i]["embedding"].get<std::vector<float>>());
  }
  // One id array as the whole input is one text.
  const json one = post(c, "/v1/embeddings", {{"input", docs[0]["ids"]}}, &st);
  ASSERT_EQ(st, 200);
  EXPECT_EQ(one["data"].size(), 1u);
  EXPECT_EQ(one["data"][0]["embedding"], r["data"][0]["embedding"]);
}

TEST_F(ServerEmbeddingsTest, ColbertTokenVectorsAndRerankScores) {
  auto c = colbert_->client();
  const auto queries = texts("lfm25_colbert_tiny_f32", "query");
  int st = 0;
  const json r = post(c, "/v1/embeddings", {{"input", json::array({queries[0]["ids"]})}, {"input_type", "query"}}, &st);
  ASSERT_EQ(st, 200) << r.dump();
  const auto want = queries[0]["vectors"].get<std::vector<std::vector<double>>>();
  const auto got = r["data"][0]["embedding"].get<std::vector<std::vector<float>>>();
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_LT(test::max_abs_diff(got[i], want[i]), 1e-4) << "row " << i;

  // Rerank of text: punctuation-only documents of the fixture's notional tokenizer (each character one
  // token), scored as the embedder scores the same texts, best first, top_n and documents returned.
  const json docs = json::array({"?!", "...", "(-)", {{"text", ":;"}}});
  const json rr = post(c, "/v1/rerank", {{"query", "@#"}, {"documents", docs}, {"top_n", 3}, {"return_documents", true}}, &st);
  ASSERT_EQ(st, 200) << rr.dump();
  ASSERT_EQ(rr["results"].size(), 3u);
  double last = INFINITY;
  for (const json& item : rr["results"]) {
    EXPECT_LE(item["relevance_score"].get<double>(), last);
    last = item["relevance_score"];
    const size_t i = item["index"];
    EXPECT_EQ(item["document"]["text"], docs[i].is_string() ? docs[i] : docs[i]["text"]);
  }
  // Each score is MaxSim of the vectors /v1/embeddings gives for the same texts (a document's
  // skiplisted rows left out there, as from scoring).
  const json q = post(c, "/v1/embeddings", {{"input", "@#"}, {"input_type", "query"}}, &st);
  ASSERT_EQ(st, 200);
  for (const json& item : rr["results"]) {
    const size_t i = item["index"];
    const json d = post(c, "/v1/embeddings", {{"input", docs[i].is_string() ? docs[i] : docs[i]["text"]}, {"input_type", "document"}}, &st);
    ASSERT_EQ(st, 200);
    EXPECT_EQ(d["data"][0]["embedding"].size(), 2u) << "BOS and [D] are kept, the punctuation is skiplisted";
    double maxsim = 0;
    for (const auto& qv : q["data"][0]["embedding"]) {
      double top = -INFINITY;
      for (const auto& dv : d["data"][0]["embedding"]) {
        double s2 = 0;
        for (size_t k = 0; k < qv.size(); ++k) s2 += qv[k].get<double>() * dv[k].get<double>();
        top = std::max(top, s2);
      }
      maxsim += top;
    }
    EXPECT_NEAR(item["relevance_score"].get<double>(), maxsim, 1e-5) << "document " << i;
  }
  // /rerank is the same route (llama-server's name).
  const json rr2 = post(c, "/rerank", {{"query", "@#"}, {"documents", docs}}, &st);
  ASSERT_EQ(st, 200);
  EXPECT_EQ(rr2["results"].size(), 4u);
  EXPECT_EQ(rr2["results"][0]["relevance_score"], rr["results"][0]["relevance_score"]);
}

TEST_F(ServerEmbeddingsTest, BadRequestsAre400sNamingTheProblem) {
  auto c = colbert_->client();
  auto expect_400 = [&](const std::string& path, const json& body, const std::string& says) {
    int st = 0;
    const json r = post(c, path, body, &st);
    EXPECT_EQ(st, 400) << path << " " << body.dump().substr(0, 200) << " → " << r.dump();
    EXPECT_NE(r.dump().find(says), std::string::npos) << r.dump();
  };
  expect_400("/v1/embeddings", json::object(), "'input' is required");
  expect_400("/v1/embeddings", {{"input", json::array()}}, "must not be empty");
  expect_400("/v1/embeddings", {{"input", json::array({1, 256})}}, "token ids in [0, 256)");
  expect_400("/v1/embeddings", {{"input", json::array({json::array({1, 2}), 5})}}, "'input[1]'");
  expect_400("/v1/embeddings", {{"input", "a"}, {"encoding_format", "int8"}}, "encoding_format");
  expect_400("/v1/embeddings", {{"input", "a"}, {"dimensions", 8}}, "'dimensions' must be 16");
  expect_400("/v1/embeddings", {{"input", "a"}, {"input_type", "passage!"}}, "input type");
  expect_400("/v1/embeddings", {{"input", "a"}, {"pooling", "mean"}}, "pooling cannot be changed");
  std::vector<int> long_ids(40, 100);
  long_ids[0] = 1;
  expect_400("/v1/embeddings", {{"input", json::array({long_ids})}}, "past the model's limit of 20");
  expect_400("/v1/embeddings", {{"input", json::array_t(4097, json::array({1, 5}))}}, "past the limit of 4096 per call");
  // 10,000 documents: refused whole, before any is encoded.
  expect_400("/v1/rerank", {{"query", "a"}, {"documents", json::array_t(10000, "?")}}, "10000 documents, past the limit");
  expect_400("/v1/rerank", {{"query", "a"}}, "'documents' must be an array");
  expect_400("/v1/rerank", {{"query", "a"}, {"documents", json::array()}}, "must not be empty");
  expect_400("/v1/rerank", {{"query", 5}, {"documents", json::array({"x"})}}, "'query' must be a string");
  expect_400("/v1/rerank", {{"query", "a"}, {"documents", json::array({"x", 3})}}, "'documents[1]'");
  expect_400("/v1/rerank", {{"query", "a"}, {"documents", json::array({"1", "2", "3", "4", "5", "6", "7", "8", "9"})}},
             "past the limit of 8");
  expect_400("/v1/rerank", {{"query", "a"}, {"documents", json::array({"x"})}, {"top_n", 0}}, "top_n");
  // Invalid UTF-8 cannot travel in JSON; a body that holds it is refused as malformed.
  auto raw = c.Post("/v1/embeddings", std::string("{\"input\": \"\xff\xfe\"}"), "application/json");
  ASSERT_TRUE(raw);
  EXPECT_EQ(raw->status, 400) << raw->body;
  // A retriever does not generate.
  int st = 0;
  const json g = post(c, "/v1/chat/completions", {{"messages", json::array({{{"role", "user"}, {"content", "hi"}}})}}, &st);
  EXPECT_EQ(st, 400);
  EXPECT_NE(g.dump().find("retriever"), std::string::npos) << g.dump();
  const json g2 = post(c, "/v1/completions", {{"prompt", json::array({1, 2})}}, &st);
  EXPECT_EQ(st, 400);
  EXPECT_EQ(c.Get("/health")->status, 200);
}

// Many concurrent calls, each checked against its own result alone: texts never depend on the
// calls they shared an encoder pass with, and /metrics counts every call.
TEST_F(ServerEmbeddingsTest, ConcurrentCallsShareThePassesAndKeepTheirResults) {
  const auto docs = texts("lfm25_embedding_tiny_f32", "document");
  std::vector<json> alone;
  {
    auto c = embed_->client();
    for (const json& t : docs) {
      int st = 0;
      const json r = post(c, "/v1/embeddings", {{"input", json::array({t["ids"]})}}, &st);
      ASSERT_EQ(st, 200);
      alone.push_back(r["data"][0]["embedding"]);
    }
  }
  auto metric = [&](const std::string& name) {
    const std::string m = embed_->client().Get("/metrics")->body;
    const size_t at = m.find("\n" + name + " ");
    return at == std::string::npos ? -1.0 : std::stod(m.substr(at + name.size() + 2));
  };
  const double calls_before = metric("lfm:embedding_calls_total");
  constexpr int kThreads = 8, kCalls = 6;
  std::vector<std::future<std::string>> jobs;
  for (int t = 0; t < kThreads; ++t)
    jobs.push_back(std::async(std::launch::async, [&, t]() -> std::string {
      auto c = embed_->client();
      for (int k = 0; k < kCalls; ++k) {
        const size_t i = static_cast<size_t>(t + k) % docs.size(), j = static_cast<size_t>(t * 3 + k) % docs.size();
        int st = 0;
        const json r = post(c, "/v1/embeddings", {{"input", json::array({docs[i]["ids"], docs[j]["ids"]})}}, &st);
        if (st != 200) return "status " + std::to_string(st) + ": " + r.dump();
        if (r["data"][0]["embedding"] != alone[i] || r["data"][1]["embedding"] != alone[j])
          return "call " + std::to_string(k) + " of thread " + std::to_string(t) + " differs from the texts alone";
      }
      return "";
    }));
  for (auto& j : jobs) EXPECT_EQ(j.get(), "");
  EXPECT_EQ(metric("lfm:embedding_calls_total") - calls_before, kThreads * kCalls);
  EXPECT_GE(metric("lfm:embedding_passes_total"), 1);
}

// The official `openai` npm client (tools/server-tests, installed by scripts/setup.sh).
TEST_F(ServerEmbeddingsTest, OfficialOpenAiClientEmbeddingsCreate) {
  const std::string dir = std::string(LFM_SOURCE_DIR) + "/tools/server-tests";
  ASSERT_TRUE(std::filesystem::exists(dir + "/node_modules/openai"))
      << "tools/server-tests/node_modules is missing: run scripts/setup.sh (npm ci --prefix tools/server-tests)";
  const auto docs = texts("lfm25_embedding_tiny_f32", "document");
  json input = json::array();
  for (const json& t : docs) input.push_back(t["ids"]);
  const auto r = test::run_command("node '" + dir + "/openai_embeddings.mjs' http://127.0.0.1:" +
                                   std::to_string(embed_->port()) + "/v1 '" + input.dump() + "' 2>&1");
  ASSERT_EQ(r.code, 0) << r.out;
  const json j = json::parse(r.out);
  for (const char* format : {"base64", "float"}) {
    ASSERT_EQ(j[format]["data"].size(), docs.size()) << format;
    for (size_t i = 0; i < docs.size(); ++i)
      EXPECT_LT(test::max_abs_diff(normalized(j[format]["data"][i]["embedding"].get<std::vector<float>>()),
                                   docs[i]["embedding"].get<std::vector<double>>()),
                1e-4)
          << format << " " << docs[i]["name"];
  }
  EXPECT_GT(j["base64"]["usage"]["prompt_tokens"].get<int>(), 0);
  EXPECT_EQ(j["empty"]["status"], 400);
}

// A generative model serves embeddings only when asked (--embeddings).
TEST(ServerEmbeddingsGenerative, EmbeddingsOnlyWhenAskedFor) {
  const std::string model = test::fixture_dir("lfm2_a_fullattnidxs_tied_f32");
  ServerProc plain(model, {"--parallel", "1", "--ctx-size", "64"});
  auto c = plain.client();
  int st = 0;
  const json r = post(c, "/v1/embeddings", {{"input", json::array({1, 2, 3})}}, &st);
  EXPECT_EQ(st, 400);
  EXPECT_NE(r.dump().find("--embeddings"), std::string::npos) << r.dump();
  ServerProc with(model, {"--parallel", "1", "--ctx-size", "64", "--embeddings"});
  auto c2 = with.client();
  const json e = post(c2, "/v1/embeddings", {{"input", json::array({1, 2, 3})}}, &st);
  ASSERT_EQ(st, 200) << e.dump();
  const auto v = e["data"][0]["embedding"].get<std::vector<float>>();
  EXPECT_EQ(v.size(), 64u);
  double ss = 0;
  for (float x : v) ss += double(x) * x;
  EXPECT_NEAR(ss, 1.0, 1e-5);  // last-token pooling, normalised
  // It still generates.
  const json g = post(c2, "/v1/completions", {{"prompt", json::array({1, 2})}, {"max_tokens", 2}}, &st);
  EXPECT_EQ(st, 200) << g.dump();
}

}  // namespace
}  // namespace lfm
