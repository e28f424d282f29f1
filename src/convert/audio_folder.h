// An LFM2-Audio checkpoint folder (transformers' Lfm2AudioForConditionalGeneration layout:
// config.json with the backbone's `lfm` dict, "model.lfm.…", "model.conformer.…",
// "model.audio_adapter_….", "model.audio_embedding.…" tensors) as `lfm convert` needs it: the
// backbone and the encoder as two sources under their own names. The encoder's sizes are read from
// the tensor shapes (the folder's `encoder` dict is parse_audio_config's business, not the
// converter's); the depthformer and other audio-output tensors are left out, as llama.cpp's
// converter leaves them out.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "formats/tensor_source.h"
#include "model/audio_config.h"
#include "model/config.h"

namespace lfm::gguf {

struct AudioFolder {
  ModelConfig text;                               // the `lfm` dict
  AudioConfig audio;                              // sizes from the shapes, D = the backbone's width
  std::unique_ptr<TensorSource> text_source;         // "model.lfm.X" as "model.X" (for a Model)
  std::shared_ptr<const TensorSource> audio_source;  // binding names + "audio_embedding.…"
};

// nullopt when config.json is not a speech checkpoint (model_type "lfm2_audio" or architecture
// Lfm2AudioForConditionalGeneration). Throws lfm::Error naming the folder and what is wrong.
std::optional<AudioFolder> read_audio_folder(const std::string& folder);

}  // namespace lfm::gguf
