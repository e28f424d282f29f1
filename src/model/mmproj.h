// llama.cpp's GGUF pair for LFM2-VL: the language model is an ordinary lfm2 GGUF, the vision tower
// and projector a separate "mmproj" GGUF (general.architecture "clip", clip.projector_type
// "lfm2"). Names there: v.patch_embd (a conv kernel [D, 3, p, p] in PyTorch order: lfm's linear
// patch embedding permuted), v.position_embd, v.blk.N.{ln1,attn_q,attn_k,attn_v,attn_out,ln2,
// ffn_up,ffn_down}, v.post_ln, mm.input_norm, mm.1, mm.2 (as llama.cpp's converter writes them).
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "formats/gguf_reader.h"
#include "formats/tensor_source.h"
#include "model/vision_config.h"

namespace lfm {

// "vision.encoder.layers.3.mlp.fc1.weight" ↔ "v.blk.3.ffn_up.weight" (nullopt: not in the layout).
std::optional<std::string> mmproj_name_from_lfm(const std::string& name);
std::optional<std::string> lfm_name_from_mmproj(const std::string& name);

// The vision config an mmproj GGUF describes; the text side (its hidden size, the image token id)
// comes from the language model. Throws lfm::Error naming a missing or bad clip.* key.
VisionConfig vision_config_from_mmproj(const gguf::GgufFile& f, int64_t text_hidden_size, int32_t image_token_id);

// The mmproj's tensors under lfm's names ("vision.…", "projector.…") and PyTorch shapes; the
// patch embedding is decoded and permuted into lfm's [D, p·p·3] (row, column, channel) layout.
std::shared_ptr<const TensorSource> mmproj_tensor_source(std::shared_ptr<const gguf::GgufFile> f,
                                                         const VisionConfig& cfg);

}  // namespace lfm
