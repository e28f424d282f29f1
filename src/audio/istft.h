// The inverse STFT of LFM2.5-Audio's detokenizer (transformers' Lfm2AudioInverseShortTimeFourierTransform),
// streamed: each STFT frame is a row [log-magnitude (641) | phase (641)] of the detokenizer's
// output; its spectrum exp(m)·e^{iφ} goes through an inverse real FFT (n 1280, the imaginary
// parts of the DC and Nyquist bins ignored, as torch.fft.irfft), is multiplied by the window
// (1280 taps) and overlap-added with hop 320; the sum is divided by the overlap-added squared
// window, and (win − hop) / 2 = 480 samples are cropped at each end ("same" padding). So F frames
// give F · 320 samples.
//
// Everything from the float32 rows on is computed in double, and each output sample is
// Σ_k frame_k / Σ_k window² over the frames k that cover it, summed in frame order: the same
// bits however the frames are split between push calls. A sample is final (and handed out) as
// soon as no later frame can reach it: after F frames, every sample before uncropped position
// F · 320; finish() hands out the last 480, which only the end of the stream makes final.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

namespace lfm {

class InverseStft {
 public:
  static constexpr int64_t kFft = 1280, kHop = 320, kBins = kFft / 2 + 1, kPad = (kFft - kHop) / 2;

  // window [kFft]: the detokenizer's istft.window (torch.hann_window(1280), periodic).
  explicit InverseStft(std::span<const float> window);
  ~InverseStft();
  InverseStft(InverseStft&&) noexcept;
  InverseStft& operator=(InverseStft&&) noexcept;

  // Adds n frames (rows [n, 2 · kBins]: log-magnitude | phase) and appends the samples that are
  // final now to `out`. Throws lfm::Error after finish() or where the window envelope vanishes.
  void push(const float* rows, int64_t n, std::vector<float>& out);
  // Appends the remaining samples (none before any frame); push is refused afterwards.
  void finish(std::vector<float>& out);
  int64_t frames() const { return frames_; }

 private:
  void emit(int64_t end, std::vector<float>& out);  // uncropped samples [base_, end) out, dropped

  struct Fft;
  std::unique_ptr<Fft> fft_;     // Eigen's FFT, hidden from includers (only src/audio/ sees Eigen)
  std::vector<double> window_;   // [kFft]
  std::vector<double> acc_, env_;  // uncropped samples [base_, base_ + size): Σ frames, Σ window²
  int64_t base_ = 0, frames_ = 0;
  bool finished_ = false;
};

}  // namespace lfm
