// The shared comparison helpers must never let a broken result pass a tolerance check.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "test_util.h"

namespace lfm {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

TEST(TestUtil, NanLogitsFailTheComparison) {
  const std::vector<double> want = {0.5, -1.0, 2.0};
  const std::vector<float> got = {0.5f, kNaN, 2.0f};
  EXPECT_FALSE(test::max_abs_diff(got.data(), 3, want) <= 1e-4);
  EXPECT_FALSE(test::max_abs_diff(got, want) <= 1e30);
  // NaN on the expected side, or everywhere, fails as well.
  EXPECT_FALSE(test::max_abs_diff(std::vector<float>{1, 2}, std::vector<float>{1, kNaN}) <= 1e-4);
  EXPECT_FALSE(test::max_abs_diff(std::vector<float>{kNaN}, std::vector<float>{kNaN}) <= 1e-4);
  EXPECT_FALSE(test::max_abs(std::vector<std::vector<float>>{{1, kNaN}}) <= 1e30);
}

TEST(TestUtil, SizeMismatchFailsTheComparison) {
  const std::vector<double> want = {1.0, 2.0, 3.0};
  const std::vector<float> shorter = {1.0f, 2.0f};
  EXPECT_FALSE(test::max_abs_diff(shorter.data(), 2, want) <= 1e-4);
  EXPECT_FALSE(test::max_abs_diff(shorter, want) <= 1e-4);
  EXPECT_FALSE(test::max_abs_diff(std::vector<std::vector<float>>{{1}}, std::vector<std::vector<float>>{{1}, {2}}) <= 1);
  EXPECT_FALSE(test::max_abs_diff(std::vector<std::vector<float>>{{1, 2}}, std::vector<std::vector<float>>{{1}}) <= 1);
}

TEST(TestUtil, ComparisonMeasuresTheLargestDifference) {
  EXPECT_EQ(test::max_abs_diff(std::vector<float>{1, 2, 3}, std::vector<double>{1, 2.5, 2}), 1.0);
  EXPECT_EQ(test::max_abs_diff(std::vector<float>{-kInf, 1}, std::vector<float>{-kInf, 1}), 0.0);  // same infinity
  EXPECT_FALSE(test::max_abs_diff(std::vector<float>{kInf}, std::vector<float>{1}) <= 1e30);
  EXPECT_EQ(test::max_abs_diff(std::vector<float>{}, std::vector<float>{}), 0.0);
}

TEST(TestUtil, TempDirIsFreshAndRemoved) {
  std::filesystem::path kept;
  {
    const test::TempDir a("lfm_util"), b("lfm_util");
    EXPECT_NE(a.path(), b.path());
    EXPECT_TRUE(std::filesystem::is_directory(a.path()));
    EXPECT_EQ(test::read_file(a.write("x.txt", "bytes\n")), "bytes\n");
    kept = a.path();
  }
  EXPECT_FALSE(std::filesystem::exists(kept));
}

TEST(TestUtil, RunCommandReportsOutputAndExitCode) {
  const auto ok = test::run_command("printf 'a b'");
  EXPECT_EQ(ok.code, 0);
  EXPECT_EQ(ok.out, "a b");
  EXPECT_EQ(test::run_command("exit 3").code, 3);
  const std::string input = "piped\n";
  const auto r = test::run_lfm("--bogus-subcommand", test::Stderr::kDiscard, &input);
  EXPECT_NE(r.code, 0);
}

}  // namespace
}  // namespace lfm
