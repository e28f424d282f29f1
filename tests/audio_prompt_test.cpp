// Audio in prompts (engine/audio_prompt.h, engine/chat_turn.h, engine/transcription.h): clips laid
// out as one audio token per encoder row, "<audio>" markers, chat messages' audio parts joined into
// the placeholder text as transformers' Lfm2AudioProcessor renders them, the transcription turn, and
// the processor's own template for a speech model whose files carry none.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "engine/audio_prompt.h"
#include "engine/chat_turn.h"
#include "engine/transcription.h"
#include "model/model.h"
#include "model_test_util.h"
#include "test_util.h"
#include "tokenizer/load_tokenizer.h"

namespace lfm {
namespace {

class AudioPromptTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new test::TempDir("lfm_audio_prompt");
    test::write_audio_model(dir_->str());
    model_ = load_model(dir_->str()).release();
    tok_ = load_tokenizer(dir_->str()).release();
  }
  static void TearDownTestSuite() {
    delete tok_;
    delete model_;
    delete dir_;
  }
  static test::TempDir* dir_;
  static Model* model_;
  static Tokenizer* tok_;
};
test::TempDir* AudioPromptTest::dir_ = nullptr;
Model* AudioPromptTest::model_ = nullptr;
Tokenizer* AudioPromptTest::tok_ = nullptr;

TEST_F(AudioPromptTest, ClipsAreLaidOutOneTokenPerEncoderRow) {
  const AudioPromptSetup s = audio_prompt_setup(*model_, tok_);
  EXPECT_EQ(s.audio_token_id, 133);
  EXPECT_EQ(s.placeholder_text, "<|reserved_123|>");
  // 320 samples: T = 3, N = 1; 16073: T = 101, N = 13.
  const std::vector<std::vector<float>> clips = {std::vector<float>(320, 0.25f), std::vector<float>(16073, 0.1f)};
  const AudioPrompt p = expand_audio(std::vector<int32_t>{1, 133, 5, 133, 7}, clips, s);
  std::vector<int32_t> want = {1, 133, 5};
  want.insert(want.end(), 13, 133);
  want.push_back(7);
  EXPECT_EQ(p.ids, want);
  ASSERT_EQ(p.audios.size(), 2u);
  EXPECT_EQ(p.audios[0]->position, 1);
  EXPECT_EQ(p.audios[0]->tokens, 1);
  EXPECT_EQ(p.audios[0]->frames, 3);
  EXPECT_EQ(p.audios[1]->position, 3);
  EXPECT_EQ(p.audios[1]->tokens, 13);
  EXPECT_EQ(p.audios[1]->frames, 101);
  EXPECT_NE(p.audios[0]->hash, p.audios[1]->hash);
  EXPECT_NEAR(p.audios[1]->seconds, 16073.0 / 16000, 1e-12);
  // Equal samples, equal hash; one sample changed, another hash.
  std::vector<std::vector<float>> again = {clips[1]};
  const AudioPrompt same = expand_audio(std::vector<int32_t>{133}, again, s);
  EXPECT_EQ(same.audios[0]->hash, p.audios[1]->hash);
  again[0][100] += 1e-3f;
  EXPECT_NE(expand_audio(std::vector<int32_t>{133}, again, s).audios[0]->hash, p.audios[1]->hash);
  // Counts that do not match, a clip too short for the front end.
  EXPECT_THROW(expand_audio(std::vector<int32_t>{1, 133, 133}, std::vector<std::vector<float>>{clips[0]}, s), Error);
  EXPECT_THROW(expand_audio(std::vector<int32_t>{1, 7}, std::vector<std::vector<float>>{clips[0]}, s), Error);
  try {
    expand_audio(std::vector<int32_t>{133}, std::vector<std::vector<float>>{std::vector<float>(100, 0.f)}, s);
    ADD_FAILURE() << "a 100-sample clip was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("clip 0"), std::string::npos) << e.what();
  }
}

TEST_F(AudioPromptTest, MarkersBecomeThePlaceholder) {
  std::string text = "Hear <audio> and <audio>.";
  EXPECT_EQ(replace_audio_markers(text, "<|reserved_123|>"), 2u);
  EXPECT_EQ(text, "Hear <|reserved_123|> and <|reserved_123|>.");
  const std::vector<int32_t> ids = tok_->encode(text, false);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 133), 2);
}

TEST_F(AudioPromptTest, TheTranscriptionTurnIsTheProcessors) {
  auto setup = std::make_shared<const AudioPromptSetup>(audio_prompt_setup(*model_, tok_));
  // The model's own template (LFM2-1.2B's) and, without one, the processor's: the same text here.
  const ChatTurnBuilder with_template(*tok_, nullptr, setup);
  ChatTurnInput in;
  in.messages = transcription_messages("");
  in.audios.push_back(std::vector<float>(16000, 0.05f));
  const ChatTurn t = with_template.build(in);
  std::vector<int32_t> want = tok_->encode(
      "<|startoftext|><|im_start|>system\nPerform ASR.<|im_end|>\n<|im_start|>user\n<|reserved_123|><|im_end|>\n"
      "<|im_start|>assistant\n",
      false);
  const auto at = std::find(want.begin(), want.end(), 133);
  ASSERT_NE(at, want.end());
  want.insert(at, 12, 133);  // 1 s: 13 audio tokens
  EXPECT_EQ(t.prompt, want);
  ASSERT_EQ(t.audios.size(), 1u);
  EXPECT_EQ(t.audios[0]->tokens, 13);

  test::TempDir bare("lfm_audio_no_template");
  for (const char* f : {"config.json", "model.safetensors", "tokenizer.json"})
    std::filesystem::copy_file(dir_->str() + "/" + f, bare / f);
  nlohmann::json tc = test::read_json(dir_->str() + "/tokenizer_config.json");
  tc.erase("chat_template");
  std::ofstream(bare / "tokenizer_config.json") << tc.dump();
  auto bare_tok = load_tokenizer(bare.str());
  ASSERT_TRUE(bare_tok->chat_template().empty());
  const ChatTurnBuilder fallback(*bare_tok, nullptr, setup);
  EXPECT_EQ(fallback.build(in).prompt, want);
  // A text model without a template still has none.
  EXPECT_FALSE(ChatTurnBuilder(*bare_tok).has_template());

  // A prompt with the caller's text after the clip; audio mixed with an image part is refused.
  ChatTurnInput with_prompt = in;
  with_prompt.messages = transcription_messages("Names: Ada.");
  const std::vector<int32_t> p = with_template.build(with_prompt).prompt;
  const std::string text = tok_->decode(p);
  EXPECT_NE(text.find("<|reserved_123|>Names: Ada.<|im_end|>"), std::string::npos) << text;
  ChatTurnInput mixed = in;
  mixed.messages[1]["content"].push_back({{"type", "image"}});
  EXPECT_THROW(with_template.build(mixed), Error);
  // The placeholder typed in the text counts as a clip that is not there.
  ChatTurnInput typed = in;
  typed.messages[0]["content"] = "<|reserved_123|>";
  EXPECT_THROW(with_template.build(typed), Error);
}

TEST(Transcription, Timestamps) {
  EXPECT_EQ(srt_timestamp(0), "00:00:00,000");
  EXPECT_EQ(srt_timestamp(3725.0456), "01:02:05,046");
  EXPECT_EQ(vtt_timestamp(1.3), "00:00:01.300");
  EXPECT_EQ(vtt_timestamp(-1), "00:00:00.000");
}

}  // namespace
}  // namespace lfm
