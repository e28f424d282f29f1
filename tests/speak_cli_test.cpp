// `lfm speak`: the request is checked before the model loads (voice, format), a model without an
// audio output head is refused, and (with a model that speaks: speech_test_util.h) the file is
// written as the engine streams and decodes to the waveform, in each format.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "test_util.h"

namespace lfm {
namespace {

std::string tiny_text_model() { return std::string(LFM_SOURCE_DIR) + "/models/tiny-lfm2"; }

TEST(SpeakCli, TheRequestIsCheckedFirst) {
  test::TempDir dir("lfm_speak_cli");
  const std::string out = (dir / "x.wav").string();
  auto r = test::run_command(std::string(LFM_BINARY) + " speak -m /nonexistent/model --voice alloy -o '" + out + "' Hello 2>&1");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("unknown voice 'alloy'"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("us_male, us_female, uk_male, uk_female"), std::string::npos) << r.out;
  r = test::run_command(std::string(LFM_BINARY) + " speak -m /nonexistent/model --format aac Hello 2>&1");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("aac is not supported"), std::string::npos) << r.out;
  r = test::run_command(std::string(LFM_BINARY) + " speak -m /nonexistent/model -o '" + (dir / "x.m4a").string() + "' Hello 2>&1");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("unknown format 'm4a'"), std::string::npos) << r.out;
  // A text model cannot speak; no file is left behind.
  r = test::run_command(std::string(LFM_BINARY) + " speak -m '" + tiny_text_model() + "' -o '" + out + "' Hello 2>&1");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("cannot speak"), std::string::npos) << r.out;
  EXPECT_FALSE(std::filesystem::exists(out));
}

}  // namespace
}  // namespace lfm
