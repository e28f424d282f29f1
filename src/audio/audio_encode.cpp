// Audio encoding: wav / pcm written here, flac / opus / vorbis / mp3 through libsndfile's virtual
// I/O into a buffer handed out as it fills. The notes on formats and streaming are in
// audio_encode.h.
#include "audio/audio_encode.h"

#include <sndfile.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>

#include "core/error.h"

namespace lfm::audio {

namespace {

constexpr AudioFormat kAllFormats[] = {AudioFormat::kWav,  AudioFormat::kWavFloat, AudioFormat::kPcm, AudioFormat::kFlac,
                                       AudioFormat::kOpus, AudioFormat::kVorbis,   AudioFormat::kMp3};

// libsndfile's format word for the formats it writes; 0 for those written here.
int sndfile_format(AudioFormat f) {
  switch (f) {
    case AudioFormat::kFlac: return SF_FORMAT_FLAC | SF_FORMAT_PCM_16;
    case AudioFormat::kOpus: return SF_FORMAT_OGG | SF_FORMAT_OPUS;
    case AudioFormat::kVorbis: return SF_FORMAT_OGG | SF_FORMAT_VORBIS;
    case AudioFormat::kMp3: return SF_FORMAT_MPEG | SF_FORMAT_MPEG_LAYER_III;
    default: return 0;
  }
}

bool integer_samples(AudioFormat f) {
  return f == AudioFormat::kWav || f == AudioFormat::kPcm || f == AudioFormat::kFlac;
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string format_list() {
  std::string s;
  for (AudioFormat f : writable_audio_formats()) s += cat(s.empty() ? "" : ", ", audio_format_name(f));
  return s;
}

std::string sndfile_version() {
  char buf[128] = {};
  sf_command(nullptr, SFC_GET_LIB_VERSION, buf, sizeof(buf) - 1);
  return buf;
}

void check_rate(AudioFormat f, int rate) {
  LFM_CHECK(rate >= 1 && rate <= 384000, "audio encode: bad sample rate ", rate, " Hz for ", audio_format_name(f),
            " (allowed 1..384000 Hz)");
  if (f == AudioFormat::kOpus) {
    // Opus codes at these rates only (RFC 6716 §2); libsndfile's check does not say so.
    LFM_CHECK(rate == 8000 || rate == 12000 || rate == 16000 || rate == 24000 || rate == 48000,
              "audio encode: opus takes 8000, 12000, 16000, 24000 or 48000 Hz, not ", rate, " Hz");
  }
  if (const int sf = sndfile_format(f)) {
    SF_INFO info{};
    info.channels = 1;
    info.samplerate = rate;
    info.format = sf;
    LFM_CHECK(sf_format_check(&info), "audio encode: ", audio_format_name(f), " at ", rate,
              " Hz cannot be written by the linked ", sndfile_version(),
              f == AudioFormat::kMp3 ? " (built without MP3 encoding: LAME)" : "", "; writable formats: ", format_list());
  }
}

// Every sample finite, before any is written (a refused push leaves the encoder as it was).
void check_finite(std::span<const float> samples, int64_t first) {
  for (size_t i = 0; i < samples.size(); ++i) {
    if (!std::isfinite(samples[i]))
      fail("audio encode: sample ", first + int64_t(i), " is ", std::isnan(samples[i]) ? "NaN" : "infinite",
           "; audio must be finite");
  }
}

float clamp1(float v) { return std::clamp(v, -1.0f, 1.0f); }
int16_t to_s16(float v) { return static_cast<int16_t>(std::lrint(clamp1(v) * 32767.0f)); }

void put_u16(std::string& out, uint32_t v) {
  out += char(v & 0xFF);
  out += char(v >> 8 & 0xFF);
}
void put_u32(std::string& out, uint32_t v) {
  put_u16(out, v & 0xFFFF);
  put_u16(out, v >> 16);
}

// The canonical 44-byte RIFF WAVE header: format 1 (PCM, 16-bit) or 3 (IEEE float, 32-bit), one
// channel. data_bytes < 0: unknown (streaming), both sizes 0xFFFFFFFF.
std::string wav_header(bool is_float, int rate, int64_t data_bytes) {
  const uint32_t bytes_per_sample = is_float ? 4 : 2;
  uint32_t riff = 0xFFFFFFFFu, data = 0xFFFFFFFFu;
  if (data_bytes >= 0) {
    LFM_CHECK(data_bytes <= int64_t(0xFFFFFFFFu) - 36 - (data_bytes & 1), "audio encode: ", data_bytes,
              " bytes of samples do not fit in a WAV file (4 GiB); use a streamed wav, flac or another format");
    data = uint32_t(data_bytes);
    riff = uint32_t(36 + data_bytes);
  }
  std::string h = "RIFF";
  put_u32(h, riff);
  h += "WAVEfmt ";
  put_u32(h, 16);
  put_u16(h, is_float ? 3 : 1);
  put_u16(h, 1);
  put_u32(h, uint32_t(rate));
  put_u32(h, uint32_t(rate) * bytes_per_sample);
  put_u16(h, bytes_per_sample);
  put_u16(h, bytes_per_sample * 8);
  h += "data";
  put_u32(h, data);
  return h;
}

// The samples as wav / pcm data: int16 or float32, little-endian (the host's order, x86-64 and
// aarch64 Linux).
std::string raw_samples(std::span<const float> samples, bool is_float) {
  std::string out;
  if (is_float) {
    out.resize(samples.size() * 4);
    for (size_t i = 0; i < samples.size(); ++i) {
      const float v = clamp1(samples[i]);
      std::memcpy(&out[i * 4], &v, 4);
    }
  } else {
    out.resize(samples.size() * 2);
    for (size_t i = 0; i < samples.size(); ++i) {
      const int16_t v = to_s16(samples[i]);
      std::memcpy(&out[i * 2], &v, 2);
    }
  }
  return out;
}

// ---- libsndfile's virtual file ---------------------------------------------------------------------

// The file libsndfile writes: bytes [0, emitted) were handed out already, `pending` holds
// [emitted, emitted + pending.size()). A write before `emitted` (a header rewritten at close)
// is dropped for the part already handed out; a write past the end fills the gap with zeros.
struct OutFile {
  std::string pending;
  sf_count_t emitted = 0;
  sf_count_t pos = 0;
  sf_count_t size() const { return emitted + sf_count_t(pending.size()); }
  std::string take() {
    std::string out;
    out.swap(pending);
    emitted += sf_count_t(out.size());
    return out;
  }
};

sf_count_t out_length(void* user) { return static_cast<OutFile*>(user)->size(); }

sf_count_t out_seek(sf_count_t offset, int whence, void* user) {
  auto* f = static_cast<OutFile*>(user);
  const sf_count_t base = whence == SEEK_SET ? 0 : whence == SEEK_CUR ? f->pos : whence == SEEK_END ? f->size() : -1;
  sf_count_t to = 0;
  if (base < 0 || __builtin_add_overflow(base, offset, &to) || to < 0) return -1;
  f->pos = to;
  return to;
}

sf_count_t out_read(void* dst, sf_count_t count, void* user) {
  // Writers read back only what they wrote (a header); what was handed out reads as nothing.
  auto* f = static_cast<OutFile*>(user);
  if (count <= 0 || f->pos < f->emitted || f->pos >= f->size()) return 0;
  const sf_count_t n = std::min(count, f->size() - f->pos);
  std::memcpy(dst, f->pending.data() + (f->pos - f->emitted), size_t(n));
  f->pos += n;
  return n;
}

sf_count_t out_write(const void* src, sf_count_t count, void* user) {
  auto* f = static_cast<OutFile*>(user);
  if (count <= 0) return 0;
  const auto* p = static_cast<const char*>(src);
  sf_count_t n = count;
  if (f->pos < f->emitted) {  // already handed out: cannot change any more
    const sf_count_t skip = std::min(n, f->emitted - f->pos);
    p += skip;
    n -= skip;
    f->pos += skip;
  }
  if (n > 0) {
    const size_t at = size_t(f->pos - f->emitted);
    if (f->pending.size() < at + size_t(n)) f->pending.resize(at + size_t(n), '\0');
    std::memcpy(&f->pending[at], p, size_t(n));
    f->pos += n;
  }
  return count;
}

sf_count_t out_tell(void* user) { return static_cast<OutFile*>(user)->pos; }

// The length in bytes of the MPEG layer III frame whose 4-byte header starts `h`; 0 when it is not
// one (ISO 11172-3 / 13818-3 bit-rate and rate tables).
size_t mp3_frame_bytes(const uint8_t* h) {
  if (h[0] != 0xFF || (h[1] & 0xE0) != 0xE0 || ((h[1] >> 1) & 3) != 1) return 0;  // sync, layer III
  const int version = (h[1] >> 3) & 3;  // 3: MPEG-1, 2: MPEG-2, 0: MPEG-2.5
  const int br_index = h[2] >> 4, sr_index = (h[2] >> 2) & 3, padding = (h[2] >> 1) & 1;
  if (version == 1 || br_index == 0 || br_index == 15 || sr_index == 3) return 0;
  static constexpr int kRate1[] = {0, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320};
  static constexpr int kRate2[] = {0, 8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160};
  static constexpr int kHz[3][3] = {{11025, 12000, 8000}, {22050, 24000, 16000}, {44100, 48000, 32000}};
  const int hz = kHz[version == 0 ? 0 : version == 2 ? 1 : 2][sr_index];
  const int kbps = version == 3 ? kRate1[br_index] : kRate2[br_index];
  return size_t((version == 3 ? 144000 : 72000) * kbps / hz + padding);
}

}  // namespace

// libsndfile's writer over an OutFile. `streaming`: bytes are handed out as they are written;
// else all at close (so the header rewrites at close land).
struct SndfileWriter {
  OutFile file;
  SNDFILE* sf = nullptr;
  AudioFormat format;
  std::vector<int16_t> s16;
  std::vector<float> f32;

