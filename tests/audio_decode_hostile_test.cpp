// audio/audio_decode under hostile and broken input: every limit refused with an "audio:" message
// naming the problem, from the header where the header tells (before any sample is decoded), and
// while reading where it does not; corrupt, truncated and non-finite data refused; nothing crashes.
#include <gtest/gtest.h>
#include <sndfile.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "audio/audio_decode.h"
#include "audio_test_util.h"
#include "core/error.h"

namespace lfm::audio {
namespace {

using test::Bytes;
using test::encode;
using test::error_of;
using test::sine;
using test::wav_file;

std::vector<int16_t> pcm16(size_t n) {
  std::vector<int16_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = int16_t((i * 37) % 2000 - 1000);
  return v;
}

TEST(AudioDecodeHostile, EmptyRandomAndUnsupported) {
  AUDIO_EXPECT_HAS(error_of([] { decode_audio({}); }), "audio: empty input");
  std::mt19937 rng(5);
  Bytes noise(4096);
  for (auto& b : noise) b = uint8_t(rng());
  noise[0] = 'x';
  AUDIO_EXPECT_HAS(error_of([&] { decode_audio(noise); }), "audio: format not recognised");
  // Formats libsndfile knows but the allow-list keeps away from uploads (Sun .au, NIST SPHERE).
  SF_INFO probe{};
  probe.samplerate = 16000;
  probe.channels = 1;
  probe.format = SF_FORMAT_AU | SF_FORMAT_PCM_16;
  ASSERT_TRUE(sf_format_check(&probe));
  AUDIO_EXPECT_HAS(error_of([] { decode_audio(encode(sine(16000, 0.1, 440), 1, 16000, SF_FORMAT_AU | SF_FORMAT_PCM_16)); }),
                   "format not recognised");
  AUDIO_EXPECT_HAS(error_of([] { decode_audio(encode(sine(16000, 0.1, 440), 1, 16000, SF_FORMAT_NIST | SF_FORMAT_PCM_16)); }),
                   "format not recognised");
}

// Random bodies behind each accepted signature: refused with lfm::Error, or (MPEG's decoder is
// tolerant of garbage frames) decoded into finite samples within the limits. Never a crash.
TEST(AudioDecodeHostile, RandomBodiesBehindEverySignature) {
  const std::vector<Bytes> heads = {{'R', 'I', 'F', 'F', 0, 1, 0, 0, 'W', 'A', 'V', 'E'},
                                    {'F', 'O', 'R', 'M', 0, 1, 0, 0, 'A', 'I', 'F', 'F'},
                                    {'f', 'L', 'a', 'C'},
                                    {'O', 'g', 'g', 'S'},
                                    {'I', 'D', '3', 3, 0, 0, 0, 0, 0, 0},
                                    {0xFF, 0xFB, 0x90, 0x64}};
  AudioDecodeLimits limits;
  limits.max_seconds = 5;
  std::mt19937 rng(11);
  int refused = 0, decoded = 0;
  for (const Bytes& head : heads) {
    for (int trial = 0; trial < 20; ++trial) {
      Bytes b = head;
      const size_t n = 16 + rng() % 3000;
      for (size_t i = 0; i < n; ++i) b.push_back(uint8_t(rng()));
      try {
        const DecodedAudio a = decode_audio(b, 16000, limits);
        for (float v : a.samples) ASSERT_TRUE(std::isfinite(v));
        EXPECT_LE(a.duration_s, limits.max_seconds);
        ++decoded;
      } catch (const Error& e) {
        EXPECT_EQ(std::string(e.what()).rfind("audio:", 0), 0u) << e.what();
        ++refused;
      }
    }
  }
  EXPECT_GT(refused, 0);
  std::cout << "random bodies: " << refused << " refused, " << decoded << " decoded\n";
}

TEST(AudioDecodeHostile, TenHourHeaderWithATinyBodyIsRefusedFromTheHeader) {
  // FLAC: STREAMINFO's 36-bit total-samples field patched to 10 h at 16 kHz; the body is 0.1 s.
  Bytes flac = encode(sine(16000, 0.1, 440), 1, 16000, SF_FORMAT_FLAC | SF_FORMAT_PCM_16);
  ASSERT_GT(flac.size(), 26u);
  ASSERT_EQ(std::string(flac.begin(), flac.begin() + 4), "fLaC");
  const uint64_t total = uint64_t(10) * 3600 * 16000;
  // Bytes 18..25: rate (20 bits) | channels−1 (3) | bits−1 (5) | total samples (36), big-endian.
  flac[21] = uint8_t((flac[21] & 0xF0) | ((total >> 32) & 0x0F));
  for (int i = 0; i < 4; ++i) flac[size_t(22 + i)] = uint8_t(total >> (8 * (3 - i)));
  AUDIO_EXPECT_HAS(error_of([&] { decode_audio(flac); }), "audio: too long: 36000 s > limit 600 s");
  // WAV: a data chunk declared as 10 h of 16-bit samples over 0.1 s of them (libsndfile alone
  // would quietly decode the 0.1 s).
  const Bytes wav = wav_file(pcm16(1600), 1, 16000, int64_t(10) * 3600 * 16000 * 2);
  AUDIO_EXPECT_HAS(error_of([&] { decode_audio(wav); }),
                   "audio: too long: 36000 s > limit 600 s (as the WAV header claims; the file holds 3200 of its "
                   "1152000000 data bytes)");
  // Streaming writers' "size unknown" (0xFFFFFFFF) is not a claim: the file decodes.
  EXPECT_EQ(decode_audio(wav_file(pcm16(1600), 1, 16000, 0xFFFFFFFF)).samples.size(), 1600u);
}

TEST(AudioDecodeHostile, TooLong) {
  AudioDecodeLimits limits;
  limits.max_seconds = 1;
  // From the header (the frame count is known): the message gives the duration.
  AUDIO_EXPECT_HAS(error_of([&] { decode_audio(wav_file(pcm16(32000), 1, 16000), 16000, limits); }),
                   "audio: too long: 2 s > limit 1 s");
  AUDIO_EXPECT_HAS(error_of([&] { decode_pcm_s16(pcm16(2 * 16001), 2, 16000, 16000, limits); }),
                   "too long: 1.00006 s > limit 1 s");
  // Exactly at the limit passes.
  EXPECT_EQ(decode_audio(wav_file(pcm16(16000), 1, 16000), 16000, limits).samples.size(), 16000u);
}

TEST(AudioDecodeHostile, Truncated) {
  const std::vector<float> x = sine(16000, 0.5, 440);
  for (int format : {SF_FORMAT_FLAC | SF_FORMAT_PCM_16, SF_FORMAT_WAV | SF_FORMAT_PCM_16, SF_FORMAT_WAV | SF_FORMAT_FLOAT,
                     SF_FORMAT_AIFF | SF_FORMAT_PCM_24}) {
    Bytes b = encode(x, 1, 16000, format);
    b.resize(b.size() * 6 / 10);
    AUDIO_EXPECT_HAS(error_of([&] { decode_audio(b); }), "audio: truncated ");
  }
  // Cut inside the header.
  Bytes head = encode(x, 1, 16000, SF_FORMAT_WAV | SF_FORMAT_PCM_16);
  head.resize(30);
  AUDIO_EXPECT_HAS(error_of([&] { decode_audio(head); }), "audio: cannot decode the WAV data");
  // Ogg is a streaming container: a stream cut in its audio pages decodes to the complete pages it
  // has (libsndfile takes the last complete page as the end), the same samples as the whole file's.
  for (int format : {SF_FORMAT_OGG | SF_FORMAT_VORBIS, SF_FORMAT_OGG | SF_FORMAT_OPUS}) {
    const Bytes whole = encode(sine(48000, 5.0, 440), 1, 48000, format);
    const Bytes cut(whole.begin(), whole.begin() + std::ptrdiff_t(whole.size() * 8 / 10));
    const DecodedAudio full = decode_audio(whole, 48000), part = decode_audio(cut, 48000);
    EXPECT_EQ(full.samples.size(), 240000u);
    EXPECT_GT(part.samples.size(), 48000u);
    EXPECT_LT(part.samples.size(), full.samples.size());
    for (size_t i = 0; i < part.samples.size(); ++i) ASSERT_EQ(part.samples[i], full.samples[i]) << format << " " << i;
  }
}

// Ogg Vorbis cut inside its header pages: libsndfile would leak the half-parsed decoder setup
// (ogg_preflight.h); the check refuses it first. Page 0 is the identification header, page 1 starts
// the comment and setup headers.
TEST(AudioDecodeHostile, OggVorbisHeadersCutShort) {
  const Bytes b = encode(sine(16000, 0.5, 440), 1, 16000, SF_FORMAT_OGG | SF_FORMAT_VORBIS);
  std::vector<size_t> pages;
  for (size_t i = 0; i + 4 <= b.size(); ++i) {
    if (std::memcmp(&b[i], "OggS", 4) == 0) pages.push_back(i);
  }
  ASSERT_GE(pages.size(), 3u);
  for (size_t cut : {pages[1], pages[1] + 40, pages[2] - 1}) {
    const Bytes c(b.begin(), b.begin() + std::ptrdiff_t(cut));
    AUDIO_EXPECT_HAS(error_of([&] { decode_audio(c); }),
                     "audio: corrupt Ogg Vorbis headers: the stream ends before its comment and setup headers");
  }
  // A flipped byte in the setup header breaks the page's CRC: libogg drops the page, and the
  // next one (audio) is not the header that should follow.
  Bytes d = b;
  d[pages[1] + 200] ^= 0x55;
  AUDIO_EXPECT_HAS(error_of([&] { decode_audio(d); }), "audio: corrupt Ogg Vorbis headers");
  // The whole file still decodes.
  EXPECT_EQ(decode_audio(b).format, "OGG/Vorbis");
}

TEST(AudioDecodeHostile, NonFiniteSamples) {
  std::vector<float> x = sine(16000, 0.1, 440);
  x[123] = std::numeric_limits<float>::quiet_NaN();
  AUDIO_EXPECT_HAS(error_of([&] { decode_audio(wav_file(x, 1, 16000)); }), "audio: sample 123 (channel 0) is NaN");
  x[123] = 0;
  x[77] = -std::numeric_limits<float>::infinity();
  AUDIO_EXPECT_HAS(error_of([&] { decode_audio(wav_file(x, 1, 16000)); }), "sample 77 (channel 0) is infinite");
  // Stereo: the frame and the channel.
  x[77] = 0;
  x[101] = std::numeric_limits<float>::infinity();
  AUDIO_EXPECT_HAS(error_of([&] { decode_pcm_f32(x, 2, 16000); }), "sample 50 (channel 1) is infinite");
  // Finite but huge (a fuzzer's find: 3e38 overflowed soxr's filter to Inf): refused too.
  x[101] = 3e38f;
  AUDIO_EXPECT_HAS(error_of([&] { decode_audio(wav_file(x, 2, 8000)); }), "sample 50 (channel 1) is 3e+38, beyond ±1e+06");
  x[101] = -1e6f;  // the bound itself passes, and stays finite through the resampler
  for (float v : decode_audio(wav_file(x, 2, 8000)).samples) ASSERT_TRUE(std::isfinite(v));
}

TEST(AudioDecodeHostile, Channels) {
  AudioDecodeLimits limits;
  limits.max_channels = 4;
  const Bytes eight = encode(std::vector<float>(8 * 100, 0.25f), 8, 16000, SF_FORMAT_WAV | SF_FORMAT_PCM_16);
  AUDIO_EXPECT_HAS(error_of([&] { decode_audio(eight, 16000, limits); }), "audio: too many channels: 8 > limit 4");
  AUDIO_EXPECT_HAS(error_of([&] { decode_pcm_f32(std::vector<float>(800), 8, 16000, 16000, limits); }),
                   "too many channels: 8 > limit 4");
  // A header claiming 100 channels over a body of a few frames: refused against the default 64.
  const Bytes hundred = wav_file(pcm16(200), 100, 16000);
  AUDIO_EXPECT_HAS(error_of([&] { decode_audio(hundred); }), "too many channels: 100 > limit 64");
  AUDIO_EXPECT_HAS(error_of([&] { decode_pcm_f32(std::vector<float>(10), 0, 16000); }), "bad channel count 0");
  AUDIO_EXPECT_HAS(error_of([&] { decode_pcm_f32(std::vector<float>(9), 2, 16000); }),
                   "9 samples is not a whole number of 2-channel frames");
}

TEST(AudioDecodeHostile, SampleRates) {
  AUDIO_EXPECT_HAS(error_of([] { decode_audio(wav_file(pcm16(100), 1, 500)); }),
                   "audio: bad source sample rate 500 Hz (allowed 1000..384000 Hz)");
  AUDIO_EXPECT_HAS(error_of([] { decode_audio(wav_file(pcm16(100), 1, 2000000)); }), "audio:");
  AUDIO_EXPECT_HAS(error_of([] { decode_pcm_s16(pcm16(100), 1, 16000, 0); }), "bad target sample rate 0 Hz");
  AUDIO_EXPECT_HAS(error_of([] { decode_audio(wav_file(pcm16(100), 1, 16000), 400000); }),
                   "bad target sample rate 400000 Hz");
  AUDIO_EXPECT_HAS(error_of([] { decode_pcm_s16(pcm16(100), 1, -8000); }), "bad source sample rate -8000 Hz");
}

TEST(AudioDecodeHostile, BytesAndEmptyAudio) {
  AudioDecodeLimits limits;
  limits.max_bytes = 1000;
  AUDIO_EXPECT_HAS(error_of([&] { decode_audio(wav_file(pcm16(1000), 1, 16000), 16000, limits); }),
                   "audio: input is 2044 bytes, over the 1000-byte limit");
  AUDIO_EXPECT_HAS(error_of([&] { decode_pcm_s16(pcm16(1000), 1, 16000, 16000, limits); }),
                   "2000 bytes, over the 1000-byte limit");
  AUDIO_EXPECT_HAS(error_of([] { decode_audio(wav_file(std::vector<int16_t>{}, 1, 16000)); }), "audio: no samples");
  AUDIO_EXPECT_HAS(error_of([] { decode_pcm_f32({}, 1, 16000); }), "no samples in the raw float32 input");
  // One frame at 48 kHz is a third of a sample at 16 kHz: nothing is left.
  AUDIO_EXPECT_HAS(error_of([] { decode_pcm_s16(pcm16(1), 1, 48000); }),
                   "audio: too short: 1 frames at 48000 Hz leave no sample at 16000 Hz");
  EXPECT_EQ(decode_pcm_s16(pcm16(2), 1, 48000).samples.size(), 1u);
  AudioDecodeLimits bad;
  bad.max_seconds = std::nan("");
  AUDIO_EXPECT_HAS(error_of([&] { decode_pcm_s16(pcm16(10), 1, 16000, 16000, bad); }), "max_seconds must be positive");
}

}  // namespace
}  // namespace lfm::audio
