// Speech output's prompts (engine/speech_prompt.h): the voices and their names, the TTS turn and
// the spoken-chat system prompt as the model's template (and, without one, the LFM2-Audio
// processor's) renders them, and the content hash of spoken frames.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "core/error.h"
#include "engine/speech_prompt.h"
#include "model/model.h"
#include "model_test_util.h"
#include "test_util.h"
#include "tokenizer/load_tokenizer.h"

namespace lfm {
namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "no lfm::Error thrown";
  return "";
}

TEST(SpeechVoices, FourVoicesParsedInEitherSpelling) {
  ASSERT_EQ(speech_voices().size(), 4u);
  EXPECT_EQ(speech_voice_list(), "us_male, us_female, uk_male, uk_female");
  for (const char* name : {"us_female", "US female", "us-female", "US_FEMALE", "  us   female ", "Us Female"})
    EXPECT_STREQ(parse_voice(name).id, "us_female") << name;
  EXPECT_STREQ(parse_voice("UK male").id, "uk_male");
  EXPECT_STREQ(parse_voice("uk_female").prompt_name, "UK female");
  EXPECT_STREQ(parse_voice(kDefaultVoice).id, "us_female");
  for (const char* bad : {"alloy", "", "us", "usfemale", "us female voice"}) {
    const std::string e = error_of([&] { parse_voice(bad); });
    EXPECT_NE(e.find(std::string("unknown voice '") + bad + "'"), std::string::npos) << e;
    EXPECT_NE(e.find("us_male, us_female, uk_male, uk_female"), std::string::npos) << e;
  }
}

TEST(SpeechVoices, SystemPromptsAreTheCheckpoints) {
  EXPECT_EQ(tts_system_prompt(parse_voice("uk_male")), "Perform TTS. Use the UK male voice.");
  EXPECT_EQ(tts_system_prompt(parse_voice("us female")), "Perform TTS. Use the US female voice.");
  const auto m = tts_messages("Hello there.", parse_voice("uk_female"));
  ASSERT_EQ(m.size(), 2u);
  EXPECT_EQ(m[0]["role"], "system");
  EXPECT_EQ(m[0]["content"], "Perform TTS. Use the UK female voice.");
  EXPECT_EQ(m[1]["role"], "user");
  EXPECT_EQ(m[1]["content"], "Hello there.");

  const nlohmann::ordered_json chat = nlohmann::ordered_json::array({{{"role", "user"}, {"content", "Hi"}}});
  const auto s = spoken_chat_messages(chat);
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0]["content"], "Respond with interleaved text and audio.");
  EXPECT_EQ(s[1], chat[0]);
  nlohmann::ordered_json with_system = chat;
  with_system.insert(with_system.begin(), nlohmann::ordered_json{{"role", "system"}, {"content", "Be brief."}});
  const std::string e = error_of([&] { spoken_chat_messages(with_system); });
  EXPECT_NE(e.find("no system message"), std::string::npos) << e;
}

class SpeechPromptTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new test::TempDir("lfm_speech_prompt");
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
test::TempDir* SpeechPromptTest::dir_ = nullptr;
Model* SpeechPromptTest::model_ = nullptr;
Tokenizer* SpeechPromptTest::tok_ = nullptr;

