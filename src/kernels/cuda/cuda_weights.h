// The CUDA backend's weight arena: every distinct weight buffer once (a tied lm_head is the
// embedding table), 256-byte aligned, quantized matrices and tables in the split-block layout
// (kernels/split_blocks.h) whose blocks the kernels load 8 and 16 bytes at a time, plain tensors
// and vectors as stored. Host code only: the copies go through the backend's upload.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <unordered_map>

#include "core/tensor.h"
#include "kernels/weight_set.h"

namespace lfm::cuda {

struct WeightArena {
  std::unordered_map<const void*, size_t> offset_of;  // a host buffer's place in the arena
  size_t bytes = 0;
};

// Bytes of a weight's device copy (the split layout adds a few bytes of padding a row).
size_t device_weight_bytes(const TensorView& t);
// Where each of the set's buffers goes; throws when one buffer is read as tensors of two sizes.
WeightArena plan_weight_arena(const WeightSet& set);
// Copies the set into the arena at `base` and points each tensor's `packed` (and each vector's
// `device`) at its copy. upload(dst, src, bytes) copies host bytes; sync() waits until the
// copies have read their sources (a split tensor's host buffer is reused for the next).
void fill_weight_arena(WeightSet& set, const WeightArena& arena, uint8_t* base,
                       const std::function<void(void*, const void*, size_t)>& upload, const std::function<void()>& sync);

}  // namespace lfm::cuda
