// `lfm tokenize` / `lfm detokenize` on a folder that holds only tokenizer files.
#include <gtest/gtest.h>

#include <fstream>

#include "test_util.h"
#include "tokenizer/load_tokenizer.h"

namespace lfm {
namespace {

// Runs `lfm <args>` and captures stdout (stderr discarded so usage text stays out of it).
test::RunResult run_lfm(const std::string& args) { return test::run_lfm(args, test::Stderr::kDiscard); }

std::string model_dir() { return test::data_dir() + "/tokenizer"; }

const Tokenizer& synthetic() {
  static const auto tok = load_tokenizer(model_dir());
  return *tok;
}

std::string join_ids(const std::vector<int32_t>& ids) {
  std::string s;
  for (size_t i = 0; i < ids.size(); ++i) s += (i ? "," : "") + std::to_string(ids[i]);
  return s;
}

TEST(TokenizerCli, TokenizeJsonMatchesLibrary) {
  const test::RunResult r = run_lfm("tokenize -m " + model_dir() + " --json 'Hello world, 12345!'");
  ASSERT_EQ(r.code, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out);
  const auto ids = synthetic().encode("Hello world, 12345!");
  EXPECT_EQ(j["ids"].get<std::vector<int32_t>>(), ids);
  ASSERT_EQ(j["tokens"].size(), ids.size());
  EXPECT_EQ(j["tokens"][0], "<|startoftext|>");

  const test::RunResult plain = run_lfm("tokenize -m " + model_dir() + " --json --no-special 'Hello world, 12345!'");
  ASSERT_EQ(plain.code, 0);
  EXPECT_EQ(nlohmann::json::parse(plain.out)["ids"].get<std::vector<int32_t>>(), synthetic().encode("Hello world, 12345!", false));
}

TEST(TokenizerCli, TokenizeTextOutputListsIdsAndPieces) {
  const test::RunResult r = run_lfm("tokenize -m " + model_dir() + " --no-special 'a b'");
  ASSERT_EQ(r.code, 0);
  const auto ids = synthetic().encode("a b", false);
  std::string expected;
  for (int32_t id : ids) expected += std::to_string(id) + "\t" + nlohmann::json(synthetic().id_to_token(id)).dump() + "\n";
  EXPECT_EQ(r.out, expected);
}

TEST(TokenizerCli, FileIsReadByteExactAndRoundTrips) {
  const test::TempDir dir("lfm_tok_cli_input");
  const std::string text = "line one\r\n\ttabbed 🦙 <|im_end|>\n\n  trailing  \n";
  const std::string path = dir.write("input.txt", text);
  const test::RunResult r = run_lfm("tokenize -m " + model_dir() + " --json --no-special --file " + path);
  ASSERT_EQ(r.code, 0);
  const auto ids = nlohmann::json::parse(r.out)["ids"].get<std::vector<int32_t>>();
  EXPECT_EQ(ids, synthetic().encode(text, false));
  const test::RunResult back = run_lfm("detokenize -m " + model_dir() + " " + join_ids(ids));
  ASSERT_EQ(back.code, 0);
  EXPECT_EQ(back.out, text);
}

TEST(TokenizerCli, DetokenizeSkipSpecial) {
  const auto ids = synthetic().encode("<|im_start|>user\nhi<|im_end|>");
  EXPECT_EQ(run_lfm("detokenize -m " + model_dir() + " " + join_ids(ids)).out, "<|startoftext|><|im_start|>user\nhi<|im_end|>");
  EXPECT_EQ(run_lfm("detokenize -m " + model_dir() + " --skip-special " + join_ids(ids)).out, "user\nhi");
}

TEST(TokenizerCli, BadArgumentsExitNonZero) {
  EXPECT_EQ(run_lfm("tokenize").code, 2);                                        // no model
  EXPECT_EQ(run_lfm("tokenize -m " + model_dir()).code, 2);                      // no text
  EXPECT_EQ(run_lfm("tokenize -m " + model_dir() + " x --file y").code, 2);      // both
  EXPECT_EQ(run_lfm("tokenize -m " + model_dir() + " --bogus x").code, 2);
  EXPECT_EQ(run_lfm("detokenize -m " + model_dir()).code, 2);                    // no ids
  EXPECT_EQ(run_lfm("detokenize -m " + model_dir() + " 1,x,3").code, 1);         // bad id list
  EXPECT_EQ(run_lfm("detokenize -m " + model_dir() + " 999999").code, 1);        // unknown id
  EXPECT_EQ(run_lfm("tokenize -m /nonexistent 'hi'").code, 1);
  EXPECT_EQ(run_lfm("tokenize -m " + model_dir() + " --file /nonexistent/file").code, 1);
}

}  // namespace
}  // namespace lfm
