// Audio files and raw PCM → the mono float32 clip at the model's rate (16 kHz for LFM2(.5)-Audio)
// that compute_log_mel (log_mel.h) takes. Issue 58, speech input.
//
// Formats: decoded by libsndfile (Debian libsndfile1-dev, 1.2) from memory through its virtual I/O,
// so the server decodes uploads without temporary files. Only these containers are handed to it,
// chosen by their magic bytes first: WAV (RIFF/RIFX/RF64: PCM 8/16/24/32-bit, float, double,
// A-law/µ-law, IMA/MS ADPCM), AIFF/AIFC, FLAC, Ogg (Vorbis, Opus) and MPEG audio (MP3, with
// or without an ID3v2 tag). libsndfile knows some twenty more (PAF, NIST, IRCAM, SD2, MAT, XI, …);
// they are refused as "not recognised" so that hostile uploads reach only the common parsers.
// Samples are read as float (integer PCM normalised by libsndfile: int16 / 32768), then mixed
// down to mono as the mean of the channels (what torchaudio's / librosa's mono=True gives).
//
// Resampling: libsoxr (Debian libsoxr-dev) at SOXR_HQ — 20-bit precision, a linear-phase filter
// whose passband ends at 91.3 % of the lower Nyquist — the setting librosa.load uses by default
// (res_type "soxr_hq"), so a clip loaded here matches what librosa-based front ends feed the model
// (which resampler liquid-audio's ChatState.add_audio uses was not checked; filters differ only
// near the band edge, above the speech band at 16 kHz). No
// resampling at all when the rates are equal: the samples pass through bit for bit. The output
// has round(L · target / source) samples (soxr's one-shot length; a clip that leaves none is refused).
//
// Limits (AudioDecodeLimits), each checked before the work or memory it bounds:
//   max_bytes      the encoded bytes (a file's size is checked before it is read);
//   channels       1..max_channels, from the header;
//   sample rate    min_rate..max_rate (Hz), the source's from the header and the target's;
//   max_seconds    the duration: refused from the header's frame count when it is known, and
//                  again while reading in chunks (a header may lie or say "unknown"), so memory
//                  grows only with samples actually decoded and never past max_seconds of them.
// Truncation: a WAV/AIFF whose sample chunk claims more bytes than the file holds, and a FLAC whose
// STREAMINFO claims more frames than its frames decode to, are refused as truncated. Ogg is a
// streaming container: a cut stream gives the audio of its complete pages (libsndfile takes the
// last page it finds as the end). MP3's length is an estimate without a Xing/Info header, so a
// cut MP3 gives the frames it has. A malformed Ogg Vorbis header is refused before libsndfile sees
// it, because libsndfile 1.2 leaks the half-parsed decoder then (ogg_preflight.h).
//
// Errors are lfm::Error messages starting "audio:" and naming the problem and the value: format
// not recognised, truncated, corrupt, too long (X s > limit Y s), too many channels, bad rate,
// no samples, a NaN/Inf sample or one beyond ±1e6 (float WAV can carry them; huge values would
// overflow the resampler and the FFT downstream). Nothing here aborts the process.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace lfm::audio {

struct AudioDecodeLimits {
  double max_seconds = 600.0;            // duration of the source clip
  int max_channels = 64;
  int min_rate = 1000;                   // Hz, source and target
  int max_rate = 384000;
  int64_t max_bytes = int64_t(64) << 20;  // the encoded input
};

struct DecodedAudio {
  std::vector<float> samples;  // [N] mono, at sample_rate
  int sample_rate = 0;         // the target rate
  int source_rate = 0;
  int source_channels = 0;
  int64_t source_frames = 0;   // frames decoded at source_rate
  double duration_s = 0.0;     // source_frames / source_rate
  std::string format;          // "WAV/PCM_16", "FLAC/PCM_24", "OGG/Vorbis", "OGG/Opus", "MP3", "PCM/float32", …
};

inline constexpr int kDefaultTargetRate = 16000;

// An encoded file held in memory (an upload): magic → libsndfile → mono → target_rate.
DecodedAudio decode_audio(std::span<const uint8_t> bytes, int target_rate = kDefaultTargetRate,
                          const AudioDecodeLimits& limits = {});

// A file on disk: a regular file only (never blocks on a FIFO), refused over limits.max_bytes
// before it is read; errors name the path.
DecodedAudio load_audio_file(const std::string& path, int target_rate = kDefaultTargetRate,
                             const AudioDecodeLimits& limits = {});

// Raw interleaved PCM (the C API): [frames, channels] float32 as given (must be finite), or int16
// scaled by 1/32768. The size must be a multiple of channels; the same limits apply (max_bytes to
// the raw size).
DecodedAudio decode_pcm_f32(std::span<const float> interleaved, int channels, int sample_rate,
                            int target_rate = kDefaultTargetRate, const AudioDecodeLimits& limits = {});
DecodedAudio decode_pcm_s16(std::span<const int16_t> interleaved, int channels, int sample_rate,
                            int target_rate = kDefaultTargetRate, const AudioDecodeLimits& limits = {});

// Mono float32 from from_rate to to_rate with soxr HQ; a copy when the rates are equal. Rates must
// be positive; the caller bounds the length (the functions above do, from max_seconds).
std::vector<float> resample_mono(std::span<const float> samples, int from_rate, int to_rate);

}  // namespace lfm::audio
