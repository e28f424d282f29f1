#include "kernels/state_pools.h"

#include <cstring>

#include "core/error.h"
#include "kernels/dequant.h"

namespace lfm {

bool is_state_type(DType type) { return type == DType::F32 || type == DType::F16 || type == DType::BF16; }

void store_state_row(DType type, const float* src, void* dst, int64_t n) {
  if (n <= 0 && is_state_type(type)) return;  // an empty state (conv kernel 1) may have no storage at all
  auto* out = static_cast<uint16_t*>(dst);
  switch (type) {
    case DType::F32:
      std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
      return;
    case DType::F16:
      for (int64_t i = 0; i < n; ++i) out[i] = f32_to_f16(src[i]);
      return;
    case DType::BF16:
      for (int64_t i = 0; i < n; ++i) out[i] = f32_to_bf16(src[i]);
      return;
    default:
      fail("kernels: ", dtype_name(type), " is not a state storage type (f32, f16, bf16)");
  }
}

void load_state_row(DType type, const void* src, float* dst, int64_t n) {
  LFM_CHECK(is_state_type(type), "kernels: ", dtype_name(type), " is not a state storage type (f32, f16, bf16)");
  if (n > 0) dequantize_row(type, src, dst, n);
}

void round_to_state_type(DType type, float* x, int64_t n) {
  switch (type) {
    case DType::F32:
      return;
    case DType::F16:
      for (int64_t i = 0; i < n; ++i) x[i] = f16_to_f32(f32_to_f16(x[i]));
      return;
    case DType::BF16:
      for (int64_t i = 0; i < n; ++i) x[i] = bf16_to_f32(f32_to_bf16(x[i]));
      return;
    default:
      fail("kernels: ", dtype_name(type), " is not a state storage type (f32, f16, bf16)");
  }
}

}  // namespace lfm
