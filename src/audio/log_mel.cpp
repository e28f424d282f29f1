// Lfm2AudioFeatureExtractor in C++ (log_mel.h has the steps). Every step after reading the float32
// samples is computed in double — pre-emphasis, the window, the FFT (Eigen's FFT module, in double),
// power, the mel matrix, log and normalisation — and rounded to float32 only at the output. That makes
// the port reproduce the exact (float64) values of the algorithm (tests/data/audio/frontend/features_f64,
// tools/audio_reference/exact_frontend_f64.py) to within the output rounding (< 1e-6), rather than
// imitating torch's float32 rounding, which no independent implementation can (transformers' float32
// features are ~3.4e-4 from the exact ones: the README of the fixtures).
#include "audio/log_mel.h"

#include <unsupported/Eigen/FFT>

#include <algorithm>
#include <complex>
#include <cmath>
#include <vector>
#include <numbers>

#include "core/error.h"

namespace lfm::audio {
namespace {

// librosa's Slaney mel scale (htk=False): linear below 1 kHz (200/3 Hz per mel), logarithmic
// above with step ln(6.4)/27 per mel; 1 kHz is mel 15.
constexpr double kSlaneyHzPerMel = 200.0 / 3.0;
constexpr double kSlaneyMinLogHz = 1000.0;
constexpr double kSlaneyMinLogMel = kSlaneyMinLogHz / kSlaneyHzPerMel;

double slaney_logstep() { return std::log(6.4) / 27.0; }

double hz_to_mel(double hz) {
  if (hz >= kSlaneyMinLogHz) return kSlaneyMinLogMel + std::log(hz / kSlaneyMinLogHz) / slaney_logstep();
  return hz / kSlaneyHzPerMel;
}

double mel_to_hz(double mel) {
  if (mel >= kSlaneyMinLogMel) return kSlaneyMinLogHz * std::exp(slaney_logstep() * (mel - kSlaneyMinLogMel));
  return kSlaneyHzPerMel * mel;
}

// The real FFT of one n_fft frame in double: Eigen's FFT module (MPL-2.0, header-only; its default
// backend is a mixed-radix kissfft port templated on the scalar type, so double precision). One
// per compute call: an Eigen::FFT object caches its twiddles and is not safe to share between
// threads, and making one for n_fft = 512 costs microseconds.
class RealFft {
 public:
  explicit RealFft(int n_fft) : in_(std::size_t(n_fft)) { fft_.SetFlag(Eigen::FFT<double>::HalfSpectrum); }
  // in: [n_fft] doubles → out: [n_fft/2 + 1] complex (re, im interleaved).
  void run(const double* in, double* out) {
    std::copy(in, in + in_.size(), in_.begin());
    fft_.fwd(spectrum_, in_);
    for (std::size_t k = 0; k < spectrum_.size(); ++k) {
      out[2 * k] = spectrum_[k].real();
      out[2 * k + 1] = spectrum_[k].imag();
    }
  }

