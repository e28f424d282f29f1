// Audio decoding: magic bytes → libsndfile (virtual I/O over the caller's buffer) → mono float →
// soxr (audio_resample.cpp). The notes on formats and limits are in audio_decode.h.
#include "audio/audio_decode.h"

#include <fcntl.h>
#include <sndfile.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <memory>

#include "audio/ogg_preflight.h"
#include "core/error.h"
#include "core/file_io.h"

namespace lfm::audio {
namespace {

// ---- limits --------------------------------------------------------------------------------------

void validate_limits(const AudioDecodeLimits& l) {
  LFM_CHECK(std::isfinite(l.max_seconds) && l.max_seconds > 0, "audio: max_seconds must be positive, got ",
            l.max_seconds);
  LFM_CHECK(l.max_channels >= 1, "audio: max_channels must be at least 1, got ", l.max_channels);
  LFM_CHECK(l.min_rate >= 1 && l.min_rate <= l.max_rate, "audio: sample-rate limits [", l.min_rate, ", ",
            l.max_rate, "] are not a range of positive rates");
  LFM_CHECK(l.max_bytes >= 0, "audio: max_bytes must not be negative, got ", l.max_bytes);
}

void check_rate(int rate, const char* which, const AudioDecodeLimits& l) {
  LFM_CHECK(rate >= l.min_rate && rate <= l.max_rate, "audio: bad ", which, " sample rate ", rate, " Hz (allowed ",
            l.min_rate, "..", l.max_rate, " Hz)");
}

void check_channels(int64_t channels, const AudioDecodeLimits& l) {
  LFM_CHECK(channels >= 1, "audio: bad channel count ", channels);
  LFM_CHECK(channels <= l.max_channels, "audio: too many channels: ", channels, " > limit ", l.max_channels);
}

// The most frames of `rate` that fit in max_seconds (≥ 0; the limits are validated).
int64_t max_frames(int rate, const AudioDecodeLimits& l) {
  const double f = std::floor(l.max_seconds * rate);
  return f >= 9.0e18 ? INT64_MAX : int64_t(f);
}

[[noreturn]] void fail_too_long(double seconds, bool lower_bound, const AudioDecodeLimits& l) {
  fail("audio: too long: ", lower_bound ? "more than " : "", seconds, " s > limit ", l.max_seconds, " s");
}

// Float files and raw float input may carry any value. Nominal audio is within ±1 (a few times
// that with headroom); values near FLT_MAX would overflow to Inf in soxr's filter and the
// front end's float32 FFT, so anything beyond this is refused as corrupt.
constexpr float kMaxAbsSample = 1e6f;

// Appends the mean over channels of `frames` interleaved frames to `mono`, refusing a NaN/Inf sample
// (frame numbers count from `first_frame`). Summed in double: a single channel passes bit-exact.
template <typename T, typename ToFloat>
void mix_down(const T* in, int64_t frames, int channels, int64_t first_frame, ToFloat to_float,
              std::vector<float>& mono) {
  for (int64_t f = 0; f < frames; ++f) {
    double sum = 0;
    for (int c = 0; c < channels; ++c) {
      const float v = to_float(in[f * channels + c]);
      if (!(std::abs(v) <= kMaxAbsSample)) {  // also NaN
        if (std::isfinite(v)) {
          fail("audio: sample ", first_frame + f, " (channel ", c, ") is ", v, ", beyond ±", kMaxAbsSample,
               " (float audio is nominally within ±1)");
        }
        fail("audio: sample ", first_frame + f, " (channel ", c, ") is ", std::isnan(v) ? "NaN" : "infinite",
             "; audio must be finite");
      }
      sum += v;
    }
    mono.push_back(float(sum / channels));
  }
}

DecodedAudio finish(std::vector<float> mono, int source_rate, int channels, int target_rate, std::string format) {
  DecodedAudio out;
  out.source_rate = source_rate;
  out.source_channels = channels;
  out.source_frames = int64_t(mono.size());
  out.duration_s = double(mono.size()) / source_rate;
  out.sample_rate = target_rate;
  out.format = std::move(format);
  out.samples = source_rate == target_rate ? std::move(mono) : resample_mono(mono, source_rate, target_rate);
  LFM_CHECK(!out.samples.empty(), "audio: too short: ", out.source_frames, " frames at ", source_rate,
            " Hz leave no sample at ", target_rate, " Hz");
  return out;
}

// ---- libsndfile ----------------------------------------------------------------------------------

// The containers handed to libsndfile, by magic (see the header for why only these).
const char* sniff_container(std::span<const uint8_t> b) {
  auto at = [&](size_t off, const char* tag) {
    const size_t n = std::strlen(tag);
    return b.size() >= off + n && std::memcmp(b.data() + off, tag, n) == 0;
  };
  if ((at(0, "RIFF") || at(0, "RIFX") || at(0, "RF64")) && at(8, "WAVE")) return "WAV";
  if (at(0, "FORM") && (at(8, "AIFF") || at(8, "AIFC"))) return "AIFF";
  if (at(0, "fLaC")) return "FLAC";
  if (at(0, "OggS")) return "OGG";
  if (at(0, "ID3")) return "MP3";                                                // ID3v2 tag, then frames
  if (b.size() >= 2 && b[0] == 0xFF && (b[1] & 0xE0) == 0xE0) return "MP3";      // an MPEG frame sync
  return nullptr;
}

// WAV and AIFF say how many bytes their sample chunk holds ("data" / "SSND"); libsndfile quietly
// uses what the file has when the header claims more. Here a claim past the end is refused before
// decoding: as too long when the claim itself exceeds max_seconds (WAV's fmt byte rate gives its
// duration), else as a cut-off file. 0 and 0xFFFFFFFF are the streaming writers' "unknown" and pass.
void check_iff_sizes(std::span<const uint8_t> b, const char* container, const AudioDecodeLimits& limits) {
  const bool big_endian = b[3] == 'X' || b[0] == 'F';  // RIFX, FORM
  auto u32 = [&](size_t at) {
    return big_endian ? uint32_t(b[at]) << 24 | uint32_t(b[at + 1]) << 16 | uint32_t(b[at + 2]) << 8 | b[at + 3]
                      : uint32_t(b[at + 3]) << 24 | uint32_t(b[at + 2]) << 16 | uint32_t(b[at + 1]) << 8 | b[at];
  };
  const bool wav = container[0] == 'W';
  const char* data_id = wav ? "data" : "SSND";
  uint32_t byte_rate = 0;
  for (uint64_t at = 12; at + 8 <= b.size();) {
    const uint32_t size = u32(size_t(at) + 4);
    const uint64_t body = at + 8;
    if (wav && std::memcmp(&b[size_t(at)], "fmt ", 4) == 0 && size >= 16 && body + 16 <= b.size()) {
      byte_rate = u32(size_t(body) + 8);
    }
    if (std::memcmp(&b[size_t(at)], data_id, 4) == 0) {
      const uint64_t held = b.size() - body;
      if (size == 0 || size == 0xFFFFFFFFu || size <= held) return;
      if (byte_rate > 0 && double(size) / byte_rate > limits.max_seconds) {
        fail("audio: too long: ", double(size) / byte_rate, " s > limit ", limits.max_seconds, " s (as the ",
             container, " header claims; the file holds ", held, " of its ", size, " data bytes)");
      }
      fail("audio: truncated ", container, " data: the header declares ", size, " data bytes, the file holds ", held);
    }
    at = body + size + (size & 1);  // chunks are padded to even sizes
  }
}

bool allowed_major(int major) {
  switch (major) {
    case SF_FORMAT_WAV: case SF_FORMAT_WAVEX: case SF_FORMAT_RF64: case SF_FORMAT_AIFF:
    case SF_FORMAT_FLAC: case SF_FORMAT_OGG: case SF_FORMAT_MPEG:
      return true;
    default:
      return false;
  }
}

std::string format_name(int format) {
  const int major = format & SF_FORMAT_TYPEMASK, sub = format & SF_FORMAT_SUBMASK;
  if (major == SF_FORMAT_MPEG) {
    return sub == SF_FORMAT_MPEG_LAYER_I ? "MP1" : sub == SF_FORMAT_MPEG_LAYER_II ? "MP2" : "MP3";
  }
  const char* m = major == SF_FORMAT_FLAC ? "FLAC" : major == SF_FORMAT_OGG ? "OGG" : major == SF_FORMAT_AIFF ? "AIFF"
                                                                                                               : "WAV";
  const char* s = nullptr;
  switch (sub) {
    case SF_FORMAT_PCM_S8: s = "PCM_S8"; break;
    case SF_FORMAT_PCM_U8: s = "PCM_U8"; break;
    case SF_FORMAT_PCM_16: s = "PCM_16"; break;
    case SF_FORMAT_PCM_24: s = "PCM_24"; break;
    case SF_FORMAT_PCM_32: s = "PCM_32"; break;
    case SF_FORMAT_FLOAT: s = "float32"; break;
    case SF_FORMAT_DOUBLE: s = "float64"; break;
    case SF_FORMAT_ULAW: s = "u-law"; break;
    case SF_FORMAT_ALAW: s = "A-law"; break;
    case SF_FORMAT_IMA_ADPCM: s = "IMA_ADPCM"; break;
    case SF_FORMAT_MS_ADPCM: s = "MS_ADPCM"; break;
    case SF_FORMAT_VORBIS: s = "Vorbis"; break;
    case SF_FORMAT_OPUS: s = "Opus"; break;
    default: break;
  }
  return s ? cat(m, "/", s) : cat(m, "/subtype 0x", std::hex, sub);
}

// libsndfile's virtual I/O over a read-only buffer: file semantics (seeking past the end is allowed
// and reads there return nothing), every position overflow-checked.
struct MemoryFile {
  const uint8_t* data;
  sf_count_t size;
  sf_count_t pos = 0;
};

sf_count_t vio_length(void* user) { return static_cast<MemoryFile*>(user)->size; }

sf_count_t vio_seek(sf_count_t offset, int whence, void* user) {
  auto* m = static_cast<MemoryFile*>(user);
  const sf_count_t base = whence == SEEK_SET ? 0 : whence == SEEK_CUR ? m->pos : whence == SEEK_END ? m->size : -1;
  sf_count_t to = 0;
  if (base < 0 || __builtin_add_overflow(base, offset, &to) || to < 0) return -1;
  m->pos = to;
  return to;
}

sf_count_t vio_read(void* dst, sf_count_t count, void* user) {
  auto* m = static_cast<MemoryFile*>(user);
  if (count <= 0 || m->pos >= m->size) return 0;
  const sf_count_t n = std::min(count, m->size - m->pos);
  std::memcpy(dst, m->data + m->pos, size_t(n));
  m->pos += n;
  return n;
}

sf_count_t vio_write(const void*, sf_count_t, void*) { return 0; }
sf_count_t vio_tell(void* user) { return static_cast<MemoryFile*>(user)->pos; }

struct SndfileCloser {
  void operator()(SNDFILE* f) const { sf_close(f); }
};

}  // namespace

DecodedAudio decode_audio(std::span<const uint8_t> bytes, int target_rate, const AudioDecodeLimits& limits) {
  validate_limits(limits);
  check_rate(target_rate, "target", limits);
  LFM_CHECK(!bytes.empty(), "audio: empty input (0 bytes)");
  LFM_CHECK(int64_t(bytes.size()) <= limits.max_bytes, "audio: input is ", bytes.size(), " bytes, over the ",
            limits.max_bytes, "-byte limit");
  const char* container = sniff_container(bytes);
  LFM_CHECK(container, "audio: format not recognised (", bytes.size(),
            " bytes; supported: WAV, AIFF, FLAC, OGG Vorbis/Opus, MP3)");

  if (std::strcmp(container, "WAV") == 0 || std::strcmp(container, "AIFF") == 0) {
    check_iff_sizes(bytes, container, limits);
  }
  if (std::strcmp(container, "OGG") == 0) check_ogg_vorbis_headers(bytes);  // libsndfile leaks on bad ones

  MemoryFile mem{bytes.data(), sf_count_t(bytes.size())};
  SF_VIRTUAL_IO vio{vio_length, vio_seek, vio_read, vio_write, vio_tell};
  SF_INFO info{};
  std::unique_ptr<SNDFILE, SndfileCloser> sf(sf_open_virtual(&vio, SFM_READ, &info, &mem));
  // (libsndfile's open errors are generic, some misleading: "not a regular file" for a cut MP3.)
  LFM_CHECK(sf, "audio: cannot decode the ", container, " data (", bytes.size(),
            " bytes; corrupt or truncated): libsndfile says \"", sf_strerror(nullptr), "\"");
  const int major = info.format & SF_FORMAT_TYPEMASK;
  LFM_CHECK(allowed_major(major), "audio: format not recognised (libsndfile major format 0x", std::hex, major,
            " behind a ", container, " signature)");
  const std::string format = format_name(info.format);

  // Everything the header says, before any sample is decoded.
  check_channels(info.channels, limits);
  check_rate(info.samplerate, "source", limits);
  const int channels = info.channels, rate = info.samplerate;
  const int64_t limit_frames = max_frames(rate, limits);
  const bool frames_known = info.frames >= 0 && info.frames != SF_COUNT_MAX;
  if (frames_known && info.frames > limit_frames) fail_too_long(double(info.frames) / rate, false, limits);

  // Decoded in chunks, each mixed down at once: memory follows the frames actually decoded (a
  // header that lies costs nothing), and the duration limit is enforced chunk by chunk. The
  // reservation is capped by the input's size for the same reason.
  std::vector<float> mono;
  if (frames_known) mono.reserve(size_t(std::min<int64_t>(info.frames, 8 * int64_t(bytes.size()) + 4096)));
  const int64_t chunk_frames = std::max<int64_t>(1, 65536 / channels);
  std::vector<float> chunk(size_t(chunk_frames * channels));
  for (;;) {
    const sf_count_t n = sf_readf_float(sf.get(), chunk.data(), chunk_frames);
    if (n <= 0) break;
    if (int64_t(mono.size()) + n > limit_frames) fail_too_long(double(mono.size() + n) / rate, true, limits);
    mix_down(chunk.data(), n, channels, int64_t(mono.size()), [](float v) { return v; }, mono);
  }
  const int err = sf_error(sf.get());
  LFM_CHECK(err == SF_ERR_NO_ERROR, "audio: corrupt ", format, " data after ", mono.size(), " frames: ",
            sf_error_number(err));
  // A frame count the stream falls short of is a cut-off file. MPEG's count is an estimate from
  // the bit rate when the file has no Xing/Info header, so only the other formats are held to it.
  LFM_CHECK(!frames_known || major == SF_FORMAT_MPEG || int64_t(mono.size()) >= info.frames, "audio: truncated ",
            format, " data: the header says ", info.frames, " frames, the stream holds ", mono.size());
  LFM_CHECK(!mono.empty(), "audio: no samples in the ", format, " data");
  return finish(std::move(mono), rate, channels, target_rate, format);
}

DecodedAudio load_audio_file(const std::string& path, int target_rate, const AudioDecodeLimits& limits) {
  validate_limits(limits);
  const int fd = open_regular_file(path, "audio:");
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  LFM_CHECK(::fstat(fd, &st) == 0, "audio: cannot read '", path, "': ", std::strerror(errno));
  LFM_CHECK(int64_t(st.st_size) <= limits.max_bytes, "audio: '", path, "' has ", st.st_size, " bytes, over the ",
            limits.max_bytes, "-byte limit");
  std::vector<uint8_t> bytes(size_t(st.st_size));
  size_t got = 0;
  while (got < bytes.size()) {
    const ssize_t n = ::read(fd, bytes.data() + got, bytes.size() - got);
    if (n < 0 && errno == EINTR) continue;
    LFM_CHECK(n > 0, "audio: cannot read '", path, "' in full");
    got += size_t(n);
  }
  try {
    return decode_audio(bytes, target_rate, limits);
  } catch (const Error& e) {
    throw Error(cat(e.what(), " ('", path, "')"));
  }
}

namespace {

template <typename T, typename ToFloat>
DecodedAudio decode_pcm(std::span<const T> in, int channels, int rate, int target_rate, const AudioDecodeLimits& l,
                        ToFloat to_float, const char* format) {
  validate_limits(l);
  check_channels(channels, l);
  check_rate(rate, "source", l);
  check_rate(target_rate, "target", l);
  LFM_CHECK(!in.empty(), "audio: no samples in the raw ", format, " input");
  LFM_CHECK(in.size() % size_t(channels) == 0, "audio: raw ", format, " input of ", in.size(),
            " samples is not a whole number of ", channels, "-channel frames");
  LFM_CHECK(in.size() <= size_t(l.max_bytes) / sizeof(T), "audio: raw ", format, " input is ",
            in.size() * sizeof(T), " bytes, over the ", l.max_bytes, "-byte limit");
  const int64_t frames = int64_t(in.size() / size_t(channels));
  if (frames > max_frames(rate, l)) fail_too_long(double(frames) / rate, false, l);
  std::vector<float> mono;
  mono.reserve(size_t(frames));
  mix_down(in.data(), frames, channels, 0, to_float, mono);
  return finish(std::move(mono), rate, channels, target_rate, cat("PCM/", format));
}

}  // namespace

DecodedAudio decode_pcm_f32(std::span<const float> interleaved, int channels, int sample_rate, int target_rate,
                            const AudioDecodeLimits& limits) {
  return decode_pcm(interleaved, channels, sample_rate, target_rate, limits, [](float v) { return v; }, "float32");
}

DecodedAudio decode_pcm_s16(std::span<const int16_t> interleaved, int channels, int sample_rate, int target_rate,
                            const AudioDecodeLimits& limits) {
  return decode_pcm(interleaved, channels, sample_rate, target_rate, limits,
                    [](int16_t v) { return float(v) * (1.0f / 32768.0f); }, "int16");
}

}  // namespace lfm::audio
