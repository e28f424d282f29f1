// Shared by the C API's retriever tests: the fixtures of tests/data/retrieval, a tokenizer written
// for them, and lfm_embed / lfm_rerank calls whose results are copied out.
#pragma once

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

namespace lfm_capi_embed_test {

using namespace lfm_capi_test;
using nlohmann::json;
namespace fs = std::filesystem;

constexpr double kTol = 1e-4;

inline std::string fixture_dir(const std::string& name) { return kData + "/retrieval/" + name; }

inline json reference(const std::string& name) {
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
inline std::vector<Vec> embed(lfm_model* m, const std::vector<std::vector<int32_t>>& ids, int32_t input_type,
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

inline double max_diff(const float* a, const std::vector<double>& b) {
  double m = 0;
  for (size_t i = 0; i < b.size(); ++i) m = std::max(m, std::abs(static_cast<double>(a[i]) - b[i]));
  return m;
}

inline std::vector<float> unit(std::vector<float> v) {
  double ss = 0;
  for (float x : v) ss += static_cast<double>(x) * x;
  for (float& x : v) x = static_cast<float>(x / std::max(std::sqrt(ss), 1e-12));
  return v;
}

inline int32_t input_type_of(const json& t) {
  if (t["role"].is_null()) return LFM_INPUT_NONE;
  return t["role"] == "query" ? LFM_INPUT_QUERY : LFM_INPUT_DOCUMENT;
}

struct Rerank {
  lfm_status status;
  std::vector<double> scores;
  std::vector<size_t> order;
};

inline Rerank rerank_ids(lfm_model* m, const std::vector<int32_t>& query, const std::vector<std::vector<int32_t>>& docs) {
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

}  // namespace lfm_capi_embed_test
