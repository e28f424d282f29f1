// audio/log_mel against two references for the same clips (tests/data/audio/frontend):
//  - the exact (float64) features, features_f64/<name>.f64: transformers' Lfm2AudioFeatureExtractor
//    restated in float64 NumPy (tools/audio_reference/exact_frontend_f64.py; reference.json
//    "features_f64" says what it computes and which float32 constants it does NOT use);
//  - transformers' own float32 features, features/<name>.f32 (make_audio_fixtures.py: transformers
//    5.2.0 + lfm2_audio@5074fc3b, torch 1.13 float32), which carry torch's float32 rounding.
// Tolerances, absolute:
//   features vs the float64 reference       1e-6, every clip (silence included: both ≈ 0) — the
//       port computes in double and rounds once to float32 (≤ 4.8e-7 for |x| < 16), so what is left
//       is that rounding plus double-precision differences (Eigen's FFT vs pocketfft, summation order)
//   features vs transformers                1e-3 — the float64 reference itself is up to 3.4e-4 from
//       them (hops_5280; torch's float32 window alone accounts for 3.1e-4 of it); the measured
//       maximum per clip is printed. silence_0p5s is degenerate there (log-mel constant; HF's −0.16
//       in every bin is float32 rounding of x − mean, ≈ 0 in float64): checked only for equal bins
//       per frame, |value| ≤ 0.2 and the zero terminal frame
//   un-normalised log-mel vs transformers    2e-3 — the float64 restatement is 1.0e-3 away (low-energy
//       bins, where the reference's float32 power rounding dominates)
//   window, mel filter bank (float32 API)    1e-6, 1e-7 against torch's / librosa's float32 values
//   T, N                                     exact
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <iostream>
#include <limits>
#include <numbers>
#include <string>
#include <thread>
#include <vector>

#include "audio/log_mel.h"
#include "core/error.h"
#include "hub/digest.h"
#include "test_util.h"

