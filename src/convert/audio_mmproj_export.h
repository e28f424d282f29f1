// Writing LFM2-Audio's speech encoder and adapter as llama.cpp's lfm2a mmproj GGUF (the layout and
// names: model/audio_mmproj.h): clip.* / clip.audio.* keys as clip.cpp reads them, conv tensors
// (subsampling, the conv module's pointwise / depthwise convs and BatchNorm) and vectors in F32,
// the BatchNorm folded into a scale and shift, other matrices F16 (F32 when asked).
#pragma once

#include <string>

#include "convert/mmproj_export.h"
#include "formats/tensor_source.h"
#include "model/audio_config.h"

namespace lfm::gguf {

// `audio` names the tensors with binding names (model/audio_model.h), the BatchNorm with its
// running statistics (folded here with cfg.batch_norm_eps) or already folded (no running_mean),
// plus "audio_embedding.embedding.weight" [V, D] (required: llama.cpp reads the projection width
// from it), ".embedding_norm.weight" and ".to_logits.weight" where present. Written atomically.
MmprojExportStats write_audio_mmproj_gguf(const std::string& path, const AudioConfig& cfg, const TensorSource& audio,
                                          bool f32, const std::string& name);

}  // namespace lfm::gguf
