// Row decoding for every storage DType: plain floats directly, ggml block formats through the
// codecs of quant_decode.cpp. Dispatch is a plain switch (no self-registration), so the codecs are
// referenced from here and the linker keeps them even though lfmcore is a static library.
#include "kernels/dequant.h"

#include <cstring>

#include "core/error.h"
#include "kernels/quant_blocks.h"

namespace lfm {

namespace {

void row_f32(const void* src, float* dst, int64_t n) { std::memcpy(dst, src, static_cast<size_t>(n) * 4); }

// Portable (baseline x86-64) decoders; the SIMD backends have their own (kernels/cpu/).
// Loads go through memcpy, so an odd source address is fine.
void row_f16(const void* src, float* dst, int64_t n) {
  const auto* bytes = static_cast<const uint8_t*>(src);
  for (int64_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, bytes + 2 * i, 2);
    dst[i] = f16_to_f32(h);
  }
}

void row_bf16(const void* src, float* dst, int64_t n) {
  const auto* bytes = static_cast<const uint8_t*>(src);
  for (int64_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, bytes + 2 * i, 2);
    dst[i] = bf16_to_f32(h);
  }
}

}  // namespace

void dequantize_row(DType type, const void* src, float* dst, int64_t n) {
  const DTypeTraits& tr = dtype_traits(type);
  LFM_CHECK(n >= 0 && n % tr.block_elems == 0, "kernels: cannot decode ", n, " elements of ", tr.name,
            ": not a multiple of the block size ", tr.block_elems);
  const auto* bytes = static_cast<const uint8_t*>(src);
  const int64_t blocks = n / tr.block_elems;
  switch (type) {
    case DType::F32: row_f32(src, dst, n); return;
    case DType::F16: row_f16(src, dst, n); return;
    case DType::BF16: row_bf16(src, dst, n); return;
    case DType::Q4_0: quant::decode_q4_0(bytes, dst, blocks); return;
    case DType::Q4_1: quant::decode_q4_1(bytes, dst, blocks); return;
    case DType::Q5_0: quant::decode_q5_0(bytes, dst, blocks); return;
    case DType::Q5_1: quant::decode_q5_1(bytes, dst, blocks); return;
    case DType::Q8_0: quant::decode_q8_0(bytes, dst, blocks); return;
    case DType::Q4_K: quant::decode_q4_k(bytes, dst, blocks); return;
    case DType::Q5_K: quant::decode_q5_k(bytes, dst, blocks); return;
    case DType::Q6_K: quant::decode_q6_k(bytes, dst, blocks); return;
    case DType::Q8_K: quant::decode_q8_k(bytes, dst, blocks); return;
    case DType::Q3_K: quant::decode_q3_k(bytes, dst, blocks); return;
    case DType::I32: break;
  }
  fail("kernels: no decoder for weight type ", dtype_name(type));
}

}  // namespace lfm
