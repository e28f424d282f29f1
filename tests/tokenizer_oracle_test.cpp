// Compares lfm's tokenizer with an independent implementation (Hugging Face tokenizers.js, run
// under Node by tools/tokenizer/oracle.mjs) on the synthetic LFM2-style tokenizer.json and the
// strings in tests/data/tokenizer/test_strings.json (written by make_test_strings.py).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <unistd.h>

#include "test_util.h"
#include "tokenizer/load_tokenizer.h"

namespace lfm {
namespace {

namespace fs = std::filesystem;

std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// Runs the Node oracle once for the whole suite; empty JSON when it cannot run (the test then
// fails with the reason instead of silently passing).
struct OracleRun {
  nlohmann::json strings, results;
  std::string problem;
};

const OracleRun& oracle() {
  static const OracleRun run = [] {
    OracleRun r;
    const std::string tools = std::string(LFM_SOURCE_DIR) + "/tools/tokenizer";
    const std::string strings_path = test::data_dir() + "/tokenizer/test_strings.json";
    r.strings = test::read_json(strings_path);
    if (!fs::exists(tools + "/node_modules/@huggingface/tokenizers")) {
      r.problem = "tools/tokenizer/node_modules is missing; run scripts/setup.sh (npm ci --prefix tools/tokenizer)";
      return r;
    }
    // Per process: ctest may run these tests in parallel processes.
    const test::TempDir tmp("lfm_tokenizer_oracle");
    const std::string out = (tmp / "oracle.json").string();
    const std::string cmd = "node " + shell_quote(tools + "/oracle.mjs") + " " +
                            shell_quote(test::data_dir() + "/tokenizer/tokenizer.json") + " < " +
                            shell_quote(strings_path) + " > " + shell_quote(out);
    if (std::system(cmd.c_str()) != 0) {
      r.problem = "oracle command failed: " + cmd;
      return r;
    }
    r.results = test::read_json(out);
    return r;
  }();
  return run;
}

const Tokenizer& synthetic() {
  static const auto tok = load_tokenizer(test::data_dir() + "/tokenizer");
  return *tok;
}

TEST(TokenizerOracle, HasEnoughVariedStrings) {
  const OracleRun& run = oracle();
  ASSERT_TRUE(run.problem.empty()) << run.problem;
  EXPECT_GE(run.strings.size(), 300u);
  ASSERT_EQ(run.results.size(), run.strings.size());
}

TEST(TokenizerOracle, IdsMatchWithAndWithoutSpecialTokens) {
  const OracleRun& run = oracle();
  ASSERT_TRUE(run.problem.empty()) << run.problem;
  ASSERT_EQ(run.results.size(), run.strings.size());
  size_t mismatches = 0;
  for (size_t i = 0; i < run.strings.size(); ++i) {
    const std::string text = run.strings[i].get<std::string>();
    const auto want_special = run.results[i]["with_special"].get<std::vector<int32_t>>();
    const auto want_plain = run.results[i]["without_special"].get<std::vector<int32_t>>();
    const auto got_special = synthetic().encode(text, true);
    const auto got_plain = synthetic().encode(text, false);
    EXPECT_EQ(got_special, want_special) << "string #" << i << ": " << nlohmann::json(text).dump();
    EXPECT_EQ(got_plain, want_plain) << "string #" << i << ": " << nlohmann::json(text).dump();
    mismatches += (got_special != want_special) + (got_plain != want_plain);
  }
  EXPECT_EQ(mismatches, 0u);
}

TEST(TokenizerOracle, DecodeMatchesOracleAndRoundTrips) {
  const OracleRun& run = oracle();
  ASSERT_TRUE(run.problem.empty()) << run.problem;
  for (size_t i = 0; i < run.strings.size(); ++i) {
    const std::string text = run.strings[i].get<std::string>();
    const auto ids = synthetic().encode(text, true);
    EXPECT_EQ(synthetic().decode(ids), run.results[i]["decoded"].get<std::string>()) << "string #" << i;
    // Without the BOS the text comes back exactly; skipping specials drops only the BOS when
    // the text holds no special tokens itself.
    EXPECT_EQ(synthetic().decode(synthetic().encode(text, false)), text) << "string #" << i;
    EXPECT_EQ(synthetic().decode(ids), synthetic().bos_token() + text) << "string #" << i;
  }
}

}  // namespace
}  // namespace lfm
