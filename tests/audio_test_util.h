// Helpers for the audio decoding tests: files written by libsndfile in memory, a WAV writer of
// our own (for headers that lie), and the measures of a tone (DFT bin, zero crossings, RMS).
#pragma once

#include <gtest/gtest.h>
#include <sndfile.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numbers>
#include <string>
#include <vector>

#include "core/error.h"

namespace lfm::test {

using Bytes = std::vector<uint8_t>;

// ---- writing test files with libsndfile, in memory ----------------------------------------------

struct Sink {
  Bytes data;
  sf_count_t pos = 0;
};

inline sf_count_t sink_length(void* u) { return sf_count_t(static_cast<Sink*>(u)->data.size()); }
inline sf_count_t sink_seek(sf_count_t off, int whence, void* u) {
  auto* s = static_cast<Sink*>(u);
  const sf_count_t base = whence == SEEK_SET ? 0 : whence == SEEK_CUR ? s->pos : sf_count_t(s->data.size());
  if (base + off < 0) return -1;
  s->pos = base + off;
  return s->pos;
}
inline sf_count_t sink_read(void* dst, sf_count_t n, void* u) {
  auto* s = static_cast<Sink*>(u);
  const sf_count_t size = sf_count_t(s->data.size());
  if (s->pos >= size) return 0;
  n = std::min(n, size - s->pos);
  std::memcpy(dst, s->data.data() + s->pos, size_t(n));
  s->pos += n;
  return n;
}
inline sf_count_t sink_write(const void* src, sf_count_t n, void* u) {
  auto* s = static_cast<Sink*>(u);
  if (n <= 0) return 0;
  if (size_t(s->pos + n) > s->data.size()) s->data.resize(size_t(s->pos + n));
  std::memcpy(s->data.data() + s->pos, src, size_t(n));
  s->pos += n;
  return n;
}
inline sf_count_t sink_tell(void* u) { return static_cast<Sink*>(u)->pos; }

// Whether this libsndfile can write `format` at `rate` (the MPEG and Opus encoders are optional).
inline bool can_write(int format, int channels, int rate) {
  SF_INFO info{};
  info.samplerate = rate;
  info.channels = channels;
  info.format = format;
  return sf_format_check(&info) != 0;
}

// `interleaved` [frames, channels] encoded as `format` by libsndfile.
inline Bytes encode(const std::vector<float>& interleaved, int channels, int rate, int format) {
  SF_INFO info{};
  info.samplerate = rate;
  info.channels = channels;
  info.format = format;
  Sink sink;
  SF_VIRTUAL_IO vio{sink_length, sink_seek, sink_read, sink_write, sink_tell};
  SNDFILE* f = sf_open_virtual(&vio, SFM_WRITE, &info, &sink);
  if (!f) ADD_FAILURE() << "libsndfile cannot write format 0x" << std::hex << format << ": " << sf_strerror(nullptr);
  if (!f) return {};
  const sf_count_t frames = sf_count_t(interleaved.size() / size_t(channels));
  EXPECT_EQ(sf_writef_float(f, interleaved.data(), frames), frames) << sf_strerror(f);
  sf_close(f);
  return std::move(sink.data);
}

inline std::vector<float> sine(int rate, double seconds, double hz, double amplitude = 0.5, double phase = 0) {
  std::vector<float> x(size_t(std::lround(seconds * rate)));
  for (size_t i = 0; i < x.size(); ++i) x[i] = float(amplitude * std::sin(2 * std::numbers::pi * hz * double(i) / rate + phase));
  return x;
}

// Amplitude of the `hz` component over x[from, to): 2/N·|Σ x·e^{-iωn}|.
inline double tone_amplitude(const std::vector<float>& x, int rate, double hz, size_t from = 0, size_t to = SIZE_MAX) {
  to = std::min(to, x.size());
  double re = 0, im = 0;
  for (size_t i = from; i < to; ++i) {
    const double w = 2 * std::numbers::pi * hz * double(i) / rate;
    re += x[i] * std::cos(w);
    im -= x[i] * std::sin(w);
  }
  return 2 * std::hypot(re, im) / double(to - from);
}

// The frequency, in 5 Hz steps over 100..4000 Hz, with the largest amplitude.
inline double dominant_hz(const std::vector<float>& x, int rate) {
  double best = 0, best_hz = 0;
  for (double hz = 100; hz <= 4000; hz += 5) {
    const double a = tone_amplitude(x, rate, hz);
    if (a > best) best = a, best_hz = hz;
  }
  return best_hz;
}

// Frequency from the sign changes over x[from, to).
inline double zero_crossing_hz(const std::vector<float>& x, int rate, size_t from, size_t to) {
  int crossings = 0;
  size_t first = 0, last = 0;
  for (size_t i = from + 1; i < to; ++i) {
    if ((x[i - 1] < 0) != (x[i] < 0)) {
      if (crossings == 0) first = i;
      last = i;
      ++crossings;
    }
  }
  return crossings < 2 ? 0 : (crossings - 1) / 2.0 / (double(last - first) / rate);
}

inline double rms(const std::vector<float>& x, size_t from = 0, size_t to = SIZE_MAX) {
  to = std::min(to, x.size());
  double s = 0;
  for (size_t i = from; i < to; ++i) s += double(x[i]) * x[i];
  return std::sqrt(s / double(to - from));
}

// The message of the lfm::Error `f` throws ("" and a failure when it throws none).
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "no lfm::Error thrown";
  return "";
}

#define AUDIO_EXPECT_HAS(text, part) EXPECT_NE(std::string(text).find(part), std::string::npos) << (text)

// A canonical 44-byte-header WAV of our own: PCM int16 or IEEE float32 (format tag 3). The sizes
// in the header can be overridden to make it lie (data_bytes: the data chunk's declared size).
template <typename T>
Bytes wav_file(const std::vector<T>& interleaved, int channels, int rate, int64_t data_bytes = -1) {
  static_assert(std::is_same_v<T, int16_t> || std::is_same_v<T, float>);
  const uint32_t payload = uint32_t(interleaved.size() * sizeof(T));
  const uint32_t declared = data_bytes < 0 ? payload : uint32_t(data_bytes);
  Bytes b;
  auto put = [&](uint64_t v, int n) {
    for (int i = 0; i < n; ++i) b.push_back(uint8_t(v >> (8 * i)));
  };
  auto tag = [&](const char* t) { b.insert(b.end(), t, t + 4); };
  tag("RIFF");
  put(36 + uint64_t(declared), 4);
  tag("WAVE");
  tag("fmt ");
  put(16, 4);
  put(std::is_same_v<T, float> ? 3 : 1, 2);
  put(uint32_t(channels), 2);
  put(uint32_t(rate), 4);
  put(uint64_t(rate) * uint32_t(channels) * sizeof(T), 4);
  put(uint32_t(channels) * sizeof(T), 2);
  put(8 * sizeof(T), 2);
  tag("data");
  put(declared, 4);
  const size_t at = b.size();
  b.resize(at + payload);
  if (payload > 0) std::memcpy(b.data() + at, interleaved.data(), payload);
  return b;
}

}  // namespace lfm::test
