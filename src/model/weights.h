// The LFM2 weight table. Large matrices are views into the (memory-mapped) checkpoint and stay
// in their stored dtype; small vectors (norms, conv taps, biases) are decoded to float32 once.
// Immutable after loading and shared by every sequence.
#pragma once

#include <string>
#include <vector>

#include "core/tensor.h"
#include "formats/tensor_source.h"
#include "model/config.h"

namespace lfm {

struct ConvWeights {
  TensorView in_proj;            // [3d, d]; rows B | C | x
  TensorView out_proj;           // [d, d]
  WeightVector kernel;     // [d, K] (HF conv.conv.weight [d, 1, K] squeezed)
  WeightVector in_bias;    // [3d] if conv_bias
  WeightVector conv_bias;  // [d]
  WeightVector out_bias;   // [d]
};

struct AttentionWeights {
  TensorView q, k, v;         // [H·hd, d], [G·hd, d], [G·hd, d]
  TensorView out;             // [d, H·hd]
  WeightVector q_norm;  // [hd]
  WeightVector k_norm;  // [hd]
};

struct FfnWeights {
  TensorView w1, w3;  // gate, up: [F, d]
  TensorView w2;      // down: [d, F]
};

struct MoeWeights {
  TensorView router;                // [E, d]
  WeightVector expert_bias;         // [E] (selection only), empty if unused
  std::vector<FfnWeights> experts;  // E experts, each [Fm, d] / [d, Fm]
};

struct LayerWeights {
  LayerKind kind = LayerKind::Conv;
  WeightVector operator_norm;  // [d]
  WeightVector ffn_norm;       // [d]
  ConvWeights conv;                  // when kind == Conv
  AttentionWeights attn;             // when kind == Attention
  FfnWeights ffn;                    // dense layers
  MoeWeights moe;                    // MoE layers (config.layer_is_moe(i))
};

struct ModelWeights {
  TensorView embed;               // [V, d]
  TensorView lm_head;             // [V, d]; the embedding when tied
  WeightVector final_norm;  // [d] (HF model.embedding_norm)
  std::vector<LayerWeights> layers;
};

// Binds every expected tensor by its Hugging Face name, checking dtype and shape; a missing,
// misshapen or unexpected tensor is an error naming it with the expected and actual shape.
ModelWeights bind_weights(const ModelConfig& cfg, const TensorSource& src);

// Every tensor name and shape the config implies (used by binding, `lfm info` and converters).
struct ExpectedTensor {
  std::string name;
  std::vector<int64_t> shape;
  bool matrix;  // consumed by matmul/embedding (may be quantized) vs a small f32-decoded vector
};
std::vector<ExpectedTensor> expected_tensors(const ModelConfig& cfg, bool include_lm_head);

}  // namespace lfm
