// Test weights for the kernel tests: a random matrix of any stored type, with the packed copy
// the model would give it at load (kernels/weight_pack.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "convert/quant.h"
#include "core/aligned_buffer.h"
#include "core/tensor.h"
#include "kernels/quant_blocks.h"
#include "kernels/weight_pack.h"
#include "test_util.h"

namespace lfm::test {

inline const DType kTypes[] = {DType::F32,  DType::F16,  DType::BF16, DType::Q8_0, DType::Q4_0,
                               DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q3_K, DType::Q4_K,
                               DType::Q5_K, DType::Q6_K, DType::Q8_K};

struct Weight {
  std::vector<uint8_t> bytes;
  TensorView view;
  AlignedBuffer packed;  // packed copy (kernels/weight_pack.h) when the test asks for one
};

inline Weight make_weight(DType dt, int64_t out, int64_t in, uint64_t seed) {
  const auto f = randn(out * in, seed);
  Weight w;
  const size_t row = dtype_row_bytes(dt, in);
  w.bytes.resize(row * out);
  if (dt == DType::Q3_K) {  // random blocks (every bit pattern is one; llama.cpp's files hold
    // more than our encoder writes, e.g. any scale beside the -32 of the largest) with d in
    // [0.005, 0.015)
    std::mt19937 rng(static_cast<uint32_t>(seed));
    for (auto& b : w.bytes) b = static_cast<uint8_t>(rng());
    for (size_t at = 0; at < w.bytes.size(); at += sizeof(quant::BlockQ3_K)) {
      const uint16_t d = f32_to_f16(0.005f + 0.01f * static_cast<float>(rng() % 1000) / 1000.0f);
      std::memcpy(w.bytes.data() + at + offsetof(quant::BlockQ3_K, d), &d, 2);
    }
  } else {
    for (int64_t r = 0; r < out; ++r) quantize_row(dt, f.data() + r * in, w.bytes.data() + r * row, in);
  }
  w.view = TensorView{dt, {out, in}, w.bytes.data(), w.bytes.size()};
  return w;
}

// The same weight with a packed copy attached, as the model prepares it at load: 16-row panels
// for the integer kernels, column pairs for BF16.
// F16 in column pairs too (the AMX kernel splits each value into bf16 hi + lo).
inline PackedLayout test_layout(DType dt) {
  return dt == DType::BF16 || dt == DType::F16 ? PackedLayout::kPairs16 : PackedLayout::kRows16;
}
inline bool test_packable(DType dt) { return dt == DType::BF16 || dt == DType::F16 || rows16_packable(dt); }
inline Weight make_packed_weight(DType dt, int64_t out, int64_t in, uint64_t seed) {
  Weight w = make_weight(dt, out, in, seed);
  w.packed = pack_weight(test_layout(dt), w.view);
  w.view.packed = w.packed.data();
  w.view.packed_layout = test_layout(dt);
  return w;
}

}  // namespace lfm::test
