// What a backend prepares at load (Backend::prepare_weights): every weight a forward step hands
// to the kernels, and the object that owns the backend's copies of them.
#pragma once

#include <cstddef>
#include <functional>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace lfm {

struct WeightSet {
  std::vector<TensorView*> matrices;   // what matmul reads ([out, in], any stored type)
  std::vector<TensorView*> tables;     // what embedding reads (rows looked up as stored)
  std::vector<WeightVector*> vectors;  // norms, biases, conv taps, RoPE frequencies
  // Tells the source that a matrix's stored bytes will not be read again (its pages may go). A
  // table's bytes (a tied embedding is also the lm_head) are never released.
  std::function<void(const TensorView&)> release_original;
};

// The copies a backend made. Owned by the model for as long as its views point into them.
class PreparedWeights {
 public:
  virtual ~PreparedWeights() = default;
  // Host copies the kernels read instead of the stored bytes (each copy's span), and the stored
  // spans they stand for; empty for a backend whose copies are in device memory.
  std::vector<std::pair<const void*, size_t>> host_copies, replaced;
  size_t bytes = 0;  // of every copy, host or device
};

}  // namespace lfm
