// audio/audio_decode: files written here by libsndfile's own encoders (WAV 16/24/32/float, FLAC,
// Ogg Vorbis, Ogg Opus, MP3) decoded back, resampled by soxr, mixed down, and every limit refused.
// Lossless formats are compared sample by sample to one quantisation step; lossy ones by the tone
// they carry (the dominant frequency and the RMS). Resampling is checked on a sine: the length
// round(L·16000/rate), the frequency (zero crossings) and the amplitude (a DFT bin).
#include <gtest/gtest.h>
#include <sndfile.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <numbers>
#include <string>
#include <vector>

#include "audio/audio_decode.h"
#include "core/error.h"
#include "audio_test_util.h"
#include "test_util.h"

namespace lfm::audio {
namespace {

using test::Bytes;
using test::can_write;
using test::encode;
using test::error_of;
using test::sine;
using test::tone_amplitude;
using test::dominant_hz;
using test::zero_crossing_hz;
using test::rms;
using test::wav_file;

// ---- lossless formats ---------------------------------------------------------------------------

struct Lossless {
  const char* name;
  int format;
  double step;  // one quantisation step of the stored samples
  const char* format_name;
};

class AudioDecodeLossless : public ::testing::TestWithParam<Lossless> {};

TEST_P(AudioDecodeLossless, DecodesToTheQuantisationStep) {
  const Lossless& p = GetParam();
  const std::vector<float> x = sine(16000, 0.25, 440, 0.7);
  const Bytes file = encode(x, 1, 16000, p.format);
  const DecodedAudio a = decode_audio(file);
  EXPECT_EQ(a.format, p.format_name);
  EXPECT_EQ(a.sample_rate, 16000);
  EXPECT_EQ(a.source_rate, 16000);
  EXPECT_EQ(a.source_channels, 1);
  EXPECT_EQ(a.source_frames, int64_t(x.size()));
  EXPECT_DOUBLE_EQ(a.duration_s, 0.25);
  ASSERT_EQ(a.samples.size(), x.size());
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i) worst = std::max(worst, std::abs(double(a.samples[i]) - x[i]));
  // libsndfile's writer scales by 2^(bits-1) − 1 and rounds, its reader divides by 2^(bits-1): a
  // round trip is off by half a step of rounding plus |x| (< 1) steps of scale; float32 rounding
  // of the result adds at most an ulp of 0.7 (6e-8).
  EXPECT_LE(worst, 1.5 * p.step + 1e-7) << p.name;
  if (p.step == 0) {
    EXPECT_EQ(a.samples, x) << "float WAV at the target rate must pass through bit for bit";
  }
}

INSTANTIATE_TEST_SUITE_P(
    Formats, AudioDecodeLossless,
    ::testing::Values(Lossless{"wav16", SF_FORMAT_WAV | SF_FORMAT_PCM_16, 1.0 / 32768, "WAV/PCM_16"},
                      Lossless{"wav24", SF_FORMAT_WAV | SF_FORMAT_PCM_24, 1.0 / 8388608, "WAV/PCM_24"},
                      Lossless{"wav32", SF_FORMAT_WAV | SF_FORMAT_PCM_32, 1.0 / 2147483648.0, "WAV/PCM_32"},
                      Lossless{"wavfloat", SF_FORMAT_WAV | SF_FORMAT_FLOAT, 0.0, "WAV/float32"},
                      Lossless{"flac16", SF_FORMAT_FLAC | SF_FORMAT_PCM_16, 1.0 / 32768, "FLAC/PCM_16"},
                      Lossless{"flac24", SF_FORMAT_FLAC | SF_FORMAT_PCM_24, 1.0 / 8388608, "FLAC/PCM_24"},
                      Lossless{"aiff16", SF_FORMAT_AIFF | SF_FORMAT_PCM_16, 1.0 / 32768, "AIFF/PCM_16"}),
    [](const auto& info) { return std::string(info.param.name); });

// ---- lossy formats ------------------------------------------------------------------------------

struct Lossy {
  const char* name;
  int format;
  int rate;
  const char* format_name;
};

class AudioDecodeLossy : public ::testing::TestWithParam<Lossy> {};

TEST_P(AudioDecodeLossy, KeepsTheTone) {
  const Lossy& p = GetParam();
  if (!can_write(p.format, 1, p.rate)) GTEST_SKIP() << "this libsndfile has no " << p.name << " encoder";
  const std::vector<float> x = sine(p.rate, 1.0, 440, 0.5);
  const Bytes file = encode(x, 1, p.rate, p.format);
  ASSERT_FALSE(file.empty());
  const DecodedAudio a = decode_audio(file);
  EXPECT_EQ(a.format, p.format_name);
  EXPECT_EQ(a.source_rate, p.rate);
  EXPECT_EQ(a.sample_rate, 16000);
  // Encoders add priming/padding; the clip keeps its length to within a tenth of a second.
  EXPECT_NEAR(double(a.samples.size()), 16000.0, 1600.0) << p.name;
  EXPECT_NEAR(a.duration_s, 1.0, 0.1);
  EXPECT_EQ(dominant_hz(a.samples, 16000), 440.0) << p.name;
  // RMS of the steady part (the codecs' onsets differ) within 10 % of 0.5/√2.
  EXPECT_NEAR(rms(a.samples, 2000, 14000), 0.5 / std::sqrt(2.0), 0.1 * 0.5 / std::sqrt(2.0)) << p.name;
}

INSTANTIATE_TEST_SUITE_P(Formats, AudioDecodeLossy,
                         ::testing::Values(Lossy{"vorbis16k", SF_FORMAT_OGG | SF_FORMAT_VORBIS, 16000, "OGG/Vorbis"},
                                           Lossy{"vorbis44k", SF_FORMAT_OGG | SF_FORMAT_VORBIS, 44100, "OGG/Vorbis"},
                                           Lossy{"opus48k", SF_FORMAT_OGG | SF_FORMAT_OPUS, 48000, "OGG/Opus"},
                                           Lossy{"opus16k", SF_FORMAT_OGG | SF_FORMAT_OPUS, 16000, "OGG/Opus"},
                                           Lossy{"mp3_16k", SF_FORMAT_MPEG | SF_FORMAT_MPEG_LAYER_III, 16000, "MP3"},
                                           Lossy{"mp3_44k", SF_FORMAT_MPEG | SF_FORMAT_MPEG_LAYER_III, 44100, "MP3"}),
                         [](const auto& info) { return std::string(info.param.name); });

// The files of tests/data/audio/files (made by make_files.py there with libsndfile 1.2.0; the fuzz
// seeds): the MP3 keeps MP3 decoding tested where this libsndfile has no MPEG encoder.
TEST(AudioDecode, CommittedFiles) {
  struct File {
    const char* name;
    const char* format;
    int rate, channels;
    double seconds;
  };
  for (const File& f : {File{"tone440_16k.mp3", "MP3", 16000, 1, 0.5}, File{"tone440_16k_pcm16.wav", "WAV/PCM_16", 16000, 1, 0.05},
                        File{"tone_8k_stereo_float.wav", "WAV/float32", 8000, 2, 0.03},
                        File{"tone440_22k_pcm24.aiff", "AIFF/PCM_24", 22050, 1, 0.03},
                        File{"tone440_16k.flac", "FLAC/PCM_16", 16000, 1, 0.1},
                        File{"tone440_16k_vorbis.ogg", "OGG/Vorbis", 16000, 1, 0.1},
                        File{"tone_48k_stereo.opus", "OGG/Opus", 48000, 2, 0.1}}) {
    const DecodedAudio a = load_audio_file(test::data_dir() + "/audio/files/" + f.name);
    EXPECT_EQ(a.format, f.format) << f.name;
    EXPECT_EQ(a.source_rate, f.rate) << f.name;
    EXPECT_EQ(a.source_channels, f.channels) << f.name;
    EXPECT_NEAR(a.duration_s, f.seconds, 0.06) << f.name;
    EXPECT_NEAR(double(a.samples.size()), 16000 * a.duration_s, 2.0) << f.name;
  }
  const DecodedAudio mp3 = load_audio_file(test::data_dir() + "/audio/files/tone440_16k.mp3");
  EXPECT_EQ(dominant_hz(mp3.samples, 16000), 440.0);
  EXPECT_NEAR(rms(mp3.samples, 1000, mp3.samples.size() - 1000), 0.5 / std::sqrt(2.0), 0.1 * 0.5 / std::sqrt(2.0));
}

// ---- down-mix, resampling, raw PCM --------------------------------------------------------------

TEST(AudioDecode, StereoAndMultichannelMixDownToTheMean) {
  for (int channels : {2, 3, 6}) {
    std::vector<std::vector<float>> ch;
    for (int c = 0; c < channels; ++c) ch.push_back(sine(16000, 0.1, 300 + 200 * c, 0.3, c));
    std::vector<float> interleaved;
    for (size_t i = 0; i < ch[0].size(); ++i)
      for (int c = 0; c < channels; ++c) interleaved.push_back(ch[size_t(c)][i]);
    const DecodedAudio a = decode_audio(encode(interleaved, channels, 16000, SF_FORMAT_WAV | SF_FORMAT_FLOAT));
    EXPECT_EQ(a.source_channels, channels);
    ASSERT_EQ(a.samples.size(), ch[0].size());
    for (size_t i = 0; i < a.samples.size(); ++i) {
      double sum = 0;
      for (int c = 0; c < channels; ++c) sum += ch[size_t(c)][i];
      ASSERT_EQ(a.samples[i], float(sum / channels)) << channels << " channels, frame " << i;
    }
    // The raw path mixes the same way.
    EXPECT_EQ(decode_pcm_f32(interleaved, channels, 16000).samples, a.samples);
  }
}

TEST(AudioDecode, ResamplingKeepsFrequencyAmplitudeAndLength) {
  for (int rate : {44100, 8000, 48000, 22050}) {
    const std::vector<float> x = sine(rate, 1.5, 1000, 0.5);
    const DecodedAudio a = decode_audio(encode(x, 1, rate, SF_FORMAT_WAV | SF_FORMAT_FLOAT));
    EXPECT_EQ(a.source_rate, rate);
    EXPECT_EQ(a.sample_rate, 16000);
    EXPECT_EQ(a.samples.size(), 24000u) << rate;  // round(L · 16000 / rate), exactly
    // Away from the edges (the filter's transients): amplitude to 1 %, frequency to 0.5 Hz.
    const size_t from = 1600, to = a.samples.size() - 1600;
    EXPECT_NEAR(tone_amplitude(a.samples, 16000, 1000, from, to), 0.5, 0.005) << rate;
    EXPECT_NEAR(zero_crossing_hz(a.samples, 16000, from, to), 1000.0, 0.5) << rate;
    EXPECT_LT(tone_amplitude(a.samples, 16000, 1500, from, to), 0.01) << rate;
    // No delay: the resampled sine lines up with one made at 16 kHz.
    const std::vector<float> ref = sine(16000, 1.5, 1000, 0.5);
    double worst = 0;
    for (size_t i = from; i < to; ++i) worst = std::max(worst, std::abs(double(a.samples[i]) - ref[i]));
    EXPECT_LT(worst, 0.01) << rate;
  }
  // A target other than 16 kHz, from the raw path.
  const DecodedAudio b = decode_pcm_f32(sine(16000, 1.0, 500), 1, 16000, 24000);
  EXPECT_EQ(b.sample_rate, 24000);
  EXPECT_EQ(b.samples.size(), 24000u);
  EXPECT_NEAR(tone_amplitude(b.samples, 24000, 500, 2400, 21600), 0.5, 0.005);
}

TEST(AudioDecode, EqualRatesPassThroughBitExact) {
  std::vector<float> x = test::randn(4001, 7, 0.3f);
  x[5] = 1e-38f;  // a denormal-adjacent value survives untouched too
  EXPECT_EQ(decode_pcm_f32(x, 1, 16000).samples, x);
  EXPECT_EQ(decode_pcm_f32(x, 1, 8000, 8000).samples, x);
  EXPECT_EQ(resample_mono(x, 22050, 22050), x);
  EXPECT_EQ(decode_audio(encode(x, 1, 16000, SF_FORMAT_WAV | SF_FORMAT_FLOAT)).samples, x);
}

TEST(AudioDecode, RawInt16) {
  const std::vector<int16_t> s = {0, 1, -1, 32767, -32768, 1000, -1000, 12345};
  const DecodedAudio m = decode_pcm_s16(s, 1, 16000);
  EXPECT_EQ(m.format, "PCM/int16");
  ASSERT_EQ(m.samples.size(), s.size());
  for (size_t i = 0; i < s.size(); ++i) EXPECT_EQ(m.samples[i], float(s[i]) / 32768.0f);
  const DecodedAudio st = decode_pcm_s16(s, 2, 16000);
  ASSERT_EQ(st.samples.size(), 4u);
  EXPECT_EQ(st.samples[1], float((32767.0 / 32768 - 1.0 / 32768) / 2));
  EXPECT_EQ(st.source_frames, 4);
  // The same values as libsndfile's reading of a 16-bit WAV holding them.
  EXPECT_EQ(decode_audio(wav_file(s, 1, 16000)).samples, m.samples);
  // Resampled like any other input.
  std::vector<int16_t> tone;
  for (float v : sine(8000, 1.0, 440)) tone.push_back(int16_t(std::lround(v * 32767)));
  const DecodedAudio r = decode_pcm_s16(tone, 1, 8000);
  EXPECT_NEAR(double(r.samples.size()), 16000.0, 2.0);
  EXPECT_NEAR(tone_amplitude(r.samples, 16000, 440, 1600, 14400), 0.5, 0.005);
}

TEST(AudioDecode, LoadsFiles) {
  test::TempDir dir;
  const std::vector<float> x = sine(16000, 0.2, 440);
  const Bytes flac = encode(x, 1, 16000, SF_FORMAT_FLAC | SF_FORMAT_PCM_24);
  const std::string path = dir.write("a.flac", std::string(flac.begin(), flac.end()));
  const DecodedAudio a = load_audio_file(path);
  EXPECT_EQ(a.samples, decode_audio(flac).samples);
  AudioDecodeLimits small;
  small.max_bytes = int64_t(flac.size()) - 1;
  AUDIO_EXPECT_HAS(error_of([&] { load_audio_file(path, 16000, small); }), "-byte limit");
  AUDIO_EXPECT_HAS(error_of([&] { load_audio_file(dir.str() + "/missing.wav"); }), "missing.wav");
  AUDIO_EXPECT_HAS(error_of([&] { load_audio_file(dir.str()); }), "audio:");
  const std::string junk = dir.write("junk.wav", "RIFF\x10\0\0\0WAVEjunkjunk");
  const std::string e = error_of([&] { load_audio_file(junk); });
  AUDIO_EXPECT_HAS(e, "audio:");
  AUDIO_EXPECT_HAS(e, "junk.wav");
}

}  // namespace
}  // namespace lfm::audio
