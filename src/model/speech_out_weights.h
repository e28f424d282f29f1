// The speech output head's weights as its ops read them (private to model/speech_out.cpp and
// model/depth_decoder.cpp). q and k rows are stored per head in rotate-half order (speech_out.cpp).
#pragma once

#include <memory>
#include <vector>

#include "core/tensor.h"
#include "kernels/weight_set.h"
#include "model/speech_out.h"

namespace lfm {

struct DepthLayerWeights {
  WeightVector attn_norm, ffn_norm;  // [dim]
  TensorView q, k, v, out;           // [dim, dim], [kv, dim], [kv, dim], [dim, dim]
  WeightVector q_norm, k_norm;       // [head_dim], permuted like q and k
  TensorView w1, w3, w2;             // [ffn, dim], [ffn, dim], [dim, ffn]
};

struct DepthCodebookWeights {
  TensorView embedding;  // [audio_vocab, dim]: code c−1's embedding, added to step c's input
  WeightVector norm;     // [dim]
  TensorView head;       // [audio_vocab, dim]: the logits (the embedding itself when tied)
};

struct SpeechOutModel::Weights {
  TensorView audio_embedding;        // [codebooks · audio_vocab, D], the stored bytes (host frame sums)
  TensorView audio_embedding_table;  // the same, as the backend prepares it (unused by the host)
  TensorView depth_linear;           // [codebooks · dim, D]
  WeightVector depth_linear_b;       // [codebooks · dim]
  WeightVector inv_freq;             // [head_dim / 2]
  std::vector<DepthLayerWeights> layers;
  std::vector<DepthCodebookWeights> codebooks;
  std::vector<std::vector<uint8_t>> owned;  // the permuted q/k and split v rows
  std::unique_ptr<PreparedWeights> prepared;
};

}  // namespace lfm
