// llama.cpp's GGUF pair for LFM2-Audio: the language model is an ordinary lfm2 GGUF, the speech
// encoder and adapter an "mmproj" GGUF (general.architecture "clip", clip.projector_type "lfm2a",
// clip.has_audio_encoder, clip.audio.* keys). docs/design/audio_input_research.md §5.
//
// Names (binding name, model/audio_model.h ↔ mmproj), per block "conformer.layers.N." ↔ "a.blk.N.":
//   conformer.subsampling.layers.{0,2,3,5,6}  a.conv1d.{i}     Conv2d [C,1,3,3] / [C,C,1,1], F32;
//                                                              biases [C] stored [C,1,1]
//   conformer.subsampling.linear              a.pre_encode.out [d, C·mels/8]
//   feed_forward1.linear{1,2}                 ffn_up, ffn_down       norm_feed_forward1  ffn_norm
//   feed_forward2.linear{1,2}                 ffn_up_1, ffn_down_1   norm_feed_forward2  ffn_norm_1
//   norm_self_att / norm_conv / norm_out      ln1 / norm_conv / ln2
//   self_attn.{q,k,v,o}_proj                  attn_q, attn_k, attn_v, attn_out
//   self_attn.relative_k_proj                 linear_pos (no bias)
//   self_attn.bias_{u,v} [h, dh]              pos_bias_{u,v} (no ".weight")
//   conv.pointwise_conv1 [2d,d,1]             conv_pw1 [2d,d] (squeezed), F32
//   conv.depthwise_conv [d,1,k]               conv_dw [d,k] (squeezed), F32
//   conv.norm (BatchNorm)                     conv_norm: FOLDED, a = γ/√(var+1e-5), b = β − mean·a, F32
//   conv.pointwise_conv2 [d,d,1]              conv_pw2 [d,d] (squeezed), F32
//   audio_adapter_norm / _linear_1 / _linear_2  mm.a.mlp.0 / mm.a.mlp.1 / mm.a.mlp.3
// and the audio-output tensors llama.cpp's converter does not filter (it reads only the first's
// width, as the projection width, and its row count as a length limit):
//   audio_embedding.embedding [V, D]          a.position_embd
//   audio_embedding.embedding_norm [D]        a.position_embd_norm
//   audio_embedding.to_logits [V, D]          a.embd_to_logits
// Front-end constants are not stored (clip.cpp hard-codes 16 kHz, n_fft 512, window 400, hop 160),
// and clip.audio.feed_forward_length holds d_model, not the FFN width (the converter overwrites it):
// the width comes from ffn_up's shape.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "formats/gguf_reader.h"
#include "formats/tensor_source.h"
#include "model/audio_config.h"

namespace lfm {

// The encoder's tensors under binding names with PyTorch shapes (the subsampling, each block, the
// adapter). `running_stats`: the BatchNorm's running_mean / running_var are listed (a checkpoint
// folder); without them conv.norm.{weight,bias} are the folded scale and shift (an mmproj).
struct AudioTensor {
  std::string name;
  std::vector<int64_t> shape;
};
std::vector<AudioTensor> lfm2a_tensor_layout(const AudioConfig& cfg, bool running_stats);

// "conformer.layers.3.self_attn.q_proj.weight" ↔ "a.blk.3.attn_q.weight" (nullopt: not in the
// layout; the BatchNorm's running statistics have no mmproj name). The audio-output tensors
// "audio_embedding.…" map too (they are written, and skipped on reading).
std::optional<std::string> audio_mmproj_name(const std::string& binding_name);
std::optional<std::string> audio_binding_name(const std::string& mmproj_name);
// The shape (PyTorch order) an mmproj stores a binding tensor of `shape` in, as llama.cpp's
// converter reshapes it: subsampling biases [C] → [C,1,1], pointwise convs [o,i,1] → [o,i], the
// depthwise conv [d,1,k] → [d,k]; others unchanged.
std::vector<int64_t> audio_mmproj_stored_shape(const std::string& binding_name, const std::vector<int64_t>& shape);

// Whether an mmproj GGUF holds LFM2-Audio's encoder (clip.projector_type "lfm2a").
bool is_audio_mmproj(const gguf::GgufFile& f);

// The encoder config an lfm2a mmproj describes: sizes from the clip.audio.* keys, the FFN width,
// conv kernel and subsampling channels from tensor shapes, the front end LFM2-Audio's (LogMelConfig
// defaults with the file's mel bins). The text side comes from the language model: its hidden size
// (checked against clip.audio.projection_dim) and the audio placeholder id. Throws lfm::Error
// naming the missing or bad key or tensor.
AudioConfig audio_config_from_mmproj(const gguf::GgufFile& f, int64_t text_hidden_size, int32_t audio_token_id);

// The mmproj's encoder tensors under binding names and PyTorch shapes (views into the mapped file:
// conv biases [C,1,1] → [C], conv_pw [o,i] → [o,i,1], conv_dw [d,k] → [d,1,k]); the folded
// BatchNorm as "conv.norm.{weight,bias}" without running statistics; the audio-output tensors
// left out. Every layout tensor must be present with its shape, and no tensor may be unknown.
std::shared_ptr<const TensorSource> audio_mmproj_tensor_source(std::shared_ptr<const gguf::GgufFile> f,
                                                               const AudioConfig& cfg);

}  // namespace lfm
