// Where `lfm convert` and `lfm gen-random` write (issue 55, class 6): the temporary file is created
// exclusively in the output's folder, so a symlink planted where it or the output goes is never
// followed; an output that is an input by identity (`./in.gguf` for `in.gguf`, a hard link, a
// symlink, a file of the input folder) or an mmproj output that is the main output is refused
// before anything is written, naming both paths, and the input stays byte-identical.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "test_util.h"

namespace lfm {
namespace {

namespace fs = std::filesystem;

std::string q(const fs::path& p) { return "'" + p.string() + "'"; }

// `lfm <args>` run from `dir` (stderr merged).
test::RunResult lfm_in(const fs::path& dir, const std::string& args) {
  return test::run_command("cd " + q(dir) + " && " + LFM_BINARY + " " + args + " 2>&1");
}

class ConvertOutputs : public ::testing::Test {
 protected:
  void SetUp() override {
    fs::copy(test::fixture_dir("lfm2_c_layertypes_untied_convbias_f32"), folder_);
    const auto r = lfm_in(dir_.path(), "convert -q -m " + q(folder_) + " -o in.gguf --type f32");
    ASSERT_EQ(r.code, 0) << r.out;
    in_bytes_ = test::read_file((dir_ / "in.gguf").string());
  }
  void expect_input_kept() {  // compared whole, not printed (a GGUF is binary)
    EXPECT_TRUE(test::read_file((dir_ / "in.gguf").string()) == in_bytes_) << "in.gguf was changed";
  }
  // Refused (exit ≠ 0), the message naming both paths as given.
  static void expect_refused(const test::RunResult& r, const std::string& a, const std::string& b) {
    EXPECT_NE(r.code, 0) << r.out;
    EXPECT_NE(r.out.find(a), std::string::npos) << r.out;
    EXPECT_NE(r.out.find(b), std::string::npos) << r.out;
  }

