// A non-owning view of a stored tensor (memory-mapped checkpoint data or owned buffers).
// Shapes are outermost-first, as PyTorch writes them: a weight matrix is [out, in] and each of
// its `out` rows holds `in` elements in `dtype` (for block-quantized types, in/block blocks).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/dtype.h"

namespace lfm {

// A second copy of a matrix in a layout some kernels read faster (kernels/weight_pack.h). The
// original `data` stays valid, so a backend that does not know the layout simply ignores it.
enum class PackedLayout : uint8_t {
  kNone,
  kRows16,  // Q4_0 / Q8_0 / K-quants interleaved in panels of 16 rows (int8 dot-product kernels)
  kPairs16, // BF16 (or F16) column pairs in panels of 16 rows (the AMX tile unit)
  kChunks16, // F32/F16/BF16 rows in panels of 16, interleaved every 32 columns (one stream per panel; weight_pack.h)
  kDevice,   // a copy in a GPU backend's memory, in that backend's own layout
};

struct TensorView {
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  const void* data = nullptr;
  size_t nbytes = 0;
  PackedLayout packed_layout = PackedLayout::kNone;
  const void* packed = nullptr;  // the backend's copy (Backend::prepare_weights; owned by the Model), set once at load
  // What a matmul over this weight rounds its float32 input to first: F32 (nothing: exact) or,
  // for BF16 weights, BF16 (round to nearest even once, as llama.cpp and transformers running in
  // bf16 do; lets AVX-512 BF16 and AMX multiply one bf16 term instead of three). Set at load.
  DType act_type = DType::F32;

  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
  int64_t rows() const { return shape.empty() ? 1 : numel() / shape.back(); }
  int64_t cols() const { return shape.empty() ? 1 : shape.back(); }
  size_t row_bytes() const { return dtype_row_bytes(dtype, cols()); }
  // Row r as stored (in `data`; a packed copy keeps its own layout).
  const uint8_t* row(int64_t r) const { return static_cast<const uint8_t*>(data) + static_cast<size_t>(r) * row_bytes(); }
};

// A small float32 weight vector (a norm's scale, a bias, conv taps), decoded once at load. A
// backend that computes in its own memory keeps a copy there (`device`, set by its
// prepare_weights); ops take ptr().
struct WeightVector {
  std::vector<float> host;
  const float* device = nullptr;

  WeightVector() = default;
  WeightVector(std::vector<float> values) : host(std::move(values)) {}  // NOLINT: a vector is a weight vector
  const float* ptr() const { return device ? device : host.data(); }
  bool empty() const { return host.empty(); }
  size_t size() const { return host.size(); }
  float operator[](size_t i) const { return host[i]; }
};

std::string shape_str(const std::vector<int64_t>& shape);

}  // namespace lfm
