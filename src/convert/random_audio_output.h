// The speech-OUTPUT half of a random LFM2.5-Audio checkpoint (`lfm gen-random --audio lfm2.5-audio`
// or `tiny`, folders only): the depthformer that turns the backbone's hidden state into one audio
// frame of `codebooks` codes, and the `audio_detokenizer/` sub-folder (an LFM2 with sliding-window
// attention, codes → 1282 log-magnitude/phase bins per 1/75 s → iSTFT) that turns frames into 24 kHz
// samples. Names and shapes are transformers' lfm2_audio ones; real sizes from
// docs/design/speech_output_research.md §2–§3 (llama.cpp's liquid-audio runner hard-codes the same).
// Benchmarking and format tests only: random weights make noise, but finite noise — the scales keep
// a forward pass far from overflow (log-magnitudes ~ N(0, 0.45²), so exp() stays near 1).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "convert/random_checkpoint.h"
#include "model/weights.h"

namespace lfm::gguf {

// Whether an audio shape carries the speech-output weights: "lfm2.5-audio" and "tiny" do;
// "lfm2-audio" (the older model decodes with Mimi, which is not generated here) does not.
bool random_audio_has_output(const std::string& audio);

// The config's `depthformer` dict (transformers' Lfm2AudioDepthConfig, every field written):
// lfm2.5-audio: 6 layers, dim 1024, 32 heads, 8 kv heads (head_dim 32), FFN 2816, tie true;
// tiny: 2 layers, dim 32, 4 heads, 2 kv heads (head_dim 8), FFN 64, tie true.
nlohmann::json random_depthformer_config(const std::string& audio);

// The folder's depthformer tensors for a backbone of width D = text_hidden (d = depth dim,
// hd = head dim, kv = kv heads, f = FFN, C = codebooks, V = audio vocabulary incl. end-of-audio):
//   model.depthformer.layers.<i>.operator.qkv_proj.weight              [d + 2·kv·hd, d]
//   model.depthformer.layers.<i>.operator.out_proj.weight              [d, d]
//   model.depthformer.layers.<i>.operator.bounded_attention.{q,k}_layernorm.weight  [hd]
//   model.depthformer.layers.<i>.feed_forward.w{1,3}.weight            [f, d];  w2 [d, f]
//   model.depthformer.layers.<i>.{operator_norm,ffn_norm}.weight       [d]
//   model.depth_linear.weight [C·d, D], .bias [C·d]
//   model.depth_embeddings.<c>.embedding.weight [V, d], .embedding_norm.weight [d]
// The depth heads are tied (to_logits = embedding), so no to_logits is stored, as transformers
// saves them. Empty for a shape without output weights.
std::vector<ExpectedTensor> random_audio_output_tensors(const std::string& audio, int64_t text_hidden);

// audio_detokenizer/config.json: an Lfm2Config (model_type lfm2, architectures
// ["Lfm25AudioTokenizer"] as llama.cpp's converter dispatches on it) with layer_types holding
// "sliding_attention", sliding_window, output_size 1282 (= 2·(1280/2 + 1): log|X| then phase).
// lfm2.5-audio: hidden 512, 8 layers c c S c S c S c, 16 heads, 8 kv heads, FFN 3328 auto-adjusted
// to 2304, window 30, vocab 65536; tiny: hidden 32, 4 layers c S c S, 4 heads, 2 kv heads, FFN 64,
// window 12 (two frames: short tests reach past it), vocab 16.
nlohmann::json random_detokenizer_config(const std::string& audio);

// The detokenizer's tensors: emb.emb.weight [C·(V−1), hidden] (the mean of one row per codebook;
// 8·2048 rows for the real model), lfm.* in transformers' Lfm2Model names (lfm.embed_tokens is
// unused by the detokenizer but present in the released file and required by llama.cpp's loader),
// lin.{weight [1282, hidden], bias [1282]}, istft.window [1280] (a periodic Hann window, F32).
std::vector<ExpectedTensor> random_detokenizer_tensors(const std::string& audio);

// Writes <dir>/audio_detokenizer/{config.json, model.safetensors} (opt.hf_dtype; the window F32),
// values a pure function of (opt.seed, tensor name, row, column) as the rest of the folder.
void write_random_detokenizer(const std::string& dir, const RandomCheckpointOptions& opt);

}  // namespace lfm::gguf
