#include "audio/istft.h"

#include <cmath>
#include <complex>

#include <unsupported/Eigen/FFT>

#include "core/error.h"

namespace lfm {

// Eigen's FFT module in double (as log_mel.cpp): its real inverse of a half spectrum reads the
// real parts of the DC and Nyquist bins only and scales by 1 / n (torch's norm="backward").
struct InverseStft::Fft {
  Eigen::FFT<double> fft;
  std::vector<std::complex<double>> spectrum = std::vector<std::complex<double>>(kBins);
  std::vector<double> time = std::vector<double>(kFft);
  Fft() { fft.SetFlag(Eigen::FFT<double>::HalfSpectrum); }
};

InverseStft::InverseStft(std::span<const float> window) : fft_(std::make_unique<Fft>()) {
  LFM_CHECK(static_cast<int64_t>(window.size()) == kFft, "istft: the window has ", window.size(), " taps, expected ",
            kFft);
  window_.assign(window.begin(), window.end());
}

InverseStft::~InverseStft() = default;
InverseStft::InverseStft(InverseStft&&) noexcept = default;
InverseStft& InverseStft::operator=(InverseStft&&) noexcept = default;

void InverseStft::emit(int64_t end, std::vector<float>& out) {
  const int64_t n = end - base_;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t u = base_ + i;
    if (u < kPad) continue;  // the leading "same" padding
    const double env = env_[static_cast<size_t>(i)];
    LFM_CHECK(env > 1e-11, "istft: the window envelope at sample ", u - kPad, " is ", env,
              " (the window does not overlap-add to a positive sum)");
    out.push_back(static_cast<float>(acc_[static_cast<size_t>(i)] / env));
  }
  acc_.erase(acc_.begin(), acc_.begin() + n);
  env_.erase(env_.begin(), env_.begin() + n);
  base_ = end;
}

void InverseStft::push(const float* rows, int64_t n, std::vector<float>& out) {
  LFM_CHECK(!finished_, "istft: frames pushed after finish");
  Fft& f = *fft_;
  for (int64_t r = 0; r < n; ++r) {
    const float* m = rows + r * 2 * kBins;  // log-magnitude, then phase
    for (int64_t b = 0; b < kBins; ++b)
      f.spectrum[static_cast<size_t>(b)] = std::polar(std::exp(static_cast<double>(m[b])), static_cast<double>(m[kBins + b]));
    f.fft.inv(f.time.data(), f.spectrum.data(), kFft);
    // Frame k covers uncropped samples [k · hop, k · hop + n_fft).
    const int64_t u0 = frames_ * kHop - base_;
    if (static_cast<int64_t>(acc_.size()) < u0 + kFft) {
      acc_.resize(static_cast<size_t>(u0 + kFft), 0.0);
      env_.resize(static_cast<size_t>(u0 + kFft), 0.0);
    }
    for (int64_t j = 0; j < kFft; ++j) {
      const double w = window_[static_cast<size_t>(j)];
      acc_[static_cast<size_t>(u0 + j)] += f.time[static_cast<size_t>(j)] * w;
      env_[static_cast<size_t>(u0 + j)] += w * w;
    }
    ++frames_;
  }
  emit(frames_ * kHop, out);  // no later frame starts before frames_ · hop
}

void InverseStft::finish(std::vector<float>& out) {
  LFM_CHECK(!finished_, "istft: finish called twice");
  finished_ = true;
  if (frames_ == 0) return;
  emit((frames_ - 1) * kHop + kFft - kPad, out);  // the trailing padding dropped
}

}  // namespace lfm
