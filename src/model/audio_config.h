// LFM2-Audio / LFM2.5-Audio speech input: the FastConformer encoder's and the adapter's shapes, the
// front end's constants and the audio placeholder, read from a checkpoint's config.json (the
// `encoder` dict in Parakeet form or in the original NeMo form, `preprocessor`, `audio_token_id`)
// or from llama.cpp's `lfm2a` mmproj GGUF keys. docs/design/audio_input_research.md §1–§4.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "audio/log_mel.h"

namespace lfm {

struct AudioConfig {
  // FastConformer encoder (Parakeet names; NeMo's in brackets)
  int64_t hidden_size = 0;             // d [d_model]
  int64_t n_layers = 0;                // [n_layers]
  int64_t n_heads = 0;                 // [n_heads]; head_dim = d / n_heads
  int64_t intermediate_size = 0;       // feed-forward width [d_model · ff_expansion_factor]
  int64_t num_mel_bins = 128;          // [feat_in]; a multiple of subsampling_factor
  int64_t conv_kernel_size = 9;        // depthwise conv of the conv module (odd)
  int64_t subsampling_channels = 256;  // C of the ×8 dw_striding subsampling
  int64_t subsampling_factor = 8;      // three stride-2 stages
  int64_t max_position_embeddings = 5000;  // the most encoder rows (frames / 8) a clip may have
  bool scale_input = false;            // [xscaling]: x·√d after subsampling
  double layer_norm_eps = 1e-5;
  double batch_norm_eps = 1e-5;
  // Adapter: LayerNorm(d) → Linear(d, D) → GELU (erf) → Linear(D, D)
  int64_t text_hidden_size = 0;        // D: the language model's hidden size
  int32_t audio_token_id = 133;        // the placeholder each audio row replaces (<|reserved_123|>)
  // The front end (preprocessor): what turns samples into the encoder's [T, num_mel_bins] input.
  audio::LogMelConfig front_end{};

  int64_t head_dim() const { return hidden_size / n_heads; }
  // Encoder rows (= audio tokens) for T feature frames: ceil(T / 8) through three stride-2 convs.
  int64_t tokens_for_frames(int64_t frames) const;
};

// Whether a config.json is a speech checkpoint (model_type "lfm2_audio" or architecture
// Lfm2AudioForConditionalGeneration).
bool is_audio_config(const nlohmann::json& j);
// The backbone's config as parse_model_config reads it: the `lfm` dict.
nlohmann::json audio_text_config_of(const nlohmann::json& j);
// Throws lfm::Error naming the key and value on anything missing or out of range (an encoder that
// is not rel_pos / dw_striding / batch_norm, a front end other than per-feature-normalised log-mel
// with a Hann window, sizes that do not divide).
AudioConfig parse_audio_config(const nlohmann::json& j);

}  // namespace lfm
