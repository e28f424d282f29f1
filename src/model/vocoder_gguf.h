// LFM2.5-Audio's speech output from llama.cpp's "vocoder" GGUF (its liquid-audio runner's -mv file,
// written by tools/liquid-audio/convert_vocoder_to_gguf.py; docs/design/speech_output_research.md
// §2.3): no llama architecture (general.architecture is a sentence saying so), the u32 keys
// depthformer_n_layer and depthformer_n_embd, and the checkpoint's own tensor names without the
// "model." prefix — depthformer.*, depth_linear.*, depth_embeddings.* (to_logits always stored),
// audio_embedding.* — with "bounded_attention" shortened to "attention"; plus every tensor of
// the checkpoint's audio_detokenizer/ (emb.emb.weight, lfm.*, lin.*, istft.window). Vectors and
// biases F32, the detokenizer's conv taps squeezed to [d, k] F32, matrices in the file's type.
#pragma once

#include <memory>
#include <string>

#include "formats/gguf_reader.h"
#include "formats/tensor_source.h"
#include "model/config.h"
#include "model/speech_out.h"

namespace lfm {

// Whether a GGUF is such a vocoder file (the depthformer keys).
bool is_vocoder_gguf(const gguf::GgufFile& f);
// The speech output head's config: the depthformer's layers and width from the keys, the rest from
// the tensors' shapes (head size from q_layernorm, key/value heads from qkv_proj, the FFN from w1,
// codebooks and codes from depth_embeddings); token ids as the released checkpoints have them.
SpeechOutConfig speech_out_config_from_vocoder(const gguf::GgufFile& f, int64_t text_hidden);
// Its speech-output tensors under SpeechOutModel's names (model/speech_out.h), shapes checked.
std::shared_ptr<const TensorSource> vocoder_speech_out_source(std::shared_ptr<const gguf::GgufFile> f);
// Its detokenizer tensors under their checkpoint names (emb.emb.weight, lfm.…, lin.…), the conv
// taps as [d, 1, k] again.
std::shared_ptr<const TensorSource> vocoder_detokenizer_source(std::shared_ptr<const gguf::GgufFile> f);
// Whether it carries a detokenizer (emb.emb.weight), and that LFM2 stack's config from the shapes:
// layers and their kinds (a conv layer has conv.in_proj, the others are sliding-window attention
// with transformers' default window of 30), widths, heads from the q/k norms and projections; RMS
// eps 1e-5 and RoPE θ 1e6 as the released detokenizer has them.
bool vocoder_has_detokenizer(const gguf::GgufFile& f);
ModelConfig detokenizer_config_from_vocoder(const gguf::GgufFile& f);

}  // namespace lfm
