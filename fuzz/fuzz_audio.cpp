// Audio decoding (audio/audio_decode.h): the signature sniff, libsndfile's WAV/AIFF/FLAC/Ogg/MP3
// readers behind it, the header checks, the chunked read, the down-mix and soxr, under small limits
// so that every input is fast and a size bug shows as an allocation far over them. The first byte
// picks the target rate (8, 16, 22.05 or 16 kHz again, so resampling up, down and not at all) and,
// with its high bit, the raw int16 PCM path (channels from the next byte) instead of a file.
#include <cmath>
#include <cstring>
#include <vector>

#include "audio/audio_decode.h"
#include "core/error.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const uint8_t choice = data[0];
  static const int kTargets[] = {8000, 16000, 22050, 16000};
  const int target = kTargets[choice & 3];
  lfm::audio::AudioDecodeLimits limits;
  limits.max_seconds = 20;
  limits.max_channels = 8;
  limits.max_bytes = 1 << 20;
  try {
    lfm::audio::DecodedAudio a;
    if (choice & 0x80) {
      if (size < 2) return 0;
      std::vector<int16_t> pcm((size - 2) / 2);
      if (!pcm.empty()) std::memcpy(pcm.data(), data + 2, pcm.size() * 2);
      a = lfm::audio::decode_pcm_s16(pcm, 1 + data[1] % 9, 1000 + 1000 * ((choice >> 2) & 31), target, limits);
    } else {
      a = lfm::audio::decode_audio({data + 1, size - 1}, target, limits);
    }
    if (a.samples.empty() || a.sample_rate != target || a.duration_s > limits.max_seconds) __builtin_trap();
    // soxr's output length is round(frames · target / source).
    const double want = double(a.source_frames) * target / a.source_rate;
    if (std::abs(double(a.samples.size()) - want) > 1) __builtin_trap();
    for (float v : a.samples) {
      if (!std::isfinite(v)) __builtin_trap();
    }
  } catch (const lfm::Error&) {
  }
  return 0;
}
