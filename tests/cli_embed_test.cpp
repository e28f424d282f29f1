// `lfm embed` and `lfm rerank` end to end: vectors of transformers' fixtures through --ids, text
// through a tokenizer (-f FILE as JSON Lines), the rerank order, and usage errors.
#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <nlohmann/json.hpp>

#include "retrieval_test_util.h"
#include "test_util.h"

namespace lfm {
namespace {

using test::normalized;

using json = nlohmann::json;

std::string join_ids(const json& ids) {
  std::string s;
  for (const auto& id : ids) s += (s.empty() ? "" : ",") + std::to_string(id.get<int>());
  return s;
}


TEST(CliEmbed, IdsGiveTheReferenceVectors) {
  for (const char* f : {"lfm25_embedding_tiny_f32", "lfm25_colbert_tiny_f32", "lfm2_colbert_tiny_f32"}) {
    SCOPED_TRACE(f);
    const json ref = test::read_json(test::retrieval_fixture(f) + "/reference.json");
    const json& t = ref["texts"][1];
    const std::string role = t["role"].is_null() ? "" : " --" + t["role"].get<std::string>();
    const auto r = test::run_command(std::string(LFM_BINARY) + " embed -m " + test::retrieval_fixture(f) + role +
                                     " --json --ids " + join_ids(t["ids"]) + " 2>&1");
    ASSERT_EQ(r.code, 0) << r.out;
    const json j = json::parse(r.out);
    EXPECT_EQ(j["tokens"][0], t["ids"]);
    if (ref["kind"] == "colbert") {
      const auto want = t["vectors"].get<std::vector<std::vector<double>>>();
      const auto got = j["embeddings"][0].get<std::vector<std::vector<float>>>();
      ASSERT_EQ(got.size(), want.size());
      for (size_t i = 0; i < want.size(); ++i) EXPECT_LT(test::max_abs_diff(got[i], want[i]), 1e-4) << "row " << i;
    } else {
      EXPECT_LT(test::max_abs_diff(normalized(j["embeddings"][0].get<std::vector<float>>()),
                                   t["embedding"].get<std::vector<double>>()),
                1e-4);
    }
  }
}

TEST(CliEmbed, TextFileAndRerankThroughATokenizer) {
  const json ref = test::read_json(test::retrieval_fixture("lfm25_colbert_tiny_f32") + "/reference.json");
  const auto dir = test::with_tokenizer("lfm25_colbert_tiny_f32", ref["tokens"]);
  // The fixture's notional tokenizer knows punctuation only: every character is a token.
  const std::string file = dir->write("docs.txt", "?!\n...\n(-)\n");
  const auto r = test::run_command(std::string(LFM_BINARY) + " embed -m " + dir->str() + " --document -f " + file + " 2>&1");
  ASSERT_EQ(r.code, 0) << r.out;
  std::vector<json> lines;
  for (size_t at = 0, nl; (nl = r.out.find('\n', at)) != std::string::npos; at = nl + 1)
    lines.push_back(json::parse(r.out.substr(at, nl - at)));
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0]["tokens"], json::array({1, 251, '?', '!'}));  // BOS, [D], the text
  EXPECT_EQ(lines[1]["embedding"].size(), 5u);
  const auto rr = test::run_command(std::string(LFM_BINARY) + " rerank -m " + dir->str() + " -q '@#' --json '?!' '...' '(-)' 2>&1");
  ASSERT_EQ(rr.code, 0) << rr.out;
  const json j = json::parse(rr.out);
  ASSERT_EQ(j["results"].size(), 3u);
  for (size_t i = 1; i < 3; ++i)
    EXPECT_GE(j["results"][i - 1]["relevance_score"].get<double>(), j["results"][i]["relevance_score"].get<double>());
  std::set<int> seen;
  for (const auto& x : j["results"]) seen.insert(x["index"].get<int>());
  EXPECT_EQ(seen, (std::set<int>{0, 1, 2}));
}

