// One decoder step over a ragged batch. Each item is one sequence with its own new tokens
// (a whole prompt, a chunk of one, or a single decode token), its own positions (continuing
// from its state) and its own state. Tokens are packed back to back, never padded: matmuls
// see all T tokens at once, while the conv and attention mixers run per sequence on that
// sequence's rows and state, so nothing crosses between sequences.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "model/model.h"
#include "model/sequence_state.h"

namespace lfm {

struct BatchItem {
  SequenceState* state = nullptr;
  std::span<const int32_t> tokens;
  bool all_logits = false;  // logits for every new token, else only for the last one
};

struct StepOutput {
  int64_t vocab = 0;
  std::vector<float> logits;         // [rows, vocab]
  std::vector<int64_t> first_row;    // per item: its first row in `logits`
  std::vector<int64_t> n_rows;       // per item: how many rows it has
  const float* row(size_t item, int64_t i = 0) const;  // logits of the item's i-th row
};

// Debug hook: named intermediate tensors of a step ([rows, cols], rows = packed tokens).
using ActivationObserver = std::function<void(const std::string& name, const float* data, int64_t rows, int64_t cols)>;

class Forward {
 public:
  Forward(const Model& model, Backend& backend) : model_(model), be_(backend) {}

  // Runs the step, advances every item's state, and fills `out`. On an error (bad token id,
  // context overflow) no state is modified.
  void step(std::span<const BatchItem> items, StepOutput& out);

  void set_observer(ActivationObserver obs) { observer_ = std::move(obs); }

 private:
  void conv_mixer(const LayerWeights& lw, int64_t layer, std::span<const BatchItem> items);
  void attention_mixer(const LayerWeights& lw, int64_t layer, std::span<const BatchItem> items);
  void dense_ffn(const FfnWeights& w, const float* in, int64_t rows, float* out);
  void moe_ffn(const MoeWeights& w, int64_t rows);
  // Reports "model.layers.<layer><suffix>" (or just `suffix` when layer < 0) to the observer.
  void observe(int64_t layer, const char* suffix, const float* data, int64_t rows, int64_t cols);

  const Model& model_;
  Backend& be_;
  ActivationObserver observer_;

  // Step scratch, sized by the packed token count T (reused between steps).
  int64_t T_ = 0;
  int64_t current_layer_ = 0;  // for observer names inside the FFN
  std::vector<int64_t> positions_;  // [T]
  std::vector<float> h_, a_, mix_, proj_, tmp_, tmp2_, tmp3_;
  std::vector<float> ffn_gate_, ffn_up_;  // [rows, F] SwiGLU scratch, reused across layers and steps
};

}  // namespace lfm
