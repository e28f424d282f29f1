// Out-of-line parts of test_util.h: temporary folders and running commands.
#include "test_util.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cstdio>
#include <random>
#include <sstream>

namespace lfm::test {

namespace fs = std::filesystem;

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<float> randn(size_t n, uint64_t seed, float scale) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = nd(rng);
  return v;
}

TempDir::TempDir(const std::string& stem) {
  static std::atomic<int> counter{0};
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string test = info ? std::string(info->test_suite_name()) + "." + info->name() : "suite";
  for (char& c : test)
    if (c == '/' || c == ' ') c = '_';
  path_ = fs::temp_directory_path() /
          (stem + "_" + std::to_string(::getpid()) + "_" + std::to_string(counter++) + "_" + test);
  fs::remove_all(path_);
  fs::create_directories(path_);
}

TempDir::~TempDir() {
  std::error_code ec;
  fs::remove_all(path_, ec);
}

std::string TempDir::write(const std::string& name, const std::string& bytes) const {
  const fs::path p = path_ / name;
  std::ofstream(p, std::ios::binary) << bytes;
  return p.string();
}

RunResult run_command(const std::string& cmd) {
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return {-1, "popen failed: " + cmd};
  RunResult r;
  std::array<char, 65536> buf;
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  const int status = ::pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

RunResult run_lfm(const std::string& args, Stderr err, const std::string* input) {
  std::string cmd = std::string(LFM_BINARY) + " " + args;
  std::unique_ptr<TempDir> in_dir;
  if (input) {
    in_dir = std::make_unique<TempDir>("lfm_stdin");
    cmd += " < '" + in_dir->write("stdin.txt", *input) + "'";
  }
  cmd += err == Stderr::kMerge ? " 2>&1" : " 2>/dev/null";
  return run_command(cmd);
}

}  // namespace lfm::test
