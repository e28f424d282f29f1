// Helpers for tests of the retrievers (tests/data/retrieval: fixtures made by transformers).
#pragma once

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "test_util.h"

namespace lfm::test {

// v / ‖v‖ (the direction of a vector, as the fixtures record an unnormalised model's vectors).
inline std::vector<float> normalized(std::vector<float> v) {
  double ss = 0;
  for (float x : v) ss += double(x) * x;
  const double norm = std::max(std::sqrt(ss), 1e-12);
  for (float& x : v) x = static_cast<float>(x / norm);
  return v;
}

inline std::string retrieval_fixture(const std::string& name) { return test::data_dir() + "/retrieval/" + name; }

// The fixtures have no tokenizer.json (every text is given as ids); PyLate's skiplist is a
// token lookup, so this writes one whose vocabulary holds the fixture's notional tokens
// (punctuation character c is id ord(c), the markers and special tokens at their ids) beside a
// copy of the fixture.
inline std::unique_ptr<TempDir> with_tokenizer(const std::string& fixture, const nlohmann::json& tokens) {
  auto dir = std::make_unique<TempDir>("lfm_retrieval");
  std::filesystem::copy(retrieval_fixture(fixture), dir->path(), std::filesystem::copy_options::recursive);
  nlohmann::json vocab = nlohmann::json::object();
  std::map<int, std::string> special = {{0, "<|pad|>"}, {1, "<|startoftext|>"}, {7, "<|im_end|>"}};
  if (tokens.contains("query_prefix")) special[tokens["query_prefix"].get<int>()] = "[Q] ";
  if (tokens.contains("document_prefix")) special[tokens["document_prefix"].get<int>()] = "[D] ";
  std::map<int, std::string> punct;  // ASCII punctuation: the fixtures' ids for it
  for (int c = 33; c < 127; ++c)
    if (!std::isalnum(c)) punct[c] = std::string(1, static_cast<char>(c));
  nlohmann::json added = nlohmann::json::array();
  for (int id = 0; id < tokens["vocab_size"].get<int>(); ++id) {
    if (special.count(id)) {
      vocab[special[id]] = id;
      added.push_back({{"id", id}, {"content", special[id]}, {"special", true}});
    } else {
      vocab[punct.count(id) ? punct[id] : "t" + std::to_string(id)] = id;
    }
  }
  nlohmann::json tok = minimal_tokenizer_json();
  tok["added_tokens"] = added;
  tok["model"]["vocab"] = vocab;
  tok["model"]["merges"] = nlohmann::json::array();
  tok["post_processor"]["single"][0]["SpecialToken"]["id"] = "<|startoftext|>";
  dir->write("tokenizer.json", tok.dump());
  return dir;
}

}  // namespace lfm::test
