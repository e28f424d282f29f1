#include "kernels/dequant.h"

#include <array>
#include <cstring>

#include "core/error.h"

namespace lfm {

namespace {

void row_f32(const void* src, float* dst, int64_t n) { std::memcpy(dst, src, static_cast<size_t>(n) * 4); }

void row_f16(const void* src, float* dst, int64_t n) {
  const auto* s = static_cast<const uint16_t*>(src);
  for (int64_t i = 0; i < n; ++i) dst[i] = f16_to_f32(s[i]);
}

void row_bf16(const void* src, float* dst, int64_t n) {
  const auto* s = static_cast<const uint16_t*>(src);
  for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(s[i]);
}

using DequantRowFn = void (*)(const void* src, float* dst, int64_t n);
constexpr size_t kTypes = static_cast<size_t>(DType::Q8_K) + 1;

std::array<DequantRowFn, kTypes>& table() {
  static std::array<DequantRowFn, kTypes> t = [] {
    std::array<DequantRowFn, kTypes> a{};
    a[static_cast<size_t>(DType::F32)] = row_f32;
    a[static_cast<size_t>(DType::F16)] = row_f16;
    a[static_cast<size_t>(DType::BF16)] = row_bf16;
    return a;
  }();
  return t;
}

}  // namespace

bool dequant_supported(DType type) { return table()[static_cast<size_t>(type)] != nullptr; }

void dequantize_row(DType type, const void* src, float* dst, int64_t n) {
  DequantRowFn fn = table()[static_cast<size_t>(type)];
  LFM_CHECK(fn, "kernels: no decoder for weight type ", dtype_name(type));
  fn(src, dst, n);
}

}  // namespace lfm
