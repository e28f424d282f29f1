// Text in, text out through the CLI: `lfm generate -p` and `lfm chat` on a small random model
// whose vocabulary covers the synthetic LFM2-style tokenizer (tests/data/tokenizer) and whose
// folder carries the real LFM2-1.2B chat template. Random weights: these tests check plumbing
// (tokenize → template → prefill/decode → stream → parse), not text quality.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>

#include "core/thread_pool.h"
#include "kernels/avx2_backend.h"
#include "model/config.h"
#include "formats/safetensors_writer.h"
#include "model/weights.h"
#include "model_test_util.h"
#include "test_util.h"
#include "tokenizer/load_tokenizer.h"

namespace lfm {
namespace {

namespace fs = std::filesystem;

// Runs `lfm <args>` with `input` as its standard input.
test::RunResult run_with_input(const std::string& args, const std::string& input, bool with_stderr = false) {
  return test::run_lfm(args, with_stderr ? test::Stderr::kMerge : test::Stderr::kDiscard, &input);
}

class ChatCliTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new test::TempDir("lfm_chat_model");
    const std::string tok_dir = test::data_dir() + "/tokenizer";
    fs::copy_file(tok_dir + "/tokenizer.json", *dir_ / "tokenizer.json");
    fs::copy_file(tok_dir + "/tokenizer_config.json", *dir_ / "tokenizer_config.json");
    fs::copy_file(test::data_dir() + "/assets/lfm2/LFM2-1.2B/chat_template.jinja", *dir_ / "chat_template.jinja");
    const nlohmann::json cfg = {{"architectures", {"Lfm2ForCausalLM"}},
                                {"model_type", "lfm2"},
                                {"vocab_size", 65536},
                                {"hidden_size", 32},
                                {"num_hidden_layers", 2},
                                {"num_attention_heads", 2},
                                {"num_key_value_heads", 1},
                                {"layer_types", {"conv", "full_attention"}},
                                {"block_ff_dim", 96},
                                {"block_multiple_of", 32},
                                {"bos_token_id", 1},
                                {"eos_token_id", 7},
                                {"pad_token_id", 0}};
    std::ofstream(*dir_ / "config.json") << cfg.dump(2);
    const ModelConfig c = parse_model_config(cfg);
    std::vector<SafetensorsWriter::Entry> entries;
    for (const auto& t : expected_tensors(c, false)) entries.push_back({t.name, DType::BF16, t.shape});
    SafetensorsWriter w((*dir_ / "model.safetensors").string(), entries);
    std::mt19937 rng(5);
    std::normal_distribution<float> nd(0.0f, 0.5f);
    for (const auto& e : entries) {
      int64_t n = 1;
      for (int64_t d : e.shape) n *= d;
      std::vector<uint16_t> v(n);
      for (auto& x : v) x = f32_to_bf16(e.name.find("norm") != std::string::npos ? 1.0f : nd(rng));
      w.write(e.name, v.data(), v.size() * 2);
    }
    w.finish();
  }
  static void TearDownTestSuite() { delete dir_; }
  static test::TempDir* dir_;
};
test::TempDir* ChatCliTest::dir_ = nullptr;

TEST_F(ChatCliTest, GenerateFromTextMatchesIdsPath) {
  const auto tok = load_tokenizer(dir_->str());
  const std::vector<int32_t> ids = tok->encode("Hello world, the model says");
  const auto by_text = run_with_input("generate -m " + dir_->str() + " -p 'Hello world, the model says' -n 12 --ignore-eos --json", "");
  ASSERT_EQ(by_text.code, 0) << run_with_input("generate -m " + dir_->str() + " -p 'Hello' -n 2", "", true).out;
  const auto jt = nlohmann::json::parse(by_text.out);
  EXPECT_EQ(jt["prompt_ids"].get<std::vector<int32_t>>(), ids);
  // The same generation in process, restricted to ids the tokenizer can decode.
  auto model = load_model(dir_->str());
  ThreadPool pool(2);
  auto be = make_cpu_backend(pool);
  StatePlanOptions plan;  // the CLI's defaults: the checkpoint's state type (bf16 here)
  plan.ctx_size = 4096;
  EXPECT_EQ(jt["generated_ids"].get<std::vector<int32_t>>(), test::greedy(*model, *be, ids, 12, tok.get(), plan));
  EXPECT_EQ(jt["text"], tok->decode(jt["generated_ids"].get<std::vector<int32_t>>(), true));
  // Streaming text output equals the JSON text.
  const auto streamed = run_with_input("generate -m " + dir_->str() + " -p 'Hello world, the model says' -n 12 --ignore-eos", "");
  ASSERT_EQ(streamed.code, 0);
  EXPECT_EQ(streamed.out, jt["text"].get<std::string>() + "\n");
}

TEST_F(ChatCliTest, ChatRunsTurnsAndReusesState) {
  const auto r = run_with_input("chat -m " + dir_->str() + " -s 'Be brief.' -n 6 --seed 1",
                                "Hi there\nWhat is 2+2?\n/reset\nAgain\n/exit\n");
  ASSERT_EQ(r.code, 0) << run_with_input("chat -m " + dir_->str() + " -n 2", "Hi\n", true).out;
  // Three replies, each ending in a newline.
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n') >= 3, true) << r.out;
}

TEST_F(ChatCliTest, ChatWithoutTemplateIsAClearError) {
  const test::TempDir d("lfm_chat_notpl");
  for (const char* f : {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"})
    fs::copy_file(*dir_ / f, d / f);
  const auto r = run_with_input("chat -m " + d.str(), "", /*with_stderr=*/true);
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("no chat template"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace lfm