  SndfileWriter(AudioFormat f, int rate, const EncodeOptions& opt, bool streaming) : format(f) {
    SF_VIRTUAL_IO vio{out_length, out_seek, out_read, out_write, out_tell};
    SF_INFO info{};
    info.channels = 1;
    info.samplerate = rate;
    info.format = sndfile_format(f);
    sf = sf_open_virtual(&vio, SFM_WRITE, &info, &file);
    LFM_CHECK(sf, "audio encode: libsndfile cannot open a ", audio_format_name(f), " writer at ", rate, " Hz: ",
              sf_strerror(nullptr));
    if (streaming && f == AudioFormat::kMp3) {
      // A stream cannot have its Xing/LAME tag filled in, and without one a reader can only
      // estimate a variable-rate stream's length from its first frame (libsndfile does, and
      // stops there): constant bit rate keeps every estimate right. The level then picks the
      // rate (libsndfile's mapping; 0.5 ≈ 80 kbit/s at 24 kHz).
      // (The level first: libsndfile re-applies it when the mode changes and fails without one.)
      double level = opt.compression_level >= 0 ? std::min(opt.compression_level, 1.0) : 0.5;
      command(SFC_SET_COMPRESSION_LEVEL, &level, sizeof(level), cat("compression level ", level));
      int mode = SF_BITRATE_MODE_CONSTANT;
      command(SFC_SET_BITRATE_MODE, &mode, sizeof(mode), "constant bit rate");
    } else if (opt.compression_level >= 0) {
      double level = std::min(opt.compression_level, 1.0);
      command(SFC_SET_COMPRESSION_LEVEL, &level, sizeof(level), cat("compression level ", level));
    }
    if (streaming && (f == AudioFormat::kOpus || f == AudioFormat::kVorbis)) {
      // Ogg pages go out when full or when they hold this much audio: a listener waits at most
      // this long for the next bytes (libsndfile's default is about a second). Vorbis in
      // libsndfile 1.2 does not take the setting; its pages go out when full.
      double ms = 200;
      sf_command(sf, SFC_SET_OGG_PAGE_LATENCY_MS, &ms, sizeof(ms));
    }
  }