TEST_F(SpeechPromptTest, TheTtsTurnIsRenderedByTheTemplate) {
  auto setup = std::make_shared<const AudioPromptSetup>(audio_prompt_setup(*model_, tok_));
  const ChatTurnBuilder chat(*tok_, nullptr, setup);
  const std::vector<int32_t> want = tok_->encode(
      "<|startoftext|><|im_start|>system\nPerform TTS. Use the UK male voice.<|im_end|>\n<|im_start|>user\n"
      "The quick brown fox.<|im_end|>\n<|im_start|>assistant\n",
      false);
  const ChatTurn t = tts_turn(chat, "The quick brown fox.", parse_voice("UK male"));
  EXPECT_EQ(t.prompt, want);
  ASSERT_EQ(t.stop_ids.size(), 1u);
  EXPECT_EQ(tok_->id_to_token(t.stop_ids[0]), "<|im_end|>");

  // The processor's template where the files carry none: the same prompt.
  test::TempDir bare("lfm_speech_no_template");
  for (const char* f : {"config.json", "model.safetensors", "tokenizer.json"})
    std::filesystem::copy_file(dir_->str() + "/" + f, bare / f);
  nlohmann::json tc = test::read_json(dir_->str() + "/tokenizer_config.json");
  tc.erase("chat_template");
  std::ofstream(bare / "tokenizer_config.json") << tc.dump();
  auto bare_tok = load_tokenizer(bare.str());
  ASSERT_TRUE(bare_tok->chat_template().empty());
  const ChatTurnBuilder fallback(*bare_tok, nullptr, setup);
  EXPECT_EQ(tts_turn(fallback, "The quick brown fox.", parse_voice("uk_male")).prompt, want);

  // The request: prompt, stop id, sequential audio with the caller's sampling.
  AudioOutParams audio;
  audio.temperature = 0.8f;
  audio.top_k = 4;
  SamplingParams text;
  text.temperature = 0.3f;
  text.seed = 7;
  const Request r = tts_request(chat, "The quick brown fox.", parse_voice("uk_male"), audio, text);
  EXPECT_EQ(r.prompt, want);
  EXPECT_EQ(r.stop_ids, t.stop_ids);
  EXPECT_EQ(r.audio_out.mode, AudioOutMode::kSequential);
  EXPECT_EQ(r.audio_out.temperature, 0.8f);
  EXPECT_EQ(r.audio_out.top_k, 4);
  EXPECT_TRUE(r.audio_out.waveform);
  EXPECT_EQ(r.sampling.temperature, 0.3f);
  EXPECT_EQ(r.sampling.seed, std::optional<uint64_t>(7));

  const std::string e = error_of([&] { tts_turn(chat, "", parse_voice("uk_male")); });
  EXPECT_NE(e.find("no text to speak"), std::string::npos) << e;
}

TEST_F(SpeechPromptTest, TheSpokenChatPromptIsRenderedByTheTemplate) {
  const ChatTurnBuilder chat(*tok_, nullptr, std::make_shared<const AudioPromptSetup>(audio_prompt_setup(*model_, tok_)));
  ChatTurnInput in;
  in.messages = spoken_chat_messages(nlohmann::ordered_json::array({{{"role", "user"}, {"content", "Hi!"}}}));
  EXPECT_EQ(chat.build(in).prompt,
            tok_->encode("<|startoftext|><|im_start|>system\nRespond with interleaved text and audio.<|im_end|>\n"
                         "<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\n",
                         false));
}

TEST(SpeechFrames, HashFollowsTheCodesAndTheirShape) {
  const std::vector<int32_t> codes = {1, 2, 3, 4, 5, 6, 7, 8};
  const uint64_t h = audio_frames_hash(2, 4, codes);
  EXPECT_EQ(h, audio_frames_hash(2, 4, codes));  // deterministic
  std::set<uint64_t> seen = {h};
  seen.insert(audio_frames_hash(4, 2, codes));  // same codes, other shape
  std::vector<int32_t> other = codes;
  other[7] = 9;
  seen.insert(audio_frames_hash(2, 4, other));
  seen.insert(audio_frames_hash(1, 4, std::span(codes).first(4)));
  EXPECT_EQ(seen.size(), 4u);

  const auto f = make_audio_out_frames(12, 4, codes, 2049);
  EXPECT_EQ(f->position, 12);
  EXPECT_EQ(f->frames, 2);
  EXPECT_EQ(f->codes, codes);
  EXPECT_EQ(f->hash, h);
  EXPECT_NE(error_of([&] { make_audio_out_frames(0, 3, codes, 2049); }).find("not a whole number of 3-code frames"),
            std::string::npos);
  std::vector<int32_t> bad = codes;
  bad[5] = 2049;
  const std::string e = error_of([&] { make_audio_out_frames(0, 4, bad, 2049); });
  EXPECT_NE(e.find("code 2049 (frame 1, codebook 1) is outside [0, 2049)"), std::string::npos) << e;
  EXPECT_NE(error_of([&] { make_audio_out_frames(0, 4, {}, 2049); }).find("not a whole number"), std::string::npos);
}

}  // namespace
}  // namespace lfm