namespace lfm::audio {
namespace {

constexpr double kExactTol = 1e-6;
constexpr double kFeatureTol = 1e-3;
constexpr double kLogMelTol = 2e-3;

const nlohmann::json& frontend_reference() {
  static const nlohmann::json j = test::read_json(test::data_dir() + "/audio/frontend/reference.json");
  return j;
}

// A little-endian float32 / float64 fixture file named by a descriptor {file, shape, sha256}: its
// bytes are checked against the sha256 and the shape before use, so a wrong or truncated fixture
// fails loudly.
template <class T>
std::vector<T> load_raw(const nlohmann::json& desc) {
  const std::string path = test::data_dir() + "/audio/frontend/" + desc["file"].get<std::string>();
  const std::string bytes = test::read_file(path);
  size_t count = 1;
  for (const auto& d : desc["shape"]) count *= d.get<size_t>();
  EXPECT_EQ(bytes.size(), count * sizeof(T)) << path;
  EXPECT_EQ(hub::sha256_hex(bytes), desc["sha256"].get<std::string>()) << path;
  std::vector<T> v(bytes.size() / sizeof(T));
  std::memcpy(v.data(), bytes.data(), v.size() * sizeof(T));
  return v;
}

std::vector<float> load_f32(const nlohmann::json& desc) {
  EXPECT_EQ(desc["dtype"], "float32");
  return load_raw<float>(desc);
}

std::vector<double> load_f64(const nlohmann::json& desc) {
  EXPECT_EQ(desc["dtype"], "float64");
  return load_raw<double>(desc);
}

template <class B>
double max_abs_diff(const std::vector<float>& a, const std::vector<B>& b) {
  EXPECT_EQ(a.size(), b.size());
  double m = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) m = std::max(m, std::abs(double(a[i]) - double(b[i])));
  return m;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(AudioLogMel, ConfigMatchesTheReferenceConstants) {
  const auto& c = frontend_reference()["constants"];
  const LogMelConfig cfg;
  EXPECT_EQ(cfg.sample_rate, c["sampling_rate"].get<int>());
  EXPECT_EQ(cfg.n_fft, c["n_fft"].get<int>());
  EXPECT_EQ(cfg.hop_length, c["hop_length"].get<int>());
  EXPECT_EQ(cfg.win_length, c["win_length"].get<int>());
  EXPECT_EQ(cfg.num_mel_bins, c["num_mel_bins"].get<int>());
  EXPECT_EQ(cfg.preemphasis, c["preemphasis"].get<float>());
  EXPECT_EQ(cfg.log_guard, c["log_zero_guard"].get<double>());
  EXPECT_EQ(cfg.log_guard, std::ldexp(1.0, -24));
  EXPECT_EQ(cfg.std_eps, c["normalisation_eps_added_to_std"].get<double>());
  EXPECT_EQ(cfg.fmax, cfg.sample_rate / 2.0);
}

TEST(AudioLogMel, WindowMatchesTorchSymmetricHann) {
  const auto ref = load_f32(frontend_reference()["window"]);
  const auto w = hann_window_symmetric(400);
  const double d = max_abs_diff(w, ref);
  std::cout << "[ window ] max |diff| " << d << "\n";
  EXPECT_LE(d, 1e-6);
  EXPECT_EQ(w.front(), 0.0f);
  EXPECT_EQ(w.back(), 0.0f);
}

TEST(AudioLogMel, MelFilterBankMatchesLibrosaSlaney) {
  const auto& desc = frontend_reference()["mel_filters"];
  ASSERT_EQ(desc["shape"], nlohmann::json({128, 257}));
  const auto ref = load_f32(desc);
  const auto fb = mel_filter_bank();
  ASSERT_EQ(fb.size(), size_t(128 * 257));
  const double d = max_abs_diff(fb, ref);
  std::cout << "[ mel filters ] max |diff| " << d << "\n";
  EXPECT_LE(d, 1e-7);
  // Same zero pattern: a triangle that started or ended one bin off would differ by its edge weight.
  for (size_t i = 0; i < fb.size(); ++i) ASSERT_EQ(fb[i] == 0.0f, ref[i] == 0.0f) << "entry " << i;
}

TEST(AudioLogMel, FrameAndTokenCountsAreExact) {
  const auto& clips = frontend_reference()["clips"];
  ASSERT_EQ(clips.size(), 11u);
  for (const auto& c : clips) {
    SCOPED_TRACE(c["name"].get<std::string>());
    const int64_t len = c["num_samples"], frames = c["num_frames_T"], tokens = c["audio_tokens_N"];
    EXPECT_EQ(log_mel_frames(len), frames);
    EXPECT_EQ(audio_tokens_for_frames(frames), tokens);
    EXPECT_EQ(c["attention_mask_sum"].get<int64_t>(), frames);
    EXPECT_EQ(c["normalised_frames_n"].get<int64_t>(), len / 160);
  }
  EXPECT_EQ(audio_tokens_for_frames(8), 1);
  EXPECT_EQ(audio_tokens_for_frames(9), 2);
}

TEST(AudioLogMel, FeaturesMatchTheFloat64ReferenceTo1e6) {
  const auto& clips = frontend_reference()["clips"];
  const auto& exact = frontend_reference()["features_f64"]["clips"];
  ASSERT_EQ(exact.size(), clips.size());
  for (size_t i = 0; i < clips.size(); ++i) {
    const auto& c = clips[i];
    const std::string name = c["name"];
    SCOPED_TRACE(name);
    ASSERT_EQ(exact[i]["name"].get<std::string>(), name);
    const auto& desc = exact[i]["features"];
    const int64_t frames = c["num_frames_T"];
    ASSERT_EQ(desc["shape"], nlohmann::json({frames, 128}));
    const auto ref = load_f64(desc);
    const LogMel out = compute_log_mel(load_f32(c["samples"]));
    ASSERT_EQ(out.frames, frames);
    const double d = max_abs_diff(out.values, ref);
    std::cout << "[ features vs float64 ] " << name << " max |diff| " << d << "\n";
    EXPECT_LE(d, kExactTol);
  }
}

TEST(AudioLogMel, FeaturesMatchTransformers) {
  for (const auto& c : frontend_reference()["clips"]) {
    const std::string name = c["name"];
    SCOPED_TRACE(name);
    const auto samples = load_f32(c["samples"]);
    const auto ref = load_f32(c["input_features"]);
    const LogMel out = compute_log_mel(samples);
    const int64_t frames = c["num_frames_T"];
    ASSERT_EQ(out.frames, frames);
    ASSERT_EQ(out.num_mel_bins, 128);
    ASSERT_EQ(out.values.size(), size_t(frames) * 128);
    // The terminal frame is exactly zero in both.
    for (int m = 0; m < 128; ++m) {
      ASSERT_EQ(out.values[size_t(frames - 1) * 128 + m], 0.0f);
      ASSERT_EQ(ref[size_t(frames - 1) * 128 + m], 0.0f);
    }
    if (name == "silence_0p5s") {
      for (int64_t t = 0; t < frames; ++t)
        for (int m = 0; m < 128; ++m) {
          const float v = out.values[size_t(t) * 128 + m];
          ASSERT_EQ(v, out.values[size_t(t) * 128]) << "frame " << t << " bin " << m;
          ASSERT_LE(std::abs(v), 0.2f) << "frame " << t << " bin " << m;
        }
      std::cout << "[ features ] " << name << " (degenerate) value " << out.values[0] << ", HF " << ref[0] << "\n";
      continue;
    }
    const double d = max_abs_diff(out.values, ref);
    std::cout << "[ features ] " << name << " max |diff| " << d << " (float64 restatement "
              << c["float64_numpy_maxdiff"]["input_features"].get<double>() << ")\n";
    EXPECT_LE(d, kFeatureTol);
  }
}

TEST(AudioLogMel, UnnormalisedLogMelMatchesTransformers) {
  for (const auto& c : frontend_reference()["clips"]) {
    const std::string name = c["name"];
    SCOPED_TRACE(name);
    const auto samples = load_f32(c["samples"]);
    const auto ref = load_f32(c["log_mel_unnormalised"]);
    const LogMel out = log_mel_unnormalised(samples);
    ASSERT_EQ(out.frames, c["num_frames_T"].get<int64_t>());
    const double d = max_abs_diff(out.values, ref);
    std::cout << "[ log-mel ] " << name << " max |diff| " << d << " (float64 restatement "
              << c["float64_numpy_maxdiff"]["log_mel_unnormalised"].get<double>() << ")\n";
    EXPECT_LE(d, kLogMelTol);
  }
}

// A deterministic noise clip (every bin energetic, so float32 constants in the check below cost
// only ~1e-7 relative): [len].
std::vector<float> lcg_noise(size_t len, uint32_t seed) {
  std::vector<float> x(len);
  for (auto& v : x) {
    seed = seed * 1664525u + 1013904223u;
    v = 0.1f * (float(seed >> 8) / float(1u << 24) - 0.5f);
  }
  return x;
}

// log_mel_unnormalised for other FFT sizes (even, odd factors, more sizes than the plan cache keeps,
// so the per-call plan path runs too) against a direct O(n²) DFT of the same frames.
TEST(AudioLogMel, OtherFftSizesAgreeWithADirectDft) {
  for (const int n_fft : {256, 258, 320, 400, 510, 600, 800, 1000, 1024, 1026, 2048}) {
    SCOPED_TRACE("n_fft " + std::to_string(n_fft));
    LogMelConfig cfg;
    cfg.n_fft = n_fft;
    cfg.win_length = n_fft - n_fft / 4;
    cfg.num_mel_bins = 40;
    const std::vector<float> x = lcg_noise(size_t(3 * cfg.hop_length + 17), uint32_t(n_fft));
    const LogMel lm = log_mel_unnormalised(x, cfg);
    ASSERT_EQ(lm.frames, 4);
    const auto w = hann_window_symmetric(cfg.win_length);
    const auto fb = mel_filter_bank(cfg);
    const int bins = n_fft / 2 + 1, off = (n_fft - cfg.win_length) / 2;
    double worst = 0;
    for (int64_t t = 0; t < lm.frames; ++t) {
      std::vector<double> frame(n_fft, 0.0);
      for (int j = 0; j < cfg.win_length; ++j) {
        const int64_t s = t * cfg.hop_length - n_fft / 2 + off + j;
        if (s < 0 || s >= int64_t(x.size())) continue;
        const double y = s == 0 ? x[0] : double(x[s]) - double(cfg.preemphasis) * double(x[s - 1]);
        frame[off + j] = y * w[j];
      }
      std::vector<double> power(bins);
      for (int k = 0; k < bins; ++k) {
        double re = 0, im = 0;
        for (int n = 0; n < n_fft; ++n) {
          const double ph = 2.0 * std::numbers::pi * double((int64_t(k) * n) % n_fft) / n_fft;
          re += frame[n] * std::cos(ph);
          im -= frame[n] * std::sin(ph);
        }
        power[k] = re * re + im * im;
      }
      for (int m = 0; m < cfg.num_mel_bins; ++m) {
        double mel = 0;
        for (int k = 0; k < bins; ++k) mel += double(fb[size_t(m) * bins + k]) * power[k];
        worst = std::max(worst, std::abs(std::log(mel + cfg.log_guard) - lm.values[size_t(t) * cfg.num_mel_bins + m]));
      }
    }
    std::cout << "[ direct DFT ] n_fft " << n_fft << " max |diff| " << worst << "\n";
    EXPECT_LE(worst, 1e-5);
  }
}

// Plans are made under a lock and run on per-call buffers: calls from several threads at once, on
// two FFT sizes (one of them new, so planning races with execution), give the serial results exactly.
TEST(AudioLogMel, ConcurrentCallsGiveTheSerialResults) {
  LogMelConfig other;
  other.n_fft = 768;
  other.win_length = 640;
  const std::vector<float> x = lcg_noise(16000, 7);
  std::vector<std::vector<float>> got(8);
  {
    std::vector<std::thread> threads;
    for (size_t i = 0; i < got.size(); ++i)
      threads.emplace_back([&, i] { got[i] = compute_log_mel(x, i % 2 ? other : LogMelConfig{}).values; });
    for (auto& th : threads) th.join();
  }
  const auto want_default = compute_log_mel(x).values, want_other = compute_log_mel(x, other).values;
  for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], i % 2 ? want_other : want_default) << "thread " << i;
}