  void command(int cmd, void* data, int size, const std::string& what) {
    if (sf_command(sf, cmd, data, size)) return;
    const std::string why = sf_strerror(sf);
    sf_close(sf);
    sf = nullptr;
    fail("audio encode: the ", audio_format_name(format), " encoder does not take ", what, ": ", why);
  }
  ~SndfileWriter() {
    if (sf) sf_close(sf);
  }

  void write(std::span<const float> samples) {
    sf_count_t wrote = 0;
    if (integer_samples(format)) {
      s16.resize(samples.size());
      std::transform(samples.begin(), samples.end(), s16.begin(), to_s16);
      wrote = sf_write_short(sf, s16.data(), sf_count_t(s16.size()));
    } else {
      f32.resize(samples.size());
      std::transform(samples.begin(), samples.end(), f32.begin(), clamp1);
      wrote = sf_write_float(sf, f32.data(), sf_count_t(f32.size()));
    }
    LFM_CHECK(wrote == sf_count_t(samples.size()), "audio encode: the ", audio_format_name(format), " encoder took ",
              wrote, " of ", samples.size(), " samples: ", sf_strerror(sf));
  }

  std::string close() {
    const int err = sf_close(sf);
    sf = nullptr;
    LFM_CHECK(err == 0, "audio encode: finishing the ", audio_format_name(format), " stream failed: ", sf_error_number(err));
    return file.take();
  }
};

const char* audio_format_name(AudioFormat f) {
  switch (f) {
    case AudioFormat::kWav: return "wav";
    case AudioFormat::kWavFloat: return "wav_float";
    case AudioFormat::kPcm: return "pcm";
    case AudioFormat::kFlac: return "flac";
    case AudioFormat::kOpus: return "opus";
    case AudioFormat::kVorbis: return "vorbis";
    case AudioFormat::kMp3: return "mp3";
  }
  return "?";
}

AudioFormat parse_audio_format(const std::string& name) {
  const std::string n = lower(name);
  if (n == "ogg") return AudioFormat::kVorbis;
  for (AudioFormat f : kAllFormats)
    if (n == audio_format_name(f)) return f;
  if (n == "aac")
    fail("audio encode: aac is not supported (no AAC encoder is packaged for Debian); choose one of ", format_list());
  fail("audio encode: unknown format '", name, "'; choose one of ", format_list(), " (ogg: vorbis)");
}

bool audio_format_writable(AudioFormat f) {
  const int sf = sndfile_format(f);
  if (!sf) return true;
  SF_INFO info{};
  info.channels = 1;
  info.samplerate = 24000;
  info.format = sf;
  return sf_format_check(&info) != 0;
}

std::vector<AudioFormat> writable_audio_formats() {
  std::vector<AudioFormat> out;
  for (AudioFormat f : kAllFormats)
    if (audio_format_writable(f)) out.push_back(f);
  return out;
}

const char* audio_content_type(AudioFormat f) {
  switch (f) {
    case AudioFormat::kWav: case AudioFormat::kWavFloat: return "audio/wav";
    case AudioFormat::kPcm: return "audio/pcm";
    case AudioFormat::kFlac: return "audio/flac";
    case AudioFormat::kOpus: return "audio/opus";
    case AudioFormat::kVorbis: return "audio/ogg";
    case AudioFormat::kMp3: return "audio/mpeg";
  }
  return "application/octet-stream";
}

const char* audio_file_extension(AudioFormat f) {
  switch (f) {
    case AudioFormat::kWav: case AudioFormat::kWavFloat: return "wav";
    case AudioFormat::kPcm: return "pcm";
    case AudioFormat::kFlac: return "flac";
    case AudioFormat::kOpus: return "opus";
    case AudioFormat::kVorbis: return "ogg";
    case AudioFormat::kMp3: return "mp3";
  }
  return "bin";
}

std::string encode_audio(std::span<const float> samples, int sample_rate, AudioFormat format, const EncodeOptions& options) {
  check_rate(format, sample_rate);
  check_finite(samples, 0);
  if (format == AudioFormat::kPcm) return raw_samples(samples, false);
  if (format == AudioFormat::kWav || format == AudioFormat::kWavFloat) {
    const bool is_float = format == AudioFormat::kWavFloat;
    std::string out = wav_header(is_float, sample_rate, int64_t(samples.size()) * (is_float ? 4 : 2));
    out += raw_samples(samples, is_float);
    return out;
  }
  SndfileWriter codec(format, sample_rate, options, /*streaming=*/false);
  // In slices: libsndfile converts through a buffer of its own either way.
  constexpr size_t kSlice = size_t(1) << 16;
  for (size_t at = 0; at < samples.size(); at += kSlice)
    codec.write(samples.subspan(at, std::min(kSlice, samples.size() - at)));
  return codec.close();
}

AudioStreamEncoder::AudioStreamEncoder(AudioFormat format, int sample_rate, const EncodeOptions& options)
    : format_(format), rate_(sample_rate) {
  check_rate(format, sample_rate);
  if (sndfile_format(format)) codec_ = std::make_unique<SndfileWriter>(format, sample_rate, options, /*streaming=*/true);
}

AudioStreamEncoder::~AudioStreamEncoder() = default;

// LAME starts an MP3 with a frame of zeros that its close fills in as the Xing/LAME tag; in a
// stream it stays zeros, which readers would play as a frame of silence (and libsndfile take as
// the stream's bit rate). That frame is left out of the stream; every other byte passes.
std::string AudioStreamEncoder::emit(std::string bytes) {
  if (format_ != AudioFormat::kMp3 || head_checked_) return bytes;
  held_ += bytes;
  if (held_.size() < 4) return "";
  const size_t n = mp3_frame_bytes(reinterpret_cast<const uint8_t*>(held_.data()));
  if (n != 0 && held_.size() < n) return "";
  head_checked_ = true;
  std::string out;
  out.swap(held_);
  if (n != 0 && std::all_of(out.begin() + 4, out.begin() + std::ptrdiff_t(n), [](char c) { return c == 0; }))
    out.erase(0, n);
  return out;
}

std::string AudioStreamEncoder::push(std::span<const float> samples) {
  LFM_CHECK(!finished_, "audio encode: the ", audio_format_name(format_), " stream is already finished");
  check_finite(samples, samples_);
  std::string out;
  if (codec_) {
    codec_->write(samples);
    out = emit(codec_->file.take());
  } else {
    const bool is_float = format_ == AudioFormat::kWavFloat;
    if (format_ != AudioFormat::kPcm && bytes_ == 0) out = wav_header(is_float, rate_, -1);
    out += raw_samples(samples, is_float);
  }
  samples_ += int64_t(samples.size());
  bytes_ += int64_t(out.size());
  return out;
}

std::string AudioStreamEncoder::finish() {
  LFM_CHECK(!finished_, "audio encode: the ", audio_format_name(format_), " stream is already finished");
  finished_ = true;
  std::string out;
  if (codec_) {
    out = emit(codec_->close());
    out.insert(0, held_);  // an MP3 too short to show its first frame whole
    held_.clear();
  } else if (format_ != AudioFormat::kPcm && bytes_ == 0) {
    out = wav_header(format_ == AudioFormat::kWavFloat, rate_, -1);  // no samples: the header alone
  }
  bytes_ += int64_t(out.size());
  return out;
}

}  // namespace lfm::audio
