// The LFM2-VL image encoder: a SigLIP2 NaFlex vision transformer over each tile's patches at its
// own grid (position embeddings resized to it), then the projector (pixel unshuffle, LayerNorm,
// Linear, GELU, Linear) into the language model's embedding space. Runs on the same Backend ops
// as the language model, all tiles of a call in one packed batch (attention stays inside a tile).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <utility>
#include <vector>

#include "formats/tensor_source.h"
#include "kernels/backend.h"
#include "kernels/weight_set.h"
#include "model/forward.h"
#include "model/vision_config.h"

namespace lfm {

// One tile as the preprocessor makes it: patches [grid_h · grid_w, p·p·channels], patches in row-major
// grid order, each flattened (row, column, channel).
struct VisionTile {
  int64_t grid_h = 0, grid_w = 0;
  std::span<const float> patches;
};

struct VisionLayerWeights {
  WeightVector ln1_w, ln1_b, ln2_w, ln2_b;      // [D]
  TensorView q, k, v, out;                        // [D, D]
  WeightVector q_b, k_b, v_b, out_b;              // [D]
  TensorView fc1, fc2;                            // [I, D], [D, I]
  WeightVector fc1_b, fc2_b;                      // [I], [D]
};

class VisionModel {
 public:
  // `source` names the tensors "vision.…" and "projector.…" (vl_vision_prefixes). The backend
  // prepares the matrices as it does the language model's (null: the CPU preparation).
  VisionModel(VisionConfig cfg, std::shared_ptr<const TensorSource> source, Backend* backend);

  const VisionConfig& config() const { return cfg_; }
  // Tokens a tile of grid_h × grid_w patches becomes (after the pixel unshuffle).
  int64_t tokens_for(int64_t grid_h, int64_t grid_w) const;
  // Each tile's image-token embeddings [tokens_for(tile), text hidden], on the host. Tiles must have
  // grids divisible by the downsample factor. `observer` sees "vision.embeddings",
  // "vision.layers.<i>", "vision.post_layernorm" and "projector" of the packed batch.
  // VisionEncoding below does the same in stages.
  std::vector<std::vector<float>> encode(Backend& be, std::span<const VisionTile> tiles,
                                         const ActivationObserver& observer = {}) const;
  // The position embeddings resized to a grid [grid_h · grid_w, D] (bilinear, antialiased, as
  // transformers' Siglip2VisionEmbeddings.resize_positional_embeddings).
  std::vector<float> position_embeddings(int64_t grid_h, int64_t grid_w) const;
  size_t weight_bytes() const;

 private:
  friend class VisionEncoding;
  VisionConfig cfg_;
  std::shared_ptr<const TensorSource> source_;
  TensorView patch_w_;
  WeightVector patch_b_;
  std::vector<float> pos_table_;  // [grid, grid, D] host: resized per tile shape
  std::vector<VisionLayerWeights> layers_;
  WeightVector post_ln_w_, post_ln_b_;
  WeightVector proj_ln_w_, proj_ln_b_;  // [4D] when projector_layernorm
  TensorView proj1_, proj2_;            // [P, 4D], [d_text, P]
  WeightVector proj1_b_, proj2_b_;
  std::unique_ptr<PreparedWeights> prepared_;
  mutable std::mutex pos_mu_;
  mutable std::map<std::pair<int64_t, int64_t>, std::vector<float>> pos_cache_;
};

// One encode() call split into stages that can run in different scheduler steps, so that requests
// decoding beside an image are not held up for the whole encoding: the patch embedding, each
// encoder layer, then the post-LayerNorm, projector and download. The packed activations stay in
// the backend's buffers between stages. The tiles' patches (and the model) must outlive it.
class VisionEncoding {
 public:
  VisionEncoding(const VisionModel& model, Backend& be, std::vector<VisionTile> tiles,
                 ActivationObserver observer = {});
  int64_t stages() const { return static_cast<int64_t>(model_.layers_.size()) + 2; }
  int64_t stages_done() const { return next_; }
  bool done() const { return next_ == stages(); }
  // Runs the next stage (none when done). Throws lfm::Error as encode() does.
  void run_stage();
  // Once done: each tile's embeddings [tokens_for(tile), text hidden] (moved out).
  std::vector<std::vector<float>> take();

 private:
  void observe(const std::string& name, const float* data, int64_t rows, int64_t cols);

  const VisionModel& model_;
  Backend& be_;
  std::vector<VisionTile> tiles_;
  ActivationObserver observer_;
  std::vector<int64_t> seg_;         // packed rows: tile t's patches are rows [seg[t], seg[t+1])
  std::vector<int32_t> unshuffle_;   // the projector's gather of rows
  int64_t next_ = 0;
  DeviceBuffer x_buf_, h_buf_, a_buf_, q_buf_, k_buf_, v_buf_, o_buf_, f_buf_;
  std::vector<float> host_obs_;
  std::vector<std::vector<float>> out_;
};

}  // namespace lfm