TEST(AudioLogMel, SilenceIsTheLogGuard) {
  // Exact zeros: every mel energy is 0, so every value is ln(2^-24) (float32-rounded).
  const std::vector<float> zeros(1000, 0.0f);
  const LogMel lm = log_mel_unnormalised(zeros);
  ASSERT_EQ(lm.frames, 7);
  for (const float v : lm.values) ASSERT_EQ(v, float(std::log(std::ldexp(1.0, -24))));
}

TEST(AudioLogMel, RefusesBadInput) {
  const std::vector<float> ok(16000, 0.1f);
  EXPECT_NE(error_of([] { compute_log_mel(std::span<const float>()); }).find("audio front end: empty clip"),
            std::string::npos);
  std::vector<float> bad = ok;
  bad[1234] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_NE(error_of([&] { compute_log_mel(bad); }).find("audio front end: sample 1234 is not finite"),
            std::string::npos);
  bad[1234] = -std::numeric_limits<float>::infinity();
  EXPECT_NE(error_of([&] { log_mel_unnormalised(bad); }).find("sample 1234 is not finite (-inf)"), std::string::npos);
  EXPECT_NE(error_of([&] { compute_log_mel(ok, {}, 15999); })
                .find("audio front end: clip of 16000 samples (1 s) exceeds the limit of 15999 samples"),
            std::string::npos);
  EXPECT_NO_THROW(compute_log_mel(ok, {}, 16000));
  const std::vector<float> short_clip(319, 0.1f);
  EXPECT_NE(error_of([&] { compute_log_mel(short_clip); })
                .find("audio front end: clip of 319 samples is shorter than the minimum of 320"),
            std::string::npos);
  EXPECT_EQ(compute_log_mel(std::vector<float>(320, 0.1f)).frames, 3);
  // The largest finite samples cannot overflow the double-precision path: finite features, not inf/NaN.
  std::vector<float> huge(1600, 3e38f);
  for (size_t i = 0; i < huge.size(); i += 3) huge[i] = -3e38f;
  for (const float v : compute_log_mel(huge).values) ASSERT_TRUE(std::isfinite(v));
  for (const float v : log_mel_unnormalised(huge).values) ASSERT_TRUE(std::isfinite(v));
  LogMelConfig cfg;
  cfg.win_length = 600;
  EXPECT_NE(error_of([&] { compute_log_mel(ok, cfg); }).find("audio front end: win_length 600 must be in [2, n_fft = 512]"),
            std::string::npos);
  cfg = {};
  cfg.fmax = 9000;
  EXPECT_NE(error_of([&] { mel_filter_bank(cfg); }).find("audio front end: fmax 9000"), std::string::npos);
  cfg = {};
  cfg.n_fft = 511;
  EXPECT_NE(error_of([&] { validate(cfg); }).find("audio front end: n_fft 511 must be even"), std::string::npos);
}

}  // namespace
}  // namespace lfm::audio