TEST(CliEmbed, BenchEmbedReadsDocumentsFromAFile) {
  const json ref = test::read_json(test::retrieval_fixture("lfm25_colbert_tiny_f32") + "/reference.json");
  const auto dir = test::with_tokenizer("lfm25_colbert_tiny_f32", ref["tokens"]);
  // One token per character plus BOS, no "[D] " prompt (what llama-embedding reads): 3 + 4 + 2.
  const std::string file = dir->write("docs.txt", "?!\n\n...\r\n(\n");
  const auto r = test::run_command(std::string(LFM_BINARY) + " bench-embed -m " + dir->str() + " -f " + file +
                                   " -r 1 -t 1 -o json 2>&1");
  ASSERT_EQ(r.code, 0) << r.out;
  const json j = json::parse(r.out);
  EXPECT_EQ(j["docs"], 3);
  EXPECT_EQ(j["tokens"], 9);
  EXPECT_GT(j["vectors_per_s"].get<double>(), 0.0);
  const auto empty = test::run_command(std::string(LFM_BINARY) + " bench-embed -m " + dir->str() + " -f " +
                                       dir->write("none.txt", "\n\n") + " 2>&1");
  EXPECT_NE(empty.code, 0);
  EXPECT_NE(empty.out.find("has no documents"), std::string::npos) << empty.out;
}

TEST(CliEmbed, InfoDescribesTheHead) {
  for (const auto& [f, kind] : {std::pair{"lfm25_embedding_tiny_f32", "embedding"}, {"lfm2_colbert_tiny_f32", "colbert"}}) {
    const auto r = test::run_command(std::string(LFM_BINARY) + " info --json -m " + test::retrieval_fixture(f) + " 2>&1");
    ASSERT_EQ(r.code, 0) << r.out;
    const json j = json::parse(r.out);
    EXPECT_EQ(j["retriever"]["kind"], kind) << f;
    EXPECT_EQ(j["config"]["has_lm_head"], false) << f;
  }
  const json colbert = json::parse(test::run_command(std::string(LFM_BINARY) + " info --json -m " +
                                                     test::retrieval_fixture("lfm25_colbert_tiny_f32")).out);
  EXPECT_EQ(colbert["retriever"]["dense_out"], 16);
  EXPECT_EQ(colbert["retriever"]["query_length"], 12);
  EXPECT_EQ(colbert["config"]["bidirectional"], true);
  const auto plain = test::run_command(std::string(LFM_BINARY) + " info --json -m " + test::data_dir() + "/hf/lfm2_a_fullattnidxs_tied_f32");
  EXPECT_FALSE(json::parse(plain.out).contains("retriever"));
}

TEST(CliEmbed, UsageErrorsSayWhatIsWrong) {
  const std::string m = test::retrieval_fixture("lfm25_embedding_tiny_f32");
  auto says = [&](const std::string& args, const std::string& text) {
    const auto r = test::run_command(std::string(LFM_BINARY) + " embed -m " + m + " " + args + " 2>&1");
    EXPECT_NE(r.code, 0) << args;
    EXPECT_NE(r.out.find(text), std::string::npos) << args << ": " << r.out;
  };
  says("", "exactly one of them");
  says("--ids 1,2 hello", "exactly one of them");
  says("--ids 1,999", "token id 999");
  says("--ids 1,2 --pooling max", "'max' is not one of cls, mean, last, none");
  says("hello", "no tokenizer.json");  // text needs the tokenizer the fixture lacks
  std::string long_ids = "1";
  for (int i = 0; i < 30; ++i) long_ids += ",5";
  says("--ids " + long_ids, "past the model's limit of 24");
  const auto g = test::run_command(std::string(LFM_BINARY) + " generate -m " + m + " --prompt-ids 1,2 2>&1");
  EXPECT_NE(g.code, 0);
  EXPECT_NE(g.out.find("cannot generate"), std::string::npos) << g.out;
}

}  // namespace
}  // namespace lfm
