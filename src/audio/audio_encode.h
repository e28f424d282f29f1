// Mono float samples → the bytes of an audio file: what speech output (LFM2-Audio's 24 kHz
// waveform, Event::audio) is handed to users as. Issue 59, speech output.
//
// Formats (AudioFormat; names as OpenAI's /v1/audio/speech `response_format` where it has them):
//   wav        RIFF WAVE, PCM 16-bit (OpenAI's wav); wav_float: IEEE float 32-bit
//   pcm        raw signed 16-bit little-endian samples, no header (OpenAI's pcm)
//   flac       FLAC, 16-bit (libFLAC through libsndfile)
//   opus       Ogg Opus (libopus through libsndfile; rates 8, 12, 16, 24 or 48 kHz only)
//   vorbis     Ogg Vorbis ("ogg" is accepted as its name)
//   mp3        MPEG-1/2 layer III (LAME through libsndfile) when the linked libsndfile can write
//              it: decided at run time by sf_format_check (Debian 12's 1.2.0 can); otherwise
//              encoding it is an error naming the format and the library version.
//   OpenAI's aac is refused by name: no AAC encoder is packaged for Debian (libfdk-aac is non-free).
//
// Quantization: the integer formats (wav, pcm, flac) take round(clamp(x, -1, 1) · 32767), done
// here, so every path (whole or streamed) gives the same integers; decoders read them back as
// v / 32768 (libsndfile's and the project's decoder's convention), so a full-scale 1.0 comes back
// as 0.99997. The lossy codecs get the samples clamped to [-1, 1] as float. A NaN or infinite
// sample is refused (the whole push, before any of it is written).
//
// Streaming (AudioStreamEncoder): push(samples) returns the bytes that are final now, finish()
// the rest; the concatenation is a file a decoder reads to the same samples as encode_audio's.
//   wav        the header goes out first with the unknown-length convention streaming servers
//              use (RIFF and data sizes 0xFFFFFFFF, as OpenAI's streamed wav), then the samples
//              as they come. Readers that honour the sizes take the data to the end of the
//              stream (libsndfile does; so does the project's own decoder).
//   pcm        the samples as they come.
//   flac/opus/vorbis/mp3: libsndfile writes through virtual I/O into a buffer that is handed out
//              as it fills (the codecs emit whole frames / Ogg pages as their buffers fill, so
//              bytes come out every few thousand samples, not per push). What the writer goes
//              back to rewrite after the bytes left (FLAC's STREAMINFO totals and MD5, MP3's
//              Xing/LAME tag) cannot be changed any more: the streamed FLAC says "total samples
//              unknown" (valid FLAC, as a live encoder writes it); the streamed MP3 leaves out
//              the empty frame LAME reserves for the tag and is constant bit rate (a reader can
//              only estimate a tagless stream's length from its first frame). encode_audio's
//              files have them filled in (its MP3 is variable bit rate, with the tag).
//
// Errors are lfm::Error messages starting "audio encode:" naming the format and value.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace lfm::audio {

enum class AudioFormat { kWav, kWavFloat, kPcm, kFlac, kOpus, kVorbis, kMp3 };

// "wav", "wav_float", "pcm", "flac", "opus", "vorbis", "mp3".
const char* audio_format_name(AudioFormat f);
// The names above (case-insensitive) and "ogg" for vorbis; "aac" is refused as not supported, any
// other name with the list of formats.
AudioFormat parse_audio_format(const std::string& name);
// The formats this build can write (mp3 only when the linked libsndfile can), in the order above.
std::vector<AudioFormat> writable_audio_formats();
bool audio_format_writable(AudioFormat f);
// HTTP Content-Type: audio/wav, audio/pcm, audio/flac, audio/opus, audio/ogg, audio/mpeg.
const char* audio_content_type(AudioFormat f);
// The usual file extension, without the dot: wav, pcm, flac, opus, ogg, mp3.
const char* audio_file_extension(AudioFormat f);

struct EncodeOptions {
  // libsndfile's SFC_SET_COMPRESSION_LEVEL for flac, opus, vorbis and mp3: 0 (fastest / best
  // quality, highest bit rate) .. 1 (smallest); negative leaves libsndfile's default.
  double compression_level = -1;
};

// The whole file of `samples` (mono at sample_rate Hz). Throws lfm::Error for a NaN/Inf sample, a
// rate outside 1 Hz..384 kHz (opus: not one of its five rates), or a format this build cannot
// write. No samples give a header alone for wav and Ogg, nothing for pcm, flac (libsndfile
// writes its header with the first samples) and mp3.
std::string encode_audio(std::span<const float> samples, int sample_rate, AudioFormat format,
                         const EncodeOptions& options = {});

struct SndfileWriter;  // libsndfile's writer and its buffer (audio_encode.cpp)

class AudioStreamEncoder {
 public:
  // Checks the rate and format as encode_audio does (the error comes here, before any sample).
  AudioStreamEncoder(AudioFormat format, int sample_rate, const EncodeOptions& options = {});
  ~AudioStreamEncoder();
  AudioStreamEncoder(const AudioStreamEncoder&) = delete;
  AudioStreamEncoder& operator=(const AudioStreamEncoder&) = delete;

  // Encodes the samples; returns the bytes final now (may be empty). Throws for a NaN/Inf
  // sample (nothing of this push is written; the encoder stays usable) and after finish().
  std::string push(std::span<const float> samples);
  // Flushes the codec and returns the remaining bytes; the encoder is done afterwards.
  std::string finish();

  AudioFormat format() const { return format_; }
  int sample_rate() const { return rate_; }
  int64_t samples() const { return samples_; }  // pushed so far
  int64_t bytes() const { return bytes_; }      // handed out so far

 private:
  std::string emit(std::string bytes);  // the bytes to hand out (MP3: without LAME's empty tag frame)

  AudioFormat format_;
  int rate_;
  bool head_checked_ = false;
  std::string held_;  // MP3: the bytes before the first frame is whole
  int64_t samples_ = 0, bytes_ = 0;
  bool finished_ = false;
  std::unique_ptr<SndfileWriter> codec_;  // null for wav and pcm (written here)
};

}  // namespace lfm::audio
