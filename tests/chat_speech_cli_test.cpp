// `lfm chat --audio-out DIR` (spoken replies) on the tiny LFM2-Audio checkpoint with speech output
// and the synthetic tokenizer (test::write_speech_model): each reply's frames are saved per turn,
// and the second turn's prompt holds the first spoken reply as it was generated (the prefix cache
// reuses it: the --stats line's cached tokens pass the first prompt); as WAV files (the checkpoint's
// detokenizer) and, with --no-waveform, as codes.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include "std_regex.h"

#include "model_test_util.h"
#include "speech_test_util.h"
#include "test_util.h"

namespace lfm {
namespace {

namespace fs = std::filesystem;

TEST(ChatSpeechCli, SpokenTurnsAreSavedAndFedBack) {
  test::TempDir dir("lfm_chat_speech");
  const std::string model = (dir / "model").string(), out = (dir / "out").string();
  test::write_speech_model(model);
  const std::string input = "Hello there.\nAnd then?\n";
  const auto r = test::run_lfm("chat -m '" + model + "' --audio-out '" + out +
                                   "' --no-waveform --voice uk_female -n 30 --seed 4 --stats --ctx-size 512",
                               test::Stderr::kMerge, &input);
  ASSERT_EQ(r.code, 0) << r.out;
  std::vector<int64_t> prompt, cached;
  const std::regex stats(R"(\[prompt (\d+) tokens \((\d+) from cache\))");
  for (auto it = std::sregex_iterator(r.out.begin(), r.out.end(), stats); it != std::sregex_iterator(); ++it) {
    prompt.push_back(std::stoll((*it)[1]));
    cached.push_back(std::stoll((*it)[2]));
  }
  ASSERT_EQ(prompt.size(), 2u) << r.out;
  EXPECT_GT(cached[1], prompt[0]) << r.out;  // the first turn, its spoken reply included
  for (int turn = 1; turn <= 2; ++turn) {
    const std::string path = out + "/turn-" + std::to_string(turn) + ".codes.json";
    ASSERT_TRUE(fs::exists(path)) << r.out;
    const auto frames = nlohmann::json::parse(test::read_file(path));
    ASSERT_TRUE(frames.is_array());
    EXPECT_GT(frames.size(), 0u) << path << "\n" << r.out;  // interleaved: audio after six text tokens
    for (const auto& f : frames) {
      ASSERT_EQ(f.size(), 8u);
      for (const auto& c : f) EXPECT_TRUE(c.get<int>() >= 0 && c.get<int>() < 2049);
    }
  }
  // The waveforms: 16-bit mono WAV at 24 kHz, 1920 samples per frame.
  const std::string wav_out = (dir / "wav").string();
  const auto w = test::run_lfm("chat -m '" + model + "' --audio-out '" + wav_out + "' -n 30 --seed 4 --ctx-size 512",
                               test::Stderr::kMerge, &input);
  ASSERT_EQ(w.code, 0) << w.out;
  for (int turn = 1; turn <= 2; ++turn) {
    const std::string bytes = test::read_file(wav_out + "/turn-" + std::to_string(turn) + ".wav");
    ASSERT_GT(bytes.size(), 44u) << w.out;
    EXPECT_EQ(bytes.substr(0, 4), "RIFF");
    EXPECT_EQ((bytes.size() - 44) / 2 % 1920, 0u) << bytes.size();
  }
  // A model that does not speak is refused before the conversation starts.
  const std::string text_model = (dir / "text").string();
  test::write_text_model(text_model);
  const auto refused = test::run_lfm("chat -m '" + text_model + "' --audio-out '" + out + "'", test::Stderr::kMerge, &input);
  EXPECT_NE(refused.code, 0);
  EXPECT_NE(refused.out.find("does not speak"), std::string::npos) << refused.out;
}

}  // namespace
}  // namespace lfm
