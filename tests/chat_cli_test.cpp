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
#include "kernels/cpu_backend.h"
#include "model/config.h"
#include "formats/safetensors_writer.h"
#include "model/weights.h"
#include "model_test_util.h"
#include "server_test_util.h"
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
    test::write_text_model(dir_->str());
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
  // The second turn extends the first: the prefix cache serves all but the last block of it.
  const auto s = run_with_input("chat -m " + dir_->str() + " -s 'Be brief.' -n 6 --kv-block-size 4 --stats",
                                "Hi there\nWhat is 2+2?\n/exit\n", /*with_stderr=*/true);
  ASSERT_EQ(s.code, 0) << s.out;
  std::vector<std::pair<long, long>> turns;  // (prompt tokens, from cache)
  for (size_t at = s.out.find("[prompt "); at != std::string::npos; at = s.out.find("[prompt ", at + 1)) {
    long prompt = 0, cached = 0;
    ASSERT_EQ(std::sscanf(s.out.c_str() + at, "[prompt %ld tokens (%ld from cache)", &prompt, &cached), 2);
    turns.push_back({prompt, cached});
  }
  ASSERT_EQ(turns.size(), 2u) << s.out;
  EXPECT_EQ(turns[0].second, 0);
  EXPECT_GT(turns[1].second, turns[0].first - 4) << s.out;
}

TEST_F(ChatCliTest, ChatWithoutTemplateIsAClearError) {
  const test::TempDir d("lfm_chat_notpl");
  for (const char* f : {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"})
    fs::copy_file(*dir_ / f, d / f);
  const auto r = run_with_input("chat -m " + d.str(), "", /*with_stderr=*/true);
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("no chat template"), std::string::npos) << r.out;
}

// Issue 38 item 3: with no sampling flag, `lfm generate` and `lfm chat` use the model's
// generation_config.json defaults and say which; any sampling flag or --generation-config none
// keeps them out.
TEST_F(ChatCliTest, GenerationConfigDefaultsApplyWithoutSamplingFlags) {
  const test::TempDir d("lfm_chat_gencfg");
  for (const char* f : {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "chat_template.jinja"})
    fs::copy_file(*dir_ / f, d / f);
  std::ofstream(d / "generation_config.json") << R"({"temperature": 0.3, "min_p": 0.15, "repetition_penalty": 1.05})";
  const std::string line = "sampling defaults from " + (d / "generation_config.json").string() +
                           ": temperature 0.3, min_p 0.15, repetition_penalty 1.05";
  auto r = run_with_input("generate -m " + d.str() + " -p 'Hello' -n 2", "", true);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find(line), std::string::npos) << r.out;
  r = run_with_input("chat -m " + d.str() + " -n 2", "Hi\n/exit\n", true);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find(line), std::string::npos) << r.out;
  for (const char* flags : {" --temperature 0", " --generation-config none"}) {
    r = run_with_input("generate -m " + d.str() + " -p 'Hello' -n 2" + flags, "", true);
    ASSERT_EQ(r.code, 0) << r.out;
    EXPECT_EQ(r.out.find("sampling defaults"), std::string::npos) << flags << ": " << r.out;
  }
  r = run_with_input("generate --help", "", true);
  EXPECT_NE(r.out.find("--generation-config"), std::string::npos);
}

// Issue 38 item 2: `lfm chat` builds its turn as the server does, so the tool-call markers (special
// tokens in LFM2's tokenizer) reach its output parser: a scripted model's call is shown as a call,
// not as the bare "[get_time(tz=1)]" text left when the markers were dropped.
TEST_F(ChatCliTest, ChatParsesToolCallsWithSpecialMarkers) {
  const test::TempDir d("lfm_chat_tool");
  test::write_tool_call_model(d.str(), dir_->str());
  const auto tok = load_tokenizer(d.str());
  ASSERT_TRUE(tok->is_special(*tok->token_to_id("<|tool_call_start|>")));
  const auto r = run_with_input("chat -m " + d.str() + " -n 24", "What time is it?\n/exit\n");
  ASSERT_EQ(r.code, 0) << r.out;
  const size_t at = r.out.find("[tool call] ");
  ASSERT_NE(at, std::string::npos) << r.out;
  const auto call = nlohmann::json::parse(r.out.substr(at + 12, r.out.find('\n', at) - at - 12));
  EXPECT_EQ(call["function"]["name"], "get_time");
  EXPECT_EQ(call["function"]["arguments"], "{\"tz\":1}");
  EXPECT_EQ(r.out.find("[get_time("), std::string::npos) << r.out;
}

// Images in `lfm chat` (LFM2-VL): --image attaches to the first user turn, /image PATH to the
// next; the first reply is transformers' greedy continuation (reference.json one_image: the
// template renders [image, text] as its template_text), the second turn reuses the cached prefix
// past the first image. A text-only model refuses --image.
TEST_F(ChatCliTest, ChatTakesImages) {
  const std::string vl = test::data_dir() + "/hf_vl/lfm2vl_a_tied_ln";
  const std::string img = test::data_dir() + "/hf_vl/images/rgb_37x53.png";
  const auto ref = test::read_json(vl + "/reference.json");
  std::vector<int32_t> ids;
  long n_tokens = 0;
  for (const auto& c : ref["cases"])
    if (c["name"] == "one_image") {
      ids = c["greedy_ids"].get<std::vector<int32_t>>();
      n_tokens = c["n_tokens"].get<long>();
    }
  ASSERT_EQ(ids.size(), 12u);
  ASSERT_EQ(std::count(ids.begin(), ids.end(), 7), 0);  // no <|im_end|>: the reply runs to -n 12
  const auto r = run_with_input("chat -m " + vl + " --image " + img + " -n 12 --temperature 0 --kv-block-size 4 --stats -t 2",
                                "Describe this.\n/image " + img + "\nAnd this one?\n/image /no/such.png\n/exit\n");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(r.out.substr(0, r.out.find('\n')), load_tokenizer(vl)->decode(ids, /*skip_special=*/true)) << r.out;
  const auto s = run_with_input("chat -m " + vl + " --image " + img + " -n 12 --temperature 0 --kv-block-size 4 --stats -t 2",
                                "Describe this.\n/image " + img + "\nAnd this one?\n/image /no/such.png\n/exit\n",
                                /*with_stderr=*/true);
  std::vector<std::pair<long, long>> turns;  // (prompt tokens, from cache)
  for (size_t at = s.out.find("[prompt "); at != std::string::npos; at = s.out.find("[prompt ", at + 1)) {
    long prompt = 0, cached = 0;
    ASSERT_EQ(std::sscanf(s.out.c_str() + at, "[prompt %ld tokens (%ld from cache)", &prompt, &cached), 2);
    turns.push_back({prompt, cached});
  }
  ASSERT_EQ(turns.size(), 2u) << s.out;
  EXPECT_EQ(turns[0].first, n_tokens) << s.out;
  EXPECT_GT(turns[1].first, turns[0].first + 6) << s.out;  // the second image's 6 tokens and more
  EXPECT_GT(turns[1].second, 13) << s.out;                 // past the first image
  EXPECT_NE(s.out.find("error: image '/no/such.png'"), std::string::npos) << s.out;
  // A text-only model: --image is refused up front.
  const auto t = run_with_input("chat -m " + dir_->str() + " --image " + img, "Hi\n", true);
  EXPECT_NE(t.code, 0);
  EXPECT_NE(t.out.find("no vision tower"), std::string::npos) << t.out;
}

}  // namespace
}  // namespace lfm
