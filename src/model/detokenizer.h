// LFM2.5-Audio's bundled detokenizer (the checkpoint's `audio_detokenizer/` folder, transformers'
// Lfm2AudioDetokenizer): Mimi codes → 24 kHz mono waveform, 1920 samples per frame.
//
//   codes [frames, 8] (0..2047) → embedding: the mean of the 8 codebooks' rows of emb.emb.weight
//   [8 · 2048, d] (codebook c's code x is row c · 2048 + x) → ×6 nearest upsampling (frame f →
//   rows 6f .. 6f+5) → the LFM2 stack (lfm.*: conv and sliding-window attention layers, run by
//   the project's Forward on the rows as embeddings) → final norm → lin [1282, d] + bias →
//   rows [6 · frames, 1282] = log-magnitude [641] | phase [641] → InverseStft (audio/istft.h:
//   n_fft 1280, hop 320, Hann window, "same" padding) → 6 · 320 = 1920 samples per frame.
//
// Every stage is causal (the conv, the attention with its window, the iSTFT's overlap-add), so
// the waveform can be streamed: DetokenizerStreams decodes several streams in one batched step
// per call, and the samples it hands out, concatenated, are decode()'s bits (on a backend with
// Backend::bitwise_batch_invariant; the CPU backends are).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "formats/tensor_source.h"
#include "kernels/backend.h"
#include "model/model.h"
#include "model/waveform_decoder.h"

namespace lfm {

class Detokenizer : public WaveformDecoder {
 public:
  static constexpr int64_t kCodebooks = 8, kCodes = 2048, kUpsample = 6, kSpectrumWidth = 1282;

  // The folder holds config.json (an Lfm2Config dict: layer_types with "sliding_attention",
  // sliding_window (30 when absent, as transformers), output_size 1282) and model.safetensors
  // (emb.emb.weight, lfm.*, lin.weight, lin.bias, istft.window). options.backend prepares the
  // weights as for a language model (null: the CPU preparation, for every CPU backend).
  static std::unique_ptr<Detokenizer> load(const std::string& folder, const LoadOptions& options = {});
  // The same from tensors under the folder's names (emb.emb.weight, lfm.…, lin.…, istft.window)
  // and the stack's config (e.g. llama.cpp's vocoder GGUF: model/vocoder_gguf.h).
  static std::unique_ptr<Detokenizer> load_source(ModelConfig cfg, std::shared_ptr<const TensorSource> source,
                                                  const LoadOptions& options = {});
  ~Detokenizer() override;

  int sample_rate() const override { return 24000; }
  int64_t samples_per_frame() const override;  // 1920
  const ModelConfig& config() const;
  // Most frames one sequence may have (the stack's positions: 6 per frame).
  int64_t max_frames() const override;

  // Intermediate results of decode(), for tests: the upsampled rows [6 · frames, d] (the
  // stack's input), the final normed hidden rows [6 · frames, d], lin's output [6 · frames, 1282].
  struct Trace {
    std::vector<float> upsampled, hidden, spectrum;
  };
  // codes [frames, 8] frame-major, each in [0, 2048) → samples [frames · 1920]. Throws lfm::Error
  // naming the offending value (a code out of range, a length not a multiple of 8, too many frames).
  std::vector<float> decode(Backend& be, std::span<const int32_t> codes, Trace* trace) const;
  std::vector<float> decode(Backend& be, std::span<const int32_t> codes) const override {
    return decode(be, codes, nullptr);
  }
  // A DetokenizerStreams.
  std::unique_ptr<WaveformStreams> streams(Backend& be, int64_t max_streams, int64_t max_frames) const override;

 private:
  friend class DetokenizerStreams;
  struct Impl;
  explicit Detokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Batched streaming on one backend: up to max_streams streams, each fed frames as they are
// generated; one push() is one Forward step for every stream in it.
class DetokenizerStreams : public WaveformStreams {
 public:
  // max_frames: the most frames one stream may take in all (each stream keeps K/V for every row:
  // keys older than the attention window stay in its paged cache, unread; the pool is sized for
  // max_streams × max_frames).
  DetokenizerStreams(const Detokenizer& detokenizer, Backend& be, int64_t max_streams, int64_t max_frames = 1500);
  ~DetokenizerStreams() override;

  // A new stream's id; throws lfm::Error when max_streams are open.
  int open() override;
  // Frees the stream (finished or not). An unknown id is an error.
  void close(int stream) override;
  // One batched step: new_frames[i] = (stream, codes [n, 8] frame-major) (a stream at most once;
  // n may be 0); samples_out[i] gets the samples of that stream that are final now (1920 per
  // frame, the first 480 held back until finish). Everything is checked before any work: codes
  // in range, lengths, open and unfinished streams, max_frames.
  void push(std::span<const std::pair<int, std::span<const int32_t>>> new_frames,
            std::vector<std::vector<float>>& samples_out) override;
  // The stream's last samples (its end makes them final); push is refused afterwards.
  std::vector<float> finish(int stream) override;
  int64_t max_frames() const override { return max_frames_; }
  int64_t open_streams() const override;

 private:
  struct Stream;
  Stream& stream(int id, const char* what);
  const Detokenizer& det_;
  Backend& be_;
  int64_t max_frames_;
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace lfm
