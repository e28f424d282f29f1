// Tokenizers in GGUF: a Hugging Face tokenizer written as tokenizer.ggml.* metadata and read back
// tokenizes every test string exactly as the tokenizer.json original does; llama.cpp's own tiny
// GGUF tokenizer loads; re-converting a GGUF keeps its tokenizer.
#include <gtest/gtest.h>

#include <filesystem>

#include "core/error.h"
#include "convert/gguf_export.h"
#include "convert/gguf_tokenizer_meta.h"
#include "formats/gguf_writer.h"
#include "model/model.h"
#include "test_util.h"
#include "tokenizer/gguf_tokenizer.h"
#include "tokenizer/load_tokenizer.h"
#include "tokenizer/tokenizer.h"

namespace lfm {
namespace {

namespace fs = std::filesystem;

class GgufTokenizer : public ::testing::Test {
 protected:
  test::TempDir dir_{"lfm_gguf_tok"};
};

TEST_F(GgufTokenizer, HfTokenizerRoundTripsThroughGguf) {
  const std::string hf_dir = test::data_dir() + "/tokenizer";
  const TokenizerSpec hf_spec = load_tokenizer_spec(hf_dir);
  const auto n = static_cast<int64_t>(hf_spec.vocab.size());
  gguf::GgufWriter w;
  w.set("general.architecture", gguf::Value::of_string("lfm2"));
  for (auto& [k, v] : gguf::tokenizer_metadata_from_folder(hf_dir, n)) w.set(k, v);
  const std::string path = (dir_ / "tok.gguf").string();
  w.begin(path);
  w.finish();

  const TokenizerSpec g = tokenizer_spec_from_gguf(path);
  EXPECT_EQ(g.vocab, hf_spec.vocab);
  EXPECT_EQ(g.merges, hf_spec.merges);
  EXPECT_EQ(g.pretokenizer_regex, hf_spec.pretokenizer_regex);
  EXPECT_EQ(g.ignore_merges, hf_spec.ignore_merges);
  EXPECT_EQ(g.bos_id, hf_spec.bos_id);
  EXPECT_EQ(g.eos_id, hf_spec.eos_id);
  EXPECT_EQ(g.pad_id, hf_spec.pad_id);
  EXPECT_EQ(g.add_bos, hf_spec.add_bos);
  EXPECT_EQ(g.add_eos, hf_spec.add_eos);
  EXPECT_EQ(g.chat_template, hf_spec.chat_template);
  EXPECT_EQ(g.added_tokens.size(), hf_spec.added_tokens.size());

  Tokenizer a(hf_spec), b(g);
  for (int32_t id = 0; id < a.vocab_size(); ++id) {
    if (hf_spec.vocab[id].empty()) continue;  // a hole in the id space (ids 14, 15 here)
    EXPECT_EQ(a.is_special(id), b.is_special(id)) << id;
    EXPECT_EQ(a.is_added(id), b.is_added(id)) << id;
  }
  const auto strings = test::read_json(test::data_dir() + "/tokenizer/test_strings.json");
  ASSERT_GE(strings.size(), 100u);
  for (const auto& s : strings) {
    const std::string text = s.get<std::string>();
    const auto ids = a.encode(text, true);
    EXPECT_EQ(b.encode(text, true), ids) << nlohmann::json(text).dump();
    EXPECT_EQ(b.encode(text, false), a.encode(text, false)) << nlohmann::json(text).dump();
    EXPECT_EQ(b.decode(ids, true), a.decode(ids, true));
  }
}

TEST_F(GgufTokenizer, LlamaCppTinyTokenizerLoads) {
  const std::string path = test::data_dir() + "/gguf_llamacpp/lfm2-tiny-random-f32.gguf";
  auto tok = load_tokenizer(path);
  EXPECT_EQ(tok->vocab_size(), 512);
  EXPECT_EQ(tok->bos_id(), 1);
  EXPECT_EQ(tok->eos_id(), 7);
  EXPECT_EQ(tok->bos_token(), "<|startoftext|>");
  EXPECT_TRUE(tok->is_special(7));
  EXPECT_FALSE(tok->is_special(300));
  EXPECT_TRUE(tok->adds_bos());
  EXPECT_FALSE(tok->chat_template().empty());
  const std::string text = "abc bad cab, 123 <|im_end|>";
  const auto ids = tok->encode(text, true);
  ASSERT_FALSE(ids.empty());
  EXPECT_EQ(ids.front(), 1);
  EXPECT_EQ(ids.back(), 7);  // the special token is matched whole
  EXPECT_EQ(tok->decode(ids), "<|startoftext|>" + text);
}

TEST_F(GgufTokenizer, ReconvertingAGgufKeepsItsTokenizer) {
  const std::string src = test::data_dir() + "/gguf_llamacpp/lfm2-tiny-random-f32.gguf";
  auto m = load_model(src);
  gguf::GgufFile f(src);
  gguf::ExportOptions opt;
  opt.type = gguf::FileType::Q8_0;
  opt.extra = gguf::tokenizer_metadata_from_gguf(f);
  gguf::SourceRowProducer rows(m->source());
  const std::string out = (dir_ / "q8.gguf").string();
  gguf::write_gguf_model(out, m->config(), rows, opt);
  const TokenizerSpec a = tokenizer_spec_from_gguf(src), b = tokenizer_spec_from_gguf(out);
  EXPECT_EQ(a.vocab, b.vocab);
  EXPECT_EQ(a.merges, b.merges);
  EXPECT_EQ(a.added_tokens.size(), b.added_tokens.size());
  EXPECT_EQ(a.chat_template, b.chat_template);
  EXPECT_EQ(a.bos_id, b.bos_id);
}

TEST_F(GgufTokenizer, FilesWithoutATokenizerSayWhy) {
  gguf::GgufWriter w;
  w.set("tokenizer.ggml.model", gguf::Value::of_string("none"));
  const std::string path = (dir_ / "none.gguf").string();
  w.begin(path);
  w.finish();
  try {
    tokenizer_spec_from_gguf(path);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("has no tokenizer"), std::string::npos) << e.what();
  }
  gguf::GgufWriter w2;
  w2.set("tokenizer.ggml.model", gguf::Value::of_string("llama"));
  w2.begin(path);
  w2.finish();
  try {
    tokenizer_spec_from_gguf(path);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("only byte-level BPE"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace lfm