 private:
  Eigen::FFT<double> fft_;
  std::vector<double> in_;
  std::vector<std::complex<double>> spectrum_;
};

// 0.5 − 0.5·cos(2πn/(N−1)) in double: [win_length].
std::vector<double> hann_window_double(int win_length) {
  LFM_CHECK(win_length >= 2, "audio front end: Hann window length ", win_length, " must be ≥ 2");
  std::vector<double> w(win_length);
  // Symmetric: the period is win_length − 1, so both ends are 0.
  const double denom = double(win_length - 1);
  for (int n = 0; n < win_length; ++n) w[n] = 0.5 - 0.5 * std::cos(2.0 * std::numbers::pi * n / denom);
  return w;
}

// The Slaney mel matrix in double: [num_mel_bins, n_fft / 2 + 1] row-major. Config already validated.
std::vector<double> mel_filter_bank_double(const LogMelConfig& cfg) {
  const int bins = cfg.n_fft / 2 + 1, n_mels = cfg.num_mel_bins;
  // Band edges: n_mels + 2 points evenly spaced on the mel scale (numpy.linspace: start + i·step,
  // the last point exactly the end), back in Hz.
  const double mel_lo = hz_to_mel(cfg.fmin), mel_hi = hz_to_mel(cfg.fmax);
  const int points = n_mels + 2;
  const double step = (mel_hi - mel_lo) / double(points - 1);
  std::vector<double> edge_hz(points);
  for (int i = 0; i < points; ++i) edge_hz[i] = mel_to_hz(i == points - 1 ? mel_hi : mel_lo + double(i) * step);
  // Bin centre frequencies, numpy.fft.rfftfreq(n_fft, 1/sr): k · (1 / (n_fft · (1/sr))).
  const double bin_hz = 1.0 / (double(cfg.n_fft) * (1.0 / double(cfg.sample_rate)));

  std::vector<double> fb(std::size_t(n_mels) * bins);
  for (int m = 0; m < n_mels; ++m) {
    const double left = edge_hz[m], centre = edge_hz[m + 1], right = edge_hz[m + 2];
    // Slaney area normalisation: each triangle scaled to unit area over its width in Hz.
    const double enorm = 2.0 / (right - left);
    for (int k = 0; k < bins; ++k) {
      const double f = double(k) * bin_hz;
      const double rising = (f - left) / (centre - left);
      const double falling = (right - f) / (right - centre);
      fb[std::size_t(m) * bins + k] = std::max(0.0, std::min(rising, falling)) * enorm;
    }
  }
  return fb;
}

void check_samples(std::span<const float> samples, const LogMelConfig& cfg, std::size_t max_samples) {
  validate(cfg);
  LFM_CHECK(!samples.empty(), "audio front end: empty clip (0 samples)");
  LFM_CHECK(samples.size() <= max_samples, "audio front end: clip of ", samples.size(), " samples (",
            double(samples.size()) / cfg.sample_rate, " s) exceeds the limit of ", max_samples, " samples");
  // The normalisation's unbiased std needs n = floor(L / hop) ≥ 2 frames (HF gives NaN below).
  const std::size_t min_samples = std::size_t(2) * std::size_t(cfg.hop_length);
  LFM_CHECK(samples.size() >= min_samples, "audio front end: clip of ", samples.size(),
            " samples is shorter than the minimum of ", min_samples, " (2 hops of ", cfg.hop_length, ")");
  for (std::size_t i = 0; i < samples.size(); ++i)
    LFM_CHECK(std::isfinite(samples[i]), "audio front end: sample ", i, " is not finite (", samples[i], ")");
}

// ln(Fb·|STFT|² + guard) in double: [T, num_mel_bins] time-major. Samples already checked.
std::vector<double> log_mel_double(std::span<const float> x, const LogMelConfig& cfg, int64_t frames) {
  const int64_t len = int64_t(x.size());
  const int n_fft = cfg.n_fft, bins = n_fft / 2 + 1, n_mels = cfg.num_mel_bins;

  // Pre-emphasis over the clip, in double. The coefficient is the float32 cfg.preemphasis (0.97f =
  // 0.9700000286102295), the operand torch multiplies by; 0.97 exactly would move the features by
  // up to 4.5e-6 (features_f64 "sensitivity").
  const double a = cfg.preemphasis;
  std::vector<double> y(x.size());
  y[0] = x[0];
  for (int64_t i = 1; i < len; ++i) y[i] = double(x[i]) - a * double(x[i - 1]);

  const std::vector<double> window = hann_window_double(cfg.win_length);
  const std::vector<double> fb = mel_filter_bank_double(cfg);
  // Each triangle's nonzero bins [lo, hi): the mel product skips the zeros.
  std::vector<int> lo(n_mels, 0), hi(n_mels, 0);
  for (int m = 0; m < n_mels; ++m) {
    const double* row = fb.data() + int64_t(m) * bins;
    int a0 = 0, b0 = bins;
    while (a0 < bins && row[a0] == 0.0) ++a0;
    while (b0 > a0 && row[b0 - 1] == 0.0) --b0;
    lo[m] = a0;
    hi[m] = b0;
  }

  RealFft fft(n_fft);
  std::vector<double> frame(static_cast<std::size_t>(n_fft));  // [n_fft] windowed samples
  std::vector<double> spectrum(static_cast<std::size_t>(bins) * 2);  // [n_fft/2 + 1] (re, im)
  // torch.stft(center=True) pads n_fft/2 zeros on each side and centres the window inside the
  // n_fft frame, so frame t's window tap j reads y[t·hop − n_fft/2 + (n_fft − win)/2 + j].
  const int win_offset = (n_fft - cfg.win_length) / 2;
  std::vector<double> power(bins);
  std::vector<double> out(std::size_t(frames) * n_mels);
  for (int64_t t = 0; t < frames; ++t) {
    std::fill(frame.begin(), frame.end(), 0.0);
    const int64_t start = t * cfg.hop_length - n_fft / 2 + win_offset;
    for (int j = 0; j < cfg.win_length; ++j) {
      const int64_t s = start + j;
      if (s >= 0 && s < len) frame[win_offset + j] = y[s] * window[j];
    }
    fft.run(frame.data(), spectrum.data());
    for (int k = 0; k < bins; ++k) {
      const double re = spectrum[2 * k], im = spectrum[2 * k + 1];
      power[k] = re * re + im * im;
    }
    double* row = out.data() + t * n_mels;
    for (int m = 0; m < n_mels; ++m) {
      const double* f = fb.data() + int64_t(m) * bins;
      double mel = 0.0;
      for (int k = lo[m]; k < hi[m]; ++k) mel += f[k] * power[k];
      // Finite float samples cannot overflow this in double (power < 1e84); only a config whose
      // triangles are absurdly narrow (weights 2/(right − left) near DBL_MAX) could: refuse it
      // rather than emit inf/NaN.
      LFM_CHECK(std::isfinite(mel), "audio front end: mel energy of frame ", t, " bin ", m,
                " is not finite (mel weights too large)");
      row[m] = std::log(mel + cfg.log_guard);
    }
  }
  return out;
}

}  // namespace

void validate(const LogMelConfig& cfg) {
  LFM_CHECK(cfg.sample_rate > 0, "audio front end: sample_rate ", cfg.sample_rate, " must be positive");
  LFM_CHECK(cfg.n_fft >= 2 && cfg.n_fft % 2 == 0 && cfg.n_fft <= (1 << 16), "audio front end: n_fft ", cfg.n_fft,
            " must be even and in [2, 65536]");
  LFM_CHECK(cfg.win_length >= 2 && cfg.win_length <= cfg.n_fft, "audio front end: win_length ", cfg.win_length,
            " must be in [2, n_fft = ", cfg.n_fft, "]");
  LFM_CHECK(cfg.hop_length > 0, "audio front end: hop_length ", cfg.hop_length, " must be positive");
  LFM_CHECK(std::isfinite(cfg.preemphasis), "audio front end: preemphasis ", cfg.preemphasis, " is not finite");
  LFM_CHECK(cfg.num_mel_bins > 0 && cfg.num_mel_bins <= 4096, "audio front end: num_mel_bins ", cfg.num_mel_bins,
            " must be in [1, 4096]");
  LFM_CHECK(std::isfinite(cfg.fmin) && cfg.fmin >= 0, "audio front end: fmin ", cfg.fmin, " must be ≥ 0");
  LFM_CHECK(std::isfinite(cfg.fmax) && cfg.fmax > cfg.fmin && cfg.fmax <= cfg.sample_rate / 2.0,
            "audio front end: fmax ", cfg.fmax, " must be in (fmin = ", cfg.fmin, ", sample_rate / 2 = ",
            cfg.sample_rate / 2.0, "]");
  LFM_CHECK(std::isfinite(cfg.log_guard) && cfg.log_guard > 0, "audio front end: log_guard ", cfg.log_guard,
            " must be positive");
  LFM_CHECK(std::isfinite(cfg.std_eps) && cfg.std_eps > 0, "audio front end: std_eps ", cfg.std_eps,
            " must be positive");
}

int64_t log_mel_frames(int64_t num_samples, const LogMelConfig& cfg) {
  LFM_CHECK(num_samples >= 0, "audio front end: negative sample count ", num_samples);
  LFM_CHECK(cfg.hop_length > 0, "audio front end: hop_length ", cfg.hop_length, " must be positive");
  return num_samples / cfg.hop_length + 1;
}

int64_t audio_tokens_for_frames(int64_t frames) {
  LFM_CHECK(frames >= 0, "audio front end: negative frame count ", frames);
  return (frames + 7) / 8;
}

std::vector<float> hann_window_symmetric(int win_length) {
  const std::vector<double> w = hann_window_double(win_length);
  return std::vector<float>(w.begin(), w.end());
}

std::vector<float> mel_filter_bank(const LogMelConfig& cfg) {
  validate(cfg);
  const std::vector<double> fb = mel_filter_bank_double(cfg);
  return std::vector<float>(fb.begin(), fb.end());
}

LogMel log_mel_unnormalised(std::span<const float> samples, const LogMelConfig& cfg, std::size_t max_samples) {
  check_samples(samples, cfg, max_samples);
  const int64_t frames = log_mel_frames(int64_t(samples.size()), cfg);
  const std::vector<double> lm = log_mel_double(samples, cfg, frames);
  return LogMel{frames, cfg.num_mel_bins, std::vector<float>(lm.begin(), lm.end())};
}

LogMel compute_log_mel(std::span<const float> samples, const LogMelConfig& cfg, std::size_t max_samples) {
  check_samples(samples, cfg, max_samples);
  const int64_t frames = log_mel_frames(int64_t(samples.size()), cfg);
  const int n_mels = cfg.num_mel_bins;
  const std::vector<double> lm = log_mel_double(samples, cfg, frames);

  // Statistics over the first n = floor(L / hop) = T − 1 frames (the terminal centred frame is
  // left out, as in HF); n ≥ 2 by check_samples.
  const int64_t n = int64_t(samples.size()) / cfg.hop_length;
  std::vector<double> mean(n_mels, 0.0), scale(n_mels, 0.0);
  for (int64_t t = 0; t < n; ++t)
    for (int m = 0; m < n_mels; ++m) mean[m] += lm[std::size_t(t) * n_mels + m];
  for (int m = 0; m < n_mels; ++m) mean[m] /= double(n);
  std::vector<double> sq(n_mels, 0.0);
  for (int64_t t = 0; t < n; ++t)
    for (int m = 0; m < n_mels; ++m) {
      const double d = lm[std::size_t(t) * n_mels + m] - mean[m];
      sq[m] += d * d;
    }
  for (int m = 0; m < n_mels; ++m) scale[m] = 1.0 / (std::sqrt(sq[m] / double(n - 1)) + cfg.std_eps);

  LogMel out{frames, n_mels, std::vector<float>(std::size_t(frames) * n_mels, 0.0f)};
  for (int64_t t = 0; t < n; ++t)
    for (int m = 0; m < n_mels; ++m) {
      const std::size_t i = std::size_t(t) * n_mels + m;
      out.values[i] = float((lm[i] - mean[m]) * scale[m]);
    }
  // Frames n..T−1 (just the terminal one) stay exactly 0.
  return out;
}

}  // namespace lfm::audio
