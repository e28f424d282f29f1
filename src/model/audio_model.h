// The LFM2-Audio speech encoder: the FastConformer (×8 depthwise-striding conv subsampling, then
// blocks of ½·FFN, relative-position self-attention, conv module, ½·FFN, LayerNorm) and the adapter
// (LayerNorm, Linear, GELU, Linear) into the language model's embedding space: one clip's features
// [T, num_mel_bins] become tokens_for_frames(T) rows [N, D] that replace the audio placeholders.
// Runs on the same Backend ops as the language model. docs/design/audio_input_research.md §3–§4.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "formats/tensor_source.h"
#include "kernels/backend.h"
#include "model/audio_config.h"
#include "model/forward.h"

namespace lfm {

// One clip as the front end makes it: features [frames, num_mel_bins] time-major.
struct AudioClip {
  int64_t frames = 0;
  std::span<const float> features;
};

class AudioModel;

// Tensor names the encoder binds (from a checkpoint folder's "model.conformer.…" /
// "model.audio_adapter_…", NeMo's "conformer.…" / "audio_adapter.model.…", or an lfm2a mmproj's
// "a.…" / "mm.a.…", renamed to these): "conformer.subsampling.layers.{0,2,3,5,6}.{weight,bias}",
// "conformer.subsampling.linear.{weight,bias}", "conformer.layers.<i>.…" as transformers' Parakeet
// names them, "audio_adapter_norm.{weight,bias}", "audio_adapter_linear_{1,2}.{weight,bias}".
// A conv module's BatchNorm is either "conv.norm.{weight,bias,running_mean,running_var}" or, as
// llama.cpp stores it, already folded into "conv.norm.{weight,bias}" (scale, shift) with no running
// statistics.

class AudioModel {
 public:
  // The backend prepares the matrices as it does the language model's (null: the CPU preparation).
  AudioModel(AudioConfig cfg, std::shared_ptr<const TensorSource> source, Backend* backend);
  ~AudioModel();

  const AudioConfig& config() const { return cfg_; }
  // Audio tokens (encoder rows) of a clip of `frames` feature frames.
  int64_t tokens_for(int64_t frames) const { return cfg_.tokens_for_frames(frames); }
  // Each clip's adapter rows [tokens_for(frames), D] on the host. `observer` sees
  // "audio.subsampling", "audio.layers.<i>", "audio.encoder" (the encoder output [N, d]) and
  // "audio.adapter". AudioEncoding below does the same in stages.
  std::vector<std::vector<float>> encode(Backend& be, std::span<const AudioClip> clips,
                                         const ActivationObserver& observer = {}) const;
  size_t weight_bytes() const;

 private:
  friend class AudioEncoding;
  struct Weights;
  AudioConfig cfg_;
  std::shared_ptr<const TensorSource> source_;
  std::unique_ptr<Weights> w_;
};

// One encode() call split into stages that can run in different scheduler steps (the
// subsampling, each block, then the adapter and download), so requests decoding beside a long
// clip are not held up for the whole encoding. The clips' features (and the model) must outlive it.
class AudioEncoding {
 public:
  AudioEncoding(const AudioModel& model, Backend& be, std::vector<AudioClip> clips,
                ActivationObserver observer = {});
  ~AudioEncoding();
  int64_t stages() const;
  int64_t stages_done() const { return next_; }
  bool done() const { return next_ == stages(); }
  // Runs the next stage (none when done). Throws lfm::Error as encode() does.
  void run_stage();
  // Once done: each clip's rows [tokens_for(frames), D] (moved out).
  std::vector<std::vector<float>> take();

 private:
  struct Buffers;
  const AudioModel& model_;
  Backend& be_;
  std::vector<AudioClip> clips_;
  ActivationObserver observer_;
  int64_t next_ = 0;
  std::unique_ptr<Buffers> buf_;
  std::vector<std::vector<float>> out_;
};

// An LFM2-Audio checkpoint folder's speech side, unprepared (for converters; model/model.cpp): its config and the
// speech encoder's and adapter's tensors under AudioModel's binding names (model/audio_model.h).
// nullopt for a folder that is not an LFM2-Audio checkpoint.
struct AudioCheckpoint {
  AudioConfig config;
  std::shared_ptr<const TensorSource> source;
};
std::optional<AudioCheckpoint> open_audio_checkpoint(const std::string& folder);

}  // namespace lfm
