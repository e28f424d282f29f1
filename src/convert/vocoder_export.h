// Writing an LFM2.5-Audio checkpoint's speech output as llama.cpp's vocoder GGUF (the liquid-audio
// runner's -mv file; the layout: model/vocoder_gguf.h): the depthformer, depth_linear, the depth
// embeddings (each codebook's to_logits written even when tied, as the runner requires) and
// audio_embedding, plus every tensor of the audio_detokenizer/ folder when there is one.
#pragma once

#include <string>

#include "convert/mmproj_export.h"
#include "convert/quant_policy.h"
#include "formats/tensor_source.h"
#include "model/speech_out.h"

namespace lfm::gguf {

// The matrices' type for a file type: f32/f16/bf16 as such, Q4_* → Q4_0, other quantized types →
// Q8_0 (the types llama.cpp's vocoder converter offers); rows that do not fit the blocks stay F16.
DType vocoder_matrix_type(FileType ft);

// `checkpoint`: the folder's tensors (transformers' "model.…" names or the original ones);
// `detokenizer`: the audio_detokenizer/ folder's tensors, or null. Written atomically.
MmprojExportStats write_vocoder_gguf(const std::string& path, const SpeechOutConfig& cfg, const TensorSource& checkpoint,
                                     const TensorSource* detokenizer, FileType ft, const std::string& name);

}  // namespace lfm::gguf
