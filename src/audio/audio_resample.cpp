// resample_mono (audio_decode.h): libsoxr's one-shot converter at SOXR_HQ, float32 in and out.
#include <soxr.h>

#include <cmath>

#include "audio/audio_decode.h"
#include "core/error.h"

namespace lfm::audio {

std::vector<float> resample_mono(std::span<const float> samples, int from_rate, int to_rate) {
  LFM_CHECK(from_rate > 0 && to_rate > 0, "audio: cannot resample ", from_rate, " Hz to ", to_rate, " Hz");
  if (from_rate == to_rate || samples.empty()) return {samples.begin(), samples.end()};
  // soxr writes round(L · to / from) samples after its flush; a few more of room, then trimmed.
  const double expected = std::ceil(double(samples.size()) * to_rate / from_rate);
  std::vector<float> out(size_t(expected) + 16);
  const soxr_io_spec_t io = soxr_io_spec(SOXR_FLOAT32_I, SOXR_FLOAT32_I);
  const soxr_quality_spec_t quality = soxr_quality_spec(SOXR_HQ, 0);
  size_t used = 0, made = 0;
  const soxr_error_t err = soxr_oneshot(from_rate, to_rate, 1, samples.data(), samples.size(), &used, out.data(),
                                        out.size(), &made, &io, &quality, nullptr);
  LFM_CHECK(!err, "audio: resampling ", from_rate, " Hz to ", to_rate, " Hz failed: ", err);
  out.resize(made);
  return out;
}

}  // namespace lfm::audio
