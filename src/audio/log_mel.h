// The LFM2(.5)-Audio speech front end: transformers' Lfm2AudioFeatureExtractor on one mono clip
// (docs/design/audio_input_research.md §2; reference values in tests/data/audio/frontend).
// Per clip of L float32 samples at 16 kHz (no resampling, no dither):
//   1. pre-emphasis y[0] = x[0], y[i] = x[i] − 0.97·x[i−1]
//   2. STFT as torch.stft(n_fft 512, hop 160, win 400, center=True, pad_mode="constant"): frame t
//      (t = 0..T−1, T = floor(L/160) + 1) is y[160t − 200 + n]·w[n], n = 0..399 (0 outside [0, L)),
//      with the symmetric Hann window w[n] = 0.5 − 0.5·cos(2πn/399), zero-padded to 512 centred
//   3. power |X_k|², k = 0..256; mel = Fb·P with Fb the librosa Slaney filter bank [128, 257]
//   4. ln(mel + 2^-24)
//   5. per mel bin, over the first n = floor(L/160) frames only: (x − mean) / (std_unbiased + 1e-5);
//      frames ≥ n (the terminal centred frame) are then exactly 0 — and still part of the output,
//      since the encoder consumes all T frames.
// Output: features [T, 128] time-major float32; the encoder turns T frames into N = (T + 7) / 8
// audio tokens. Everything after the float32 samples is computed in double (the window, the mel
// matrix and the pre-emphasis with the float32 coefficient 0.97f torch applies; the FFT is Eigen's
// FFT module in double) and rounded to float32 only at the output, so the result is the exact
// (float64) value of the algorithm to within that rounding: tested at 1e-6 against a float64 NumPy
// restatement (tests/data/audio/frontend/features_f64) and at 1e-3 against transformers' float32
// features, which carry torch's float32 rounding (tests/audio_log_mel_test.cpp).
// Thread-safe: each call makes its own FFT object (nothing shared between calls).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace lfm::audio {

// Constants of the extractor (preprocessor_config.json of LFM2-Audio / LFM2.5-Audio and the
// extractor's defaults; tests/data/audio/frontend/reference.json "constants").
struct LogMelConfig {
  int sample_rate = 16000;
  int n_fft = 512;           // FFT size; n_fft / 2 + 1 = 257 frequency bins
  int win_length = 400;      // symmetric Hann, zero-padded to n_fft, centred
  int hop_length = 160;
  float preemphasis = 0.97f;
  int num_mel_bins = 128;
  double fmin = 0.0;         // Slaney mel filter bank edges, Hz
  double fmax = 8000.0;      // = sample_rate / 2 (librosa's default)
  double log_guard = 5.960464477539063e-08;  // 2^-24, added before the log
  double std_eps = 1e-5;                      // added to the unbiased std
};

// Above this many samples compute_log_mel refuses (the caller's budget may be lower):
// 30 minutes at 16 kHz = 180 001 frames, 92 MB of features.
inline constexpr std::size_t kLogMelDefaultMaxSamples = std::size_t(16000) * 60 * 30;

// Throws lfm::Error naming the field when a config cannot describe a front end (sizes not
// positive, win_length > n_fft, odd n_fft, fmax above Nyquist or ≤ fmin, guard/eps not positive).
void validate(const LogMelConfig& cfg);

// Frames T = floor(L / hop) + 1 of a clip of L samples (torch.stft center=True, even n_fft).
int64_t log_mel_frames(int64_t num_samples, const LogMelConfig& cfg = {});
// Audio tokens N = (T + 7) / 8 the encoder's ×8 subsampling makes of T frames (= placeholders).
int64_t audio_tokens_for_frames(int64_t frames);

// The symmetric Hann window 0.5 − 0.5·cos(2πn/(win_length − 1)) (torch.hann_window(win_length,
// periodic=False)), computed in double and rounded to float32: [win_length]. The front end itself
// uses the double values (torch's own float32 window differs by up to 1.9e-7 per tap).
std::vector<float> hann_window_symmetric(int win_length);

// librosa.filters.mel(sr, n_fft, n_mels, fmin, fmax, htk=False, norm="slaney"), computed in double
// and rounded to float32: [num_mel_bins, n_fft / 2 + 1] row-major (Slaney mel scale, triangles in
// Hz, area-normalised). The front end itself uses the double matrix (the exact reference does too;
// librosa's float32 matrix, which transformers uses, moves the features by ≤ 1.2e-7).
std::vector<float> mel_filter_bank(const LogMelConfig& cfg = {});

struct LogMel {
  int64_t frames = 0;         // T
  int num_mel_bins = 0;       // 128
  std::vector<float> values;  // [T, num_mel_bins] time-major
};

// ln(Fb·|STFT(pre-emphasised x)|² + guard) before normalisation: [T, 128]. For checking the
// stages one by one; compute_log_mel is what the encoder takes.
LogMel log_mel_unnormalised(std::span<const float> samples, const LogMelConfig& cfg = {},
                            std::size_t max_samples = kLogMelDefaultMaxSamples);

// The normalised features [T, 128] of one clip (steps 1–5 above). Refuses (lfm::Error naming
// "audio front end" and the value) an invalid config, fewer than 2·hop samples (HF's shortest
// clip: the unbiased std needs 2 frames), more than max_samples samples, or a non-finite sample.
LogMel compute_log_mel(std::span<const float> samples, const LogMelConfig& cfg = {},
                       std::size_t max_samples = kLogMelDefaultMaxSamples);

}  // namespace lfm::audio
