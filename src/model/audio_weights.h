// The speech encoder's weights as its ops read them (private to model/audio_*.cpp): bound from the
// binding names of model/audio_model.h, with what can be done once done at load — each conv
// module's BatchNorm folded into its depthwise conv, the ½ of the macaron FFNs folded into their
// second linear, the subsampling linear's columns put in the channels-last order of the convs.
#pragma once

#include <memory>
#include <vector>

#include "core/tensor.h"
#include "kernels/weight_set.h"
#include "model/audio_model.h"

namespace lfm {

struct AudioFfnWeights {
  WeightVector norm_w, norm_b;  // [d]
  TensorView up, down;          // [I, d]; [d, I] times ½
  WeightVector up_b, down_b;    // [I]; [d] times ½
};

struct AudioLayerWeights {
  AudioFfnWeights ff1, ff2;
  WeightVector att_norm_w, att_norm_b;    // [d]
  TensorView q, k, v, o, pos;             // [d, d] (pos: linear_pos, no bias)
  WeightVector q_b, k_b, v_b, o_b;        // [d]
  WeightVector bias_u, bias_v;            // [H, dh]
  WeightVector conv_norm_w, conv_norm_b;  // [d]
  TensorView pw1, pw2;                    // [2d, d], [d, d]
  WeightVector pw1_b, pw2_b;              // [2d], [d]
  WeightVector dw, dw_b;                  // [d, K], [d]: the depthwise conv with the BatchNorm folded in
  WeightVector out_norm_w, out_norm_b;    // [d]
};

struct AudioModel::Weights {
  // ×8 subsampling, channels last: conv0 (1 → C, 3×3 /2), conv2 (depthwise /2), conv3 (1×1),
  // conv5 (depthwise /2), conv6 (1×1); linear [d, F/8 · C] with columns (f, c).
  WeightVector conv0_w, conv0_b, conv2_w, conv2_b, conv5_w, conv5_b;  // [C, 3, 3], [C]
  TensorView conv3, conv6;                                            // [C, C]
  WeightVector conv3_b, conv6_b;                                      // [C]
  TensorView linear;                                                  // [d, F/8 · C]
  WeightVector linear_b;                                              // [d]
  WeightVector input_scale;                                           // [d] of √d when scale_input
  std::vector<AudioLayerWeights> layers;
  WeightVector adapter_norm_w, adapter_norm_b;  // [d]
  TensorView adapter1, adapter2;                // [D, d], [D, D]
  WeightVector adapter1_b, adapter2_b;          // [D]
  std::vector<std::vector<uint8_t>> owned;      // the bytes of the matrices made at load
  std::unique_ptr<PreparedWeights> prepared;
};

}  // namespace lfm