  test::TempDir dir_{"lfm_convert_out"};
  fs::path folder_ = dir_ / "hf";
  std::string in_bytes_;
};

TEST_F(ConvertOutputs, OutputThatIsTheInputByAnotherNameIsRefused) {
  expect_refused(lfm_in(dir_.path(), "convert -q -m in.gguf -o ./in.gguf --type f16"), "'in.gguf'", "'./in.gguf'");
  expect_input_kept();
  fs::create_directory(dir_ / "sub");
  expect_refused(lfm_in(dir_.path(), "convert -q -m in.gguf -o sub/../in.gguf --type f16"), "'in.gguf'", "sub/../in.gguf");
  expect_input_kept();
  fs::create_hard_link(dir_ / "in.gguf", dir_ / "hard.gguf");
  expect_refused(lfm_in(dir_.path(), "convert -q -m in.gguf -o hard.gguf --type f16"), "'in.gguf'", "'hard.gguf'");
  expect_input_kept();
  fs::create_symlink("in.gguf", dir_ / "soft.gguf");
  expect_refused(lfm_in(dir_.path(), "convert -q -m ./in.gguf -o soft.gguf --type f16"), "'./in.gguf'", "'soft.gguf'");
  expect_input_kept();
  EXPECT_TRUE(fs::is_symlink(dir_ / "soft.gguf"));
}

TEST_F(ConvertOutputs, OutputOverAFileOfTheInputFolderIsRefused) {
  const std::string weights = test::read_file((folder_ / "model.safetensors").string());
  const std::string config = test::read_file((folder_ / "config.json").string());
  expect_refused(lfm_in(dir_.path(), "convert -q -m hf -o hf/model.safetensors --type f32"), "'hf'", "'hf/model.safetensors'");
  expect_refused(lfm_in(folder_, "convert -q -m . -o config.json --type f32"), "'.'", "'config.json'");
  EXPECT_TRUE(test::read_file((folder_ / "model.safetensors").string()) == weights) << "model.safetensors was changed";
  EXPECT_EQ(test::read_file((folder_ / "config.json").string()), config);
  // A new file in the input folder replaces nothing: allowed.
  const auto ok = lfm_in(dir_.path(), "convert -q -m hf -o hf/out.gguf --type f32");
  EXPECT_EQ(ok.code, 0) << ok.out;
  EXPECT_TRUE(test::read_file((folder_ / "model.safetensors").string()) == weights) << "model.safetensors was changed";
}

TEST_F(ConvertOutputs, PlantedSymlinksAreNotFollowed) {
  const std::string victim = dir_.write("victim.txt", "keep me\n");
  // Where the temporary file went (`<output>.tmp`), and the output itself.
  fs::create_symlink(victim, dir_ / "out.gguf.tmp");
  fs::create_symlink(victim, dir_ / "out2.gguf");
  const auto r = lfm_in(dir_.path(), "convert -q -m in.gguf -o out.gguf --type f16");
  EXPECT_EQ(r.code, 0) << r.out;
  const auto r2 = lfm_in(dir_.path(), "convert -q -m in.gguf -o out2.gguf --type f16");
  EXPECT_EQ(r2.code, 0) << r2.out;
  EXPECT_EQ(test::read_file(victim), "keep me\n");
  EXPECT_FALSE(fs::is_symlink(dir_ / "out.gguf"));
  EXPECT_FALSE(fs::is_symlink(dir_ / "out2.gguf"));  // the link was replaced, its target untouched
  EXPECT_EQ(test::read_file((dir_ / "out.gguf").string()).substr(0, 4), "GGUF");
  EXPECT_TRUE(fs::is_symlink(dir_ / "out.gguf.tmp"));  // not ours: left alone
  // No temporary file of ours is left behind.
  for (const auto& e : fs::directory_iterator(dir_.path()))
    EXPECT_EQ(e.path().filename().string().find(".lfm-tmp"), std::string::npos) << e.path();
  expect_input_kept();
}

TEST_F(ConvertOutputs, MmprojOutputThatIsTheMainOutputIsRefused) {
  const fs::path vl = dir_ / "vl";
  fs::copy(test::data_dir() + "/hf_vl/lfm2vl_a_tied_ln", vl, fs::copy_options::recursive);
  const auto r = lfm_in(dir_.path(), "convert -q -m vl -o out.gguf --mmproj-output ./out.gguf --type f32");
  expect_refused(r, "'./out.gguf'", "'out.gguf'");
  EXPECT_FALSE(fs::exists(dir_ / "out.gguf")) << "refused before anything was written";
  // The mmproj output may not be an input either.
  const auto r2 = lfm_in(dir_.path(), "convert -q -m vl -o out.gguf --mmproj-output vl/config.json --type f32");
  expect_refused(r2, "'vl'", "'vl/config.json'");
  EXPECT_FALSE(fs::exists(dir_ / "out.gguf"));
}

TEST(GenRandomOutputs, PlantedSymlinksAreNotFollowed) {
  test::TempDir dir("lfm_genrandom_out");
  const std::string victim = dir.write("victim.txt", "keep me\n");
  fs::create_directory(dir / "ckpt");
  fs::create_symlink(victim, dir / "ckpt" / "config.json");
  fs::create_symlink(victim, dir / "ckpt" / "model.safetensors.tmp");
  fs::create_symlink(victim, dir / "model.gguf.tmp");
  const auto r = lfm_in(dir.path(), "gen-random -q --shape tiny --type f32 -o ckpt");
  EXPECT_EQ(r.code, 0) << r.out;
  const auto g = lfm_in(dir.path(), "gen-random -q --shape tiny --type f32 -o model.gguf");
  EXPECT_EQ(g.code, 0) << g.out;
  EXPECT_EQ(test::read_file(victim), "keep me\n");
  EXPECT_FALSE(fs::is_symlink(dir / "ckpt" / "config.json"));
  EXPECT_EQ(test::read_file((dir / "ckpt" / "config.json").string()).substr(0, 1), "{");
  EXPECT_FALSE(fs::is_symlink(dir / "ckpt" / "model.safetensors"));
}

}  // namespace
}  // namespace lfm
