// Shared helpers for the test suite: paths to bundled test data, fixture readers, temporary
// folders, running the `lfm` executable (or any command), and float comparisons that fail on NaN
// and on size mismatches.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace lfm::test {

// Where this checkout's test data, sources and `lfm` binary are: absolute paths compiled into
// test_paths.cpp alone, so every other test file's compile command is the same in any clone
// (ccache reuses it).
const char* test_data_path();
const char* source_path();
const char* lfm_binary_path();

}  // namespace lfm::test

#define LFM_TEST_DATA_DIR (::lfm::test::test_data_path())
#define LFM_SOURCE_DIR (::lfm::test::source_path())
#define LFM_BINARY (::lfm::test::lfm_binary_path())

namespace lfm::test {

inline std::string data_dir() { return LFM_TEST_DATA_DIR; }
inline std::string fixture_dir(const std::string& name) { return data_dir() + "/hf/" + name; }

inline nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("test: cannot open " + path);
  return nlohmann::json::parse(in);
}

// The whole file as bytes ("" when it cannot be read).
std::string read_file(const std::filesystem::path& path);

inline nlohmann::json reference(const std::string& fixture) {
  return read_json(fixture_dir(fixture) + "/reference.json");
}

inline const std::vector<std::string>& dense_fixtures() {
  static const std::vector<std::string> f = {
      "lfm2_a_fullattnidxs_tied_f32", "lfm2_b_layertypes_tied_f32", "lfm2_c_layertypes_untied_convbias_f32",
      "lfm2_d_fullattnidxs_tied_bf16", "lfm2_e_allattn_noadjust_f32"};
  return f;
}

inline const std::vector<std::string>& moe_fixtures() {
  static const std::vector<std::string> f = {"lfm2moe_f_tied_expertbias_f32", "lfm2moe_g_untied_nobias_scaled_f32"};
  return f;
}

inline std::vector<std::string> all_fixtures() {
  std::vector<std::string> f = dense_fixtures();
  f.insert(f.end(), moe_fixtures().begin(), moe_fixtures().end());
  return f;
}

// ---- float comparison ---------------------------------------------------------------------------

// Largest |a[i] - b[i]|. Infinity when the sizes differ or any difference is NaN (a NaN on either
// side), so `EXPECT_LE(max_abs_diff(...), tol)` can never pass by accident. Equal values count as
// 0 (so matching infinities compare equal).
template <typename A, typename B>
double max_abs_diff(std::span<const A> a, std::span<const B> b) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  if (a.size() != b.size()) return kInf;
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double x = static_cast<double>(a[i]), y = static_cast<double>(b[i]);
    if (x == y) continue;
    const double d = std::abs(x - y);
    if (!(d < kInf)) return kInf;  // NaN or infinite difference
    if (d > m) m = d;
  }
  return m;
}
// A row of n values (e.g. one logits row of a step) against an expected row.
// A minimal valid tokenizer.json: bytes a, b, c, merge "a b", LFM2's pre-tokenizer layout and a
// BOS post-processor (for tests that edit one field and expect an error naming it).
inline nlohmann::json minimal_tokenizer_json() {
  return nlohmann::json::parse(R"({
    "added_tokens": [{"id": 0, "content": "<s>", "special": true}],
    "normalizer": null,
    "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
      {"type": "Split", "pattern": {"Regex": "\\p{L}+|\\s+"}, "behavior": "Isolated", "invert": false},
      {"type": "ByteLevel", "add_prefix_space": false, "use_regex": false}]},
    "post_processor": {"type": "TemplateProcessing",
      "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}]},
    "decoder": {"type": "ByteLevel"},
    "model": {"type": "BPE", "vocab": {"<s>": 0, "a": 1, "b": 2, "c": 3, "ab": 4}, "merges": ["a b"]}
  })");
}

inline double max_abs_diff(const float* a, int64_t n, const std::vector<double>& b) {
  return max_abs_diff(std::span<const float>(a, static_cast<size_t>(n)), std::span<const double>(b));
}
inline double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  return max_abs_diff(std::span<const float>(a), std::span<const float>(b));
}
inline double max_abs_diff(const std::vector<float>& a, const std::vector<double>& b) {
  return max_abs_diff(std::span<const float>(a), std::span<const double>(b));
}
// Over rows: infinity when the row counts differ.
template <typename T>
double max_abs_diff(const std::vector<std::vector<T>>& a, const std::vector<std::vector<T>>& b) {
  if (a.size() != b.size()) return std::numeric_limits<double>::infinity();
  double m = 0;
  for (size_t r = 0; r < a.size(); ++r) m = std::max(m, max_abs_diff(std::span<const T>(a[r]), std::span<const T>(b[r])));
  return m;
}
// Largest |x| (infinity when any value is NaN).
inline double max_abs(const std::vector<std::vector<float>>& a) {
  double m = 0;
  for (const auto& r : a)
    for (float v : r) {
      if (std::isnan(v)) return std::numeric_limits<double>::infinity();
      m = std::max(m, std::abs(static_cast<double>(v)));
    }
  return m;
}

// n normal values (mean 0, std `scale`) from a fixed seed.
std::vector<float> randn(size_t n, uint64_t seed, float scale = 1.0f);

// Instruction-set levels that backend tests run on: "generic" (the portable reference backend)
// and each SIMD level; tests skip levels the CPU lacks (see skip_unless_supported).
// The most int8 activations (a scale of amax / 127 per 32-value block, rounded to nearest) can
// move y = Σ x · w from its float32 value ref: Σ over blocks of (amax / 254) · Σ_block |w|, plus
// float32 reassociation (2e-5 · √K relative). x and w: K values (K a multiple of 32).
inline double int8_bound(const float* x, const float* w, int64_t K, double ref) {
  double b = 0;
  for (int64_t k0 = 0; k0 < K; k0 += 32) {
    double amax = 0, wsum = 0;
    for (int64_t k = k0; k < k0 + 32; ++k) {
      amax = std::max(amax, std::fabs(static_cast<double>(x[k])));
      wsum += std::fabs(static_cast<double>(w[k]));
    }
    b += amax / 254.0 * wsum;
  }
  return 1.01 * b + 2e-5 * std::sqrt(static_cast<double>(K)) * (1 + std::fabs(ref));
}

inline std::vector<std::string> all_isas() { return {"generic", "avx2", "avx512"}; }

// ---- temporary folders --------------------------------------------------------------------------

// A fresh, empty folder under the system temp dir, unique per process, test and instance; removed
// with everything in it when the object goes away.
class TempDir {
 public:
  explicit TempDir(const std::string& stem = "lfm_test");
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }
  std::string str() const { return path_.string(); }
  // Writes `bytes` to a file in the folder; returns its path.
  std::string write(const std::string& name, const std::string& bytes) const;

 private:
  std::filesystem::path path_;
};

// ---- running commands ---------------------------------------------------------------------------

struct RunResult {
  int code = -1;    // exit status; -1 when the command did not exit normally
  std::string out;  // stdout (plus stderr when merged)
};

enum class Stderr { kMerge, kDiscard };

// Runs a shell command line and captures its stdout.
RunResult run_command(const std::string& cmd);

// Runs `lfm <args>`; stderr is merged into the output or discarded; `input` (if given) is the
// process's standard input.
RunResult run_lfm(const std::string& args, Stderr err = Stderr::kMerge, const std::string* input = nullptr);

}  // namespace lfm::test
