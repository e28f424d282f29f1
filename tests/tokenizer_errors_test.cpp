// Malformed or unsupported tokenizer files and inputs give specific lfm::Error messages.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "test_util.h"
#include "tokenizer/hf_tokenizer_json.h"
#include "tokenizer/load_tokenizer.h"
#include "tokenizer/tokenizer.h"

namespace lfm {
namespace {

using nlohmann::json;

// Builds a Tokenizer from `j` and returns the error message ("" when none is thrown).
std::string error_of(const json& j) {
  try {
    Tokenizer t(parse_tokenizer_json(j));
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(TokenizerErrors, MinimalSpecIsAccepted) {
  EXPECT_EQ(error_of(test::minimal_tokenizer_json()), "");
  Tokenizer t(parse_tokenizer_json(test::minimal_tokenizer_json()));
  EXPECT_EQ(t.encode("abc"), (std::vector<int32_t>{0, 4, 3}));
}

TEST(TokenizerErrors, BadJson) {
  try {
    parse_tokenizer_json_text("{\"model\": ");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tokenizer.json: invalid JSON"), std::string::npos) << e.what();
  }
}

TEST(TokenizerErrors, MissingModel) {
  json j = test::minimal_tokenizer_json();
  j.erase("model");
  EXPECT_EQ(error_of(j), "tokenizer.json: missing 'model'");
}

TEST(TokenizerErrors, UnknownModelType) {
  json j = test::minimal_tokenizer_json();
  j["model"]["type"] = "WordPiece";
  EXPECT_EQ(error_of(j), "tokenizer.json: model type 'WordPiece' is not supported (only BPE)");
}

TEST(TokenizerErrors, MergeNamingUnknownToken) {
  json j = test::minimal_tokenizer_json();
  j["model"]["merges"] = {"a z"};
  EXPECT_EQ(error_of(j), "tokenizer.json: merge 0 ('a' 'z') uses token 'z' which is not in the vocabulary");
  j["model"]["merges"] = {"b c"};  // both known, but "bc" is not
  EXPECT_EQ(error_of(j), "tokenizer.json: merge 0 ('b' 'c') uses token 'bc' which is not in the vocabulary");
  j["model"]["merges"] = {"abc"};
  EXPECT_EQ(error_of(j), "tokenizer.json: merge 0 'abc' is not two space-separated tokens");
}

TEST(TokenizerErrors, MergeCheckAlsoGuardsSpecsFromOtherSources) {
  // A spec filled by another reader (GGUF) is validated again by the Tokenizer.
  TokenizerSpec spec = parse_tokenizer_json(test::minimal_tokenizer_json());
  spec.merges.emplace_back("c", "q");
  try {
    Tokenizer t(spec);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "tokenizer: merge 1 ('c' 'q') uses token 'q' which is not in the vocabulary");
  }
}

TEST(TokenizerErrors, BadRegex) {
  json j = test::minimal_tokenizer_json();
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(\\p{L}+";
  const std::string msg = error_of(j);
  EXPECT_NE(msg.find("tokenizer: pre-tokenizer regex '(\\p{L}+' does not compile: "), std::string::npos) << msg;
  EXPECT_NE(msg.find("missing closing parenthesis"), std::string::npos) << msg;
}

TEST(TokenizerErrors, UnsupportedComponentsAreNamed) {
  json j = test::minimal_tokenizer_json();
  j["normalizer"] = {{"type", "NFC"}};
  EXPECT_EQ(error_of(j), "tokenizer.json: normalizer 'NFC' is not supported (byte-level BPE models use none)");
  j = test::minimal_tokenizer_json();
  j["pre_tokenizer"]["pretokenizers"][0] = {{"type", "Whitespace"}};
  EXPECT_EQ(error_of(j), "tokenizer.json: pre-tokenizer 'Whitespace' is not supported (expected Split and ByteLevel)");
  j = test::minimal_tokenizer_json();
  j["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Removed";
  EXPECT_EQ(error_of(j), "tokenizer.json: Split behavior 'Removed' is not supported (only Isolated)");
  j = test::minimal_tokenizer_json();
  j["decoder"] = {{"type", "WordPiece"}};
  EXPECT_EQ(error_of(j), "tokenizer.json: decoder 'WordPiece' is not supported (only ByteLevel)");
  j = test::minimal_tokenizer_json();
  j["post_processor"] = {{"type", "BertProcessing"}};
  EXPECT_EQ(error_of(j), "tokenizer.json: post-processor 'BertProcessing' is not supported (expected TemplateProcessing / ByteLevel)");
  j = test::minimal_tokenizer_json();
  j["model"]["byte_fallback"] = true;
  EXPECT_EQ(error_of(j), "tokenizer.json: BPE byte_fallback = true is not supported");
}

TEST(TokenizerErrors, DuplicateIdAndMalformedVocab) {
  json j = test::minimal_tokenizer_json();
  j["model"]["vocab"]["d"] = 3;
  EXPECT_NE(error_of(j).find("tokenizer.json: id 3 is used by both"), std::string::npos) << error_of(j);
  j = test::minimal_tokenizer_json();
  j["model"]["vocab"]["d"] = "x";
  EXPECT_EQ(error_of(j), "tokenizer.json: vocab entry 'd' has invalid id \"x\"");
  j = test::minimal_tokenizer_json();
  j["model"].erase("vocab");
  EXPECT_NE(error_of(j).find("tokenizer.json: malformed content"), std::string::npos) << error_of(j);
}

TEST(TokenizerErrors, InvalidUtf8InputNamesTheByteOffset) {
  Tokenizer t(parse_tokenizer_json(test::minimal_tokenizer_json()));
  try {
    t.encode(std::string("ab\xC3(", 4));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "tokenizer: input is not valid UTF-8 (ill-formed byte 0xc3 at byte offset 2)");
  }
  EXPECT_THROW(t.encode("\xED\xA0\x80"), Error);  // an encoded UTF-16 surrogate
  EXPECT_THROW(t.encode("\xF4\x90\x80\x80"), Error);  // above U+10FFFF
  EXPECT_THROW(t.encode("\xC0\xAF"), Error);  // overlong
}

TEST(TokenizerErrors, UnknownIdsInDecode) {
  Tokenizer t(parse_tokenizer_json(test::minimal_tokenizer_json()));
  EXPECT_THROW(t.decode(std::vector<int32_t>{1, 99}), Error);
  EXPECT_THROW(t.decode(std::vector<int32_t>{-1}), Error);
  EXPECT_THROW(t.id_to_token(5), Error);
}

TEST(TokenizerErrors, FoldersWithoutTokenizerJson) {
  // A real LFM2 asset folder ships only config files, not tokenizer.json.
  const std::string dir = test::data_dir() + "/assets/lfm2/LFM2-1.2B";
  try {
    load_tokenizer(dir);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "tokenizer: no tokenizer.json in '" + dir + "'");
  }
  EXPECT_THROW(load_tokenizer("/nonexistent/folder"), Error);
  EXPECT_THROW(load_tokenizer("/nonexistent/model.gguf"), Error);
}

TEST(TokenizerErrors, BadTokenizerConfigIsReportedWithItsFolder) {
  const test::TempDir tmp("lfm_tok_bad_config");
  const std::string dir = tmp.str();
  std::ofstream(dir + "/tokenizer.json") << test::minimal_tokenizer_json().dump();
  std::ofstream(dir + "/tokenizer_config.json") << R"({"eos_token": "<nope>"})";
  try {
    load_tokenizer(dir);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "tokenizer_config.json: eos_token '<nope>' is not in the vocabulary [in " + dir + "]");
  }
}

}  // namespace
}  // namespace lfm
