#include "kernels/weight_pack.h"

#include <cstdlib>
#include <cstring>
#include <string>

#include "core/error.h"
#include "kernels/cpu_features.h"

namespace lfm {

bool rows16_packable(DType t) { return t == DType::Q4_0 || t == DType::Q8_0; }
int64_t rows16_group_count(DType t) { return t == DType::Q4_0 ? 4 : 8; }
size_t rows16_unit_bytes(DType t) { return static_cast<size_t>(2 * rows16_group_count(t) * 64 + 64); }
size_t rows16_panel_bytes(DType t, int64_t cols) {
  const int64_t blocks = cols / 32;
  return static_cast<size_t>((blocks + 1) / 2) * rows16_unit_bytes(t);
}

AlignedBuffer pack_rows16(const TensorView& w) {
  LFM_CHECK(rows16_packable(w.dtype), "weight pack: no 16-row layout for ", dtype_name(w.dtype));
  LFM_CHECK(w.shape.size() == 2 && w.shape[1] % 32 == 0, "weight pack: expected a [rows, 32·k] matrix, got ",
            shape_str(w.shape));
  const int64_t M = w.shape[0], blocks = w.shape[1] / 32, G = rows16_group_count(w.dtype);
  const int64_t panels = (M + kPackRows - 1) / kPackRows;
  const size_t unit = rows16_unit_bytes(w.dtype), panel_bytes = rows16_panel_bytes(w.dtype, w.shape[1]);
  const size_t src_block = w.dtype == DType::Q4_0 ? 18 : 34;
  const bool q8 = w.dtype == DType::Q8_0;
  AlignedBuffer out(static_cast<size_t>(panels) * panel_bytes);
  std::memset(out.data(), 0, out.size());
  auto* base = static_cast<uint8_t*>(out.data());
  for (int64_t p = 0; p < panels; ++p) {
    for (int64_t i = 0; i < kPackRows && p * kPackRows + i < M; ++i) {
      const uint8_t* row = w.row(p * kPackRows + i);
      for (int64_t b = 0; b < blocks; ++b) {
        const uint8_t* src = row + b * src_block;  // f16 scale, then the quants
        uint8_t* u = base + p * panel_bytes + (b / 2) * unit;
        uint8_t* quants = u + (b % 2) * G * 64;
        std::memcpy(u + 2 * G * 64 + (b % 2) * 32 + 2 * i, src, 2);
        for (int64_t g = 0; g < G; ++g)
          for (int j = 0; j < 4; ++j) {
            const uint8_t v = src[2 + 4 * g + j];
            quants[g * 64 + 4 * i + j] = q8 ? static_cast<uint8_t>(v ^ 0x80) : v;
          }
      }
    }
  }
  return out;
}

PackedLayout cpu_packed_layout(DType t) {
  const char* env = std::getenv("LFM_PACK");
  if (env && std::string(env) == "0") return PackedLayout::kNone;
  return selected_isa() == Isa::kAvx512 && rows16_packable(t) ? PackedLayout::kRows16 : PackedLayout::kNone;
}

}  // namespace lfm
