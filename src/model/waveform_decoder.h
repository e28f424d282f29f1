// Speech output's last stage behind one interface: Mimi codes [frames, 8] → 24 kHz waveform.
// Two implementations: LFM2.5-Audio's bundled detokenizer (model/detokenizer.h: an LFM2 stack and
// an iSTFT) and Kyutai's Mimi decoder, which LFM2-Audio-1.5B names (model/mimi.h). The engine,
// the CLI and the server see only this interface (Model::detokenizer()).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <utility>
#include <vector>

namespace lfm {

class Backend;

// Batched streaming state: up to max_streams streams, each fed frames as they are generated; the
// samples handed out, concatenated per stream, are the decoder's decode() of all its frames.
class WaveformStreams {
 public:
  virtual ~WaveformStreams() = default;
  // A new stream's id; throws lfm::Error when every stream is open.
  virtual int open() = 0;
  // Frees the stream (finished or not). An unknown id is an error.
  virtual void close(int stream) = 0;
  // One batched step: new_frames[i] = (stream, codes [n, 8] frame-major; n may be 0);
  // samples_out[i] gets that stream's samples that are final now. Everything is checked before
  // any work (codes in range, whole frames, open unfinished streams, max_frames): a refused push
  // changes no stream.
  virtual void push(std::span<const std::pair<int, std::span<const int32_t>>> new_frames,
                    std::vector<std::vector<float>>& samples_out) = 0;
  // The stream's last samples (its end makes them final); push is refused afterwards.
  virtual std::vector<float> finish(int stream) = 0;
  // The most frames one stream may take in all.
  virtual int64_t max_frames() const = 0;
  virtual int64_t open_streams() const = 0;
};

class WaveformDecoder {
 public:
  virtual ~WaveformDecoder() = default;
  virtual int sample_rate() const = 0;
  virtual int64_t samples_per_frame() const = 0;
  // Most frames one sequence may have.
  virtual int64_t max_frames() const = 0;
  // codes [frames, 8] frame-major → samples [frames · samples_per_frame()]; lfm::Error naming the
  // offending value on a code out of range, a length not whole frames, too many frames.
  virtual std::vector<float> decode(Backend& be, std::span<const int32_t> codes) const = 0;
  // Streaming state on `be` for up to max_streams streams of at most max_frames frames each.
  virtual std::unique_ptr<WaveformStreams> streams(Backend& be, int64_t max_streams, int64_t max_frames) const = 0;
};

}  // namespace lfm
