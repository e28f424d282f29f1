// audio/audio_encode: every format encoded and read back by the project's own decoder
// (audio::decode_audio) — lossless ones equal to the format's 16-bit quantization (or bit for bit
// for float WAV), lossy ones by SNR (after the codec's delay) and the tone they carry; the
// streamed bytes decode to the whole encode's samples; bad input refused with messages that say
// why.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "audio/audio_decode.h"
#include "audio/audio_encode.h"
#include "audio_test_util.h"

namespace lfm::audio {
namespace {

using test::dominant_hz;
using test::error_of;

constexpr int kRate = 24000;  // LFM2-Audio's output rate

// Two tones with an envelope: a signal whose every sample matters (no periodic shortcut).
std::vector<float> test_signal(size_t n, int rate = kRate) {
  std::vector<float> x(n);
  for (size_t i = 0; i < n; ++i) {
    const double t = double(i) / rate;
    x[i] = float((0.45 * std::sin(2 * M_PI * 440 * t) + 0.2 * std::sin(2 * M_PI * 1234 * t)) *
                 (0.6 + 0.4 * std::sin(2 * M_PI * 1.5 * t)));
  }
  return x;
}

DecodedAudio decode(const std::string& bytes, int rate = kRate) {
  return decode_audio(std::span(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()), rate);
}

// The stream of `x` pushed in slices of `slice` samples (LFM2-Audio's frames are 1920).
std::string streamed(const std::vector<float>& x, AudioFormat f, size_t slice = 1920, int* nonempty = nullptr) {
  AudioStreamEncoder enc(f, kRate);
  std::string out;
  for (size_t at = 0; at < x.size(); at += slice) {
    const std::string b = enc.push(std::span(x).subspan(at, std::min(slice, x.size() - at)));
    if (nonempty && !b.empty()) ++*nonempty;
    out += b;
  }
  out += enc.finish();
  EXPECT_EQ(enc.samples(), int64_t(x.size()));
  EXPECT_EQ(enc.bytes(), int64_t(out.size()));
  return out;
}

// The SNR (dB) of `y` against `x` at the lag in [0, max_lag] that aligns them best, over x's
// samples from `skip` on (a codec's fade-in excluded).
double best_snr(const std::vector<float>& x, const std::vector<float>& y, size_t max_lag, size_t skip, size_t* lag_out) {
  double best = -1e9;
  for (size_t lag = 0; lag <= max_lag; ++lag) {
    if (y.size() < x.size() + lag) break;
    double sig = 0, err = 0;
    for (size_t i = skip; i + 2000 < x.size(); ++i) {
      sig += double(x[i]) * x[i];
      const double d = double(y[i + lag]) - x[i];
      err += d * d;
    }
    const double snr = 10 * std::log10(sig / std::max(err, 1e-30));
    if (snr > best) {
      best = snr;
      if (lag_out) *lag_out = lag;
    }
  }
  return best;
}

// What 16-bit quantization gives back: round(clamp(x)·32767) / 32768.
float s16_round_trip(float x) { return float(std::lrint(std::clamp(x, -1.0f, 1.0f) * 32767.0f)) / 32768.0f; }

// ---- names ----------------------------------------------------------------------------------------

TEST(AudioEncodeFormats, NamesParseAndAacIsRefused) {
  EXPECT_EQ(parse_audio_format("wav"), AudioFormat::kWav);
  EXPECT_EQ(parse_audio_format("WAV"), AudioFormat::kWav);
  EXPECT_EQ(parse_audio_format("wav_float"), AudioFormat::kWavFloat);
  EXPECT_EQ(parse_audio_format("pcm"), AudioFormat::kPcm);
  EXPECT_EQ(parse_audio_format("Flac"), AudioFormat::kFlac);
  EXPECT_EQ(parse_audio_format("opus"), AudioFormat::kOpus);
  EXPECT_EQ(parse_audio_format("ogg"), AudioFormat::kVorbis);
  EXPECT_EQ(parse_audio_format("vorbis"), AudioFormat::kVorbis);
  EXPECT_EQ(parse_audio_format("mp3"), AudioFormat::kMp3);
  const std::string aac = error_of([] { parse_audio_format("aac"); });
  EXPECT_NE(aac.find("aac is not supported"), std::string::npos) << aac;
  EXPECT_NE(aac.find("flac"), std::string::npos) << aac;  // lists what works
  const std::string bad = error_of([] { parse_audio_format("m4a"); });
  EXPECT_NE(bad.find("unknown format 'm4a'"), std::string::npos) << bad;
  for (AudioFormat f : writable_audio_formats()) EXPECT_EQ(parse_audio_format(audio_format_name(f)), f);
  EXPECT_STREQ(audio_content_type(AudioFormat::kMp3), "audio/mpeg");
  EXPECT_STREQ(audio_content_type(AudioFormat::kWav), "audio/wav");
  EXPECT_STREQ(audio_file_extension(AudioFormat::kVorbis), "ogg");
}

TEST(AudioEncodeFormats, WritableFormatsFollowLibsndfile) {
  const auto fs = writable_audio_formats();
  ASSERT_GE(fs.size(), 6u);  // wav, wav_float, pcm, flac, opus, vorbis always
  EXPECT_EQ(audio_format_writable(AudioFormat::kMp3), test::can_write(SF_FORMAT_MPEG | SF_FORMAT_MPEG_LAYER_III, 1, kRate));
  if (!audio_format_writable(AudioFormat::kMp3)) {
    const std::string e = error_of([] { encode_audio(std::vector<float>(100), kRate, AudioFormat::kMp3); });
    EXPECT_NE(e.find("mp3"), std::string::npos) << e;
    EXPECT_NE(e.find("libsndfile"), std::string::npos) << e;
  }
}

// ---- lossless -------------------------------------------------------------------------------------

TEST(AudioEncodeLossless, WavPcm16RoundTripsToTheQuantizedSamples) {
  std::vector<float> x = test_signal(kRate / 2);
  x[10] = 1.0f;  // full scale and past it: clamped
  x[11] = -1.0f;
  x[12] = 3.5f;
  x[13] = -7.0f;
  const std::string wav = encode_audio(x, kRate, AudioFormat::kWav);
  ASSERT_EQ(wav.size(), 44 + 2 * x.size());
  EXPECT_EQ(wav.substr(0, 4), "RIFF");
  uint32_t data_size = 0;
  std::memcpy(&data_size, wav.data() + 40, 4);
  EXPECT_EQ(data_size, 2 * x.size());
  const DecodedAudio d = decode(wav);
  EXPECT_EQ(d.format, "WAV/PCM_16");
  EXPECT_EQ(d.source_rate, kRate);
  ASSERT_EQ(d.samples.size(), x.size());
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(d.samples[i], s16_round_trip(x[i])) << "sample " << i;
  EXPECT_EQ(d.samples[12], 32767.0f / 32768.0f);
  EXPECT_EQ(d.samples[13], -32767.0f / 32768.0f);
}

TEST(AudioEncodeLossless, WavFloatRoundTripsBitForBit) {
  std::vector<float> x = test_signal(kRate / 3);
  x[5] = 2.0f;  // clamped to 1 in every format
  const DecodedAudio d = decode(encode_audio(x, kRate, AudioFormat::kWavFloat));
  EXPECT_EQ(d.format, "WAV/float32");
  ASSERT_EQ(d.samples.size(), x.size());
  x[5] = 1.0f;
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(d.samples[i], x[i]) << "sample " << i;
}

TEST(AudioEncodeLossless, PcmIsRawLittleEndianInt16) {
  const std::vector<float> x = {0.0f, 0.5f, -0.5f, 1.0f, -1.0f, 0.25f};
  const std::string pcm = encode_audio(x, kRate, AudioFormat::kPcm);
  ASSERT_EQ(pcm.size(), 2 * x.size());
  std::vector<int16_t> v(x.size());
  std::memcpy(v.data(), pcm.data(), pcm.size());
  EXPECT_EQ(v, (std::vector<int16_t>{0, 16384, -16384, 32767, -32767, 8192}));
  // The project's raw-PCM reader takes it back as the other formats do.
  const DecodedAudio d = decode_pcm_s16(v, 1, kRate, kRate);
  for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(d.samples[i], s16_round_trip(x[i]));
}

TEST(AudioEncodeLossless, FlacRoundTripsToTheQuantizedSamples) {
  const std::vector<float> x = test_signal(kRate * 3 / 2);
  for (double level : {-1.0, 0.0, 1.0}) {
    EncodeOptions o;
    o.compression_level = level;
    const std::string flac = encode_audio(x, kRate, AudioFormat::kFlac, o);
    EXPECT_EQ(flac.substr(0, 4), "fLaC");
    EXPECT_LT(flac.size(), 2 * x.size());  // compressed
    const DecodedAudio d = decode(flac);
    EXPECT_EQ(d.format, "FLAC/PCM_16");
    ASSERT_EQ(d.samples.size(), x.size());
    for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(d.samples[i], s16_round_trip(x[i])) << "level " << level << " sample " << i;
  }
}

// ---- lossy ----------------------------------------------------------------------------------------

struct Lossy {
  AudioFormat format;
  const char* decoded_as;
  double min_snr_db;  // against the input, aligned
};

class AudioEncodeLossy : public ::testing::TestWithParam<Lossy> {};

TEST_P(AudioEncodeLossy, RoundTripKeepsTheSignal) {
  const Lossy p = GetParam();
  if (!audio_format_writable(p.format)) GTEST_SKIP() << audio_format_name(p.format) << " not writable by this libsndfile";
  const std::vector<float> x = test_signal(kRate * 2);
  const std::string bytes = encode_audio(x, kRate, p.format);
  EXPECT_LT(bytes.size(), x.size() / 2);  // well under 8 bits a sample
  const DecodedAudio d = decode(bytes);
  EXPECT_EQ(d.format, p.decoded_as);
  EXPECT_EQ(d.source_rate, kRate);
  ASSERT_GE(d.samples.size(), x.size());
  EXPECT_LE(d.samples.size(), x.size() + 4000);  // the codec's delay and last block at most
  size_t lag = 0;
  const double snr = best_snr(x, d.samples, 2000, 2400, &lag);
  EXPECT_GT(snr, p.min_snr_db) << audio_format_name(p.format) << " lag " << lag;
  EXPECT_EQ(dominant_hz(d.samples, kRate), 440.0);
  // A silent clip stays (nearly) silent: no codec noise invented.
  const DecodedAudio z = decode(encode_audio(std::vector<float>(kRate / 2), kRate, p.format));
  for (float v : z.samples) ASSERT_LT(std::abs(v), 1e-3f);
}

INSTANTIATE_TEST_SUITE_P(Formats, AudioEncodeLossy,
                         ::testing::Values(Lossy{AudioFormat::kOpus, "OGG/Opus", 15},
                                           Lossy{AudioFormat::kVorbis, "OGG/Vorbis", 20},
                                           Lossy{AudioFormat::kMp3, "MP3", 20}),
                         [](const auto& info) { return std::string(audio_format_name(info.param.format)); });

TEST(AudioEncodeLossyRates, OpusTakesOnlyItsRates) {
  const std::vector<float> x = test_signal(16000, 16000);
  EXPECT_EQ(decode(encode_audio(x, 16000, AudioFormat::kOpus), 16000).format, "OGG/Opus");
  const std::string e = error_of([&] { encode_audio(x, 22050, AudioFormat::kOpus); });
  EXPECT_NE(e.find("opus takes 8000, 12000, 16000, 24000 or 48000 Hz, not 22050 Hz"), std::string::npos) << e;
  const std::string e2 = error_of([] { AudioStreamEncoder enc(AudioFormat::kOpus, 44100); });
  EXPECT_NE(e2.find("not 44100 Hz"), std::string::npos) << e2;
}

// ---- streaming ------------------------------------------------------------------------------------

TEST(AudioEncodeStream, WavHeaderSaysUnknownLengthAndDecodesLikeTheWholeFile) {
  const std::vector<float> x = test_signal(kRate);
  for (AudioFormat f : {AudioFormat::kWav, AudioFormat::kWavFloat}) {
    int nonempty = 0;
    const std::string s = streamed(x, f, 1920, &nonempty);
    const std::string w = encode_audio(x, kRate, f);
    EXPECT_EQ(nonempty, int((x.size() + 1919) / 1920));  // bytes with every push
    ASSERT_EQ(s.size(), w.size());
    uint32_t riff = 0, data = 0;
    std::memcpy(&riff, s.data() + 4, 4);
    std::memcpy(&data, s.data() + 40, 4);
    EXPECT_EQ(riff, 0xFFFFFFFFu);
    EXPECT_EQ(data, 0xFFFFFFFFu);
    EXPECT_EQ(s.substr(44), w.substr(44));  // the same samples; only the sizes differ
    EXPECT_EQ(decode(s).samples, decode(w).samples) << audio_format_name(f);
  }
}

TEST(AudioEncodeStream, PcmStreamIsTheWholeEncode) {
  const std::vector<float> x = test_signal(5000);
  EXPECT_EQ(streamed(x, AudioFormat::kPcm, 333), encode_audio(x, kRate, AudioFormat::kPcm));
}

TEST(AudioEncodeStream, FlacStreamDecodesToTheSameSamplesAndComesOutAsItGoes) {
  const std::vector<float> x = test_signal(kRate * 2);
  int nonempty = 0;
  const std::string s = streamed(x, AudioFormat::kFlac, 1920, &nonempty);
  EXPECT_GE(nonempty, 5);  // bytes every few frames, not all at the end
  const DecodedAudio ds = decode(s), dw = decode(encode_audio(x, kRate, AudioFormat::kFlac));
  EXPECT_EQ(ds.samples, dw.samples);
  EXPECT_EQ(ds.samples.size(), x.size());
}

TEST(AudioEncodeStream, OpusStreamDecodesToTheSameSamplesAsTheWholeEncode) {
  const std::vector<float> x = test_signal(kRate * 2);
  int nonempty = 0;
  const std::string s = streamed(x, AudioFormat::kOpus, 1920, &nonempty);
  EXPECT_GE(nonempty, 5);  // pages of about 200 ms
  const DecodedAudio ds = decode(s), dw = decode(encode_audio(x, kRate, AudioFormat::kOpus));
  ASSERT_EQ(ds.samples.size(), dw.samples.size());
  EXPECT_GT(best_snr(dw.samples, ds.samples, 0, 0, nullptr), 60.0);
}

TEST(AudioEncodeStream, VorbisStreamDecodesLikeTheWholeEncode) {
  const std::vector<float> x = test_signal(kRate * 2);
  const DecodedAudio ds = decode(streamed(x, AudioFormat::kVorbis)), dw = decode(encode_audio(x, kRate, AudioFormat::kVorbis));
  ASSERT_EQ(ds.samples.size(), dw.samples.size());
  // The encoder's analysis depends a little on how the samples arrive: close, not identical.
  EXPECT_GT(best_snr(dw.samples, ds.samples, 0, 0, nullptr), 25.0);
  EXPECT_GT(best_snr(x, ds.samples, 0, 2400, nullptr), 20.0);
}

TEST(AudioEncodeStream, Mp3StreamIsConstantRateWithoutTheEmptyTagFrame) {
  if (!audio_format_writable(AudioFormat::kMp3)) GTEST_SKIP() << "mp3 not writable by this libsndfile";
  const std::vector<float> x = test_signal(kRate * 2);
  int nonempty = 0;
  const std::string s = streamed(x, AudioFormat::kMp3, 1920, &nonempty);
  EXPECT_GE(nonempty, 10);
  ASSERT_GE(s.size(), 8u);
  // The first frame is audio: its header is followed by side information, not LAME's zeros.
  EXPECT_EQ(uint8_t(s[0]), 0xFF);
  EXPECT_NE(s.substr(4, 16), std::string(16, '\0'));
  EXPECT_EQ(s.find("Xing"), std::string::npos);
  EXPECT_EQ(s.find("Info"), std::string::npos);
  // Every frame at one bit rate: the reader's length estimate holds and nothing is cut.
  const DecodedAudio d = decode(s);
  EXPECT_GE(d.samples.size(), x.size());
  size_t lag = 0;
  EXPECT_GT(best_snr(x, d.samples, 3000, 2400, &lag), 20.0) << "lag " << lag;
  EXPECT_GT(lag, 0u);  // without the tag the encoder's delay stays in (a reader cannot trim it)
}

TEST(AudioEncodeStream, EmptyStreamsAreValidFiles) {
  for (AudioFormat f : writable_audio_formats()) {
    AudioStreamEncoder enc(f, kRate);
    const std::string out = enc.finish();
    if (f == AudioFormat::kPcm || f == AudioFormat::kFlac || f == AudioFormat::kMp3) {
      // libsndfile writes FLAC's header with the first samples; an MP3 is its frames.
      EXPECT_TRUE(out.empty()) << audio_format_name(f);
      EXPECT_EQ(encode_audio({}, kRate, f), "") << audio_format_name(f);
    } else if (f == AudioFormat::kWav || f == AudioFormat::kWavFloat) {
      EXPECT_EQ(out.size(), 44u);
      EXPECT_EQ(encode_audio({}, kRate, f).size(), 44u);
    } else {
      EXPECT_EQ(out.substr(0, 4), "OggS") << audio_format_name(f);  // the stream's header pages
    }
    const std::string again = error_of([&] { enc.push(std::vector<float>(10)); });
    EXPECT_NE(again.find("already finished"), std::string::npos) << again;
  }
}

// ---- bad input ------------------------------------------------------------------------------------

TEST(AudioEncodeErrors, NonFiniteSamplesAreRefusedAndTheStreamGoesOn) {
  std::vector<float> x = test_signal(1000);
  x[417] = std::numeric_limits<float>::quiet_NaN();
  const std::string e = error_of([&] { encode_audio(x, kRate, AudioFormat::kWav); });
  EXPECT_NE(e.find("sample 417 is NaN"), std::string::npos) << e;
  x[417] = std::numeric_limits<float>::infinity();
  const std::string e2 = error_of([&] { encode_audio(x, kRate, AudioFormat::kFlac); });
  EXPECT_NE(e2.find("sample 417 is infinite"), std::string::npos) << e2;

  for (AudioFormat f : {AudioFormat::kWav, AudioFormat::kFlac}) {
    AudioStreamEncoder enc(f, kRate);
    const std::vector<float> good = test_signal(1000);
    std::string out = enc.push(good);
    const std::string e3 = error_of([&] { enc.push(x); });
    EXPECT_NE(e3.find("sample 1417 is infinite"), std::string::npos) << e3;  // counted from the stream's start
    EXPECT_EQ(enc.samples(), 1000);  // nothing of the refused push went in
    out += enc.push(good);
    out += enc.finish();
    std::vector<float> both = good;
    both.insert(both.end(), good.begin(), good.end());
    const DecodedAudio d = decode(out);
    ASSERT_EQ(d.samples.size(), both.size());
    for (size_t i = 0; i < both.size(); ++i) ASSERT_EQ(d.samples[i], s16_round_trip(both[i]));
  }
}

TEST(AudioEncodeErrors, BadRatesAreRefused) {
  const std::vector<float> x(10);
  for (int rate : {0, -5, 400000}) {
    const std::string e = error_of([&] { encode_audio(x, rate, AudioFormat::kWav); });
    EXPECT_NE(e.find("bad sample rate " + std::to_string(rate)), std::string::npos) << e;
    const std::string e2 = error_of([&] { AudioStreamEncoder enc(AudioFormat::kFlac, rate); });
    EXPECT_NE(e2.find("bad sample rate"), std::string::npos) << e2;
  }
}

}  // namespace
}  // namespace lfm::audio
