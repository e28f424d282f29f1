// Files named from outside that are not regular files (issue 41, item 3): a FIFO in place of a
// shard, a config, a tokenizer, a GGUF or a --file input used to block open() forever; each must
// now fail at once with an error naming the file. Every command runs under `timeout 20`, so a
// regression fails the test instead of hanging the suite.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>

#include "core/error.h"
#include "core/file_io.h"
#include "test_util.h"

namespace lfm {
namespace {

namespace fs = std::filesystem;

void make_fifo(const fs::path& p) { ASSERT_EQ(::mkfifo(p.c_str(), 0600), 0) << p; }

TEST(SpecialFiles, OpeningAFifoFailsAtOnceNamingIt) {
  test::TempDir dir;
  const fs::path fifo = dir.path() / "pipe";
  make_fifo(fifo);
  try {
    read_regular_file(fifo.string(), "test:");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("is not a regular file (a FIFO)"), std::string::npos) << e.what();
  }
  EXPECT_THROW(open_regular_file(dir.path().string(), "test:"), Error);  // a directory
  EXPECT_FALSE(is_regular_path(fifo.string()));
  EXPECT_EQ(read_regular_file((fs::path(test::fixture_dir("lfm2_a_fullattnidxs_tied_f32")) / "config.json").string(), "t")
                .substr(0, 1),
            "{");
}

TEST(SpecialFiles, CommandsRefuseFifosInsteadOfHanging) {
  test::TempDir dir;
  const fs::path fixture = test::fixture_dir("lfm2_a_fullattnidxs_tied_f32");
  auto run = [&](const std::string& args) {
    return test::run_command("timeout 20 " + std::string(LFM_BINARY) + " " + args + " 2>&1");
  };
  // A model folder whose weights are a FIFO.
  const fs::path shard = dir.path() / "shard";
  fs::create_directories(shard);
  fs::copy_file(fixture / "config.json", shard / "config.json");
  make_fifo(shard / "model.safetensors");
  auto r = run("logits -m " + shard.string() + " --ids 1,2");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("not a regular file (a FIFO)"), std::string::npos) << r.out;
  // Its config a FIFO.
  const fs::path cfg = dir.path() / "cfg";
  fs::create_directories(cfg);
  make_fifo(cfg / "config.json");
  r = run("info -m " + cfg.string());
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("not a regular file (a FIFO)"), std::string::npos) << r.out;
  // A FIFO named like a GGUF file, and one under another name.
  make_fifo(dir.path() / "m.gguf");
  r = run("info -m " + (dir.path() / "m.gguf").string());
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("not a regular file or a folder (a FIFO)"), std::string::npos) << r.out;
  make_fifo(dir.path() / "m.bin");
  r = run("generate -m " + (dir.path() / "m.bin").string() + " --prompt-ids 1");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("a FIFO"), std::string::npos) << r.out;
  // A tokenizer.json that is a FIFO, and a --file input that is one.
  const fs::path tok = dir.path() / "tok";
  fs::create_directories(tok);
  for (const char* f : {"tokenizer_config.json", "config.json"})
    if (fs::exists(fs::path(test::data_dir()) / "tokenizer" / f))
      fs::copy_file(fs::path(test::data_dir()) / "tokenizer" / f, tok / f);
  make_fifo(tok / "tokenizer.json");
  r = run("tokenize -m " + tok.string() + " hello");
  EXPECT_NE(r.code, 0) << r.out;
  EXPECT_NE(r.code, 124) << "timed out: " << r.out;
  EXPECT_NE(r.out.find("not a regular file (a FIFO)"), std::string::npos) << r.out;
  make_fifo(dir.path() / "input.txt");
  r = run("tokenize -m " + (fs::path(test::data_dir()) / "tokenizer").string() + " --file " +
          (dir.path() / "input.txt").string());
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("not a regular file (a FIFO)"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace lfm
