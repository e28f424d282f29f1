#include "core/dtype.h"

#include <algorithm>
#include <cctype>

#include "core/error.h"

namespace lfm {

namespace {
// Indexed by DType. Block sizes follow ggml (QK4_0 = 32, QK_K = 256).
// clang-format off
constexpr DTypeTraits kTraits[] = {
    // name    block  bytes  quantized  decodable  encodable
    {"F32",      1,     4,   false,     true,      true},
    {"F16",      1,     2,   false,     true,      true},
    {"BF16",     1,     2,   false,     true,      true},
    {"I32",      1,     4,   false,     false,     false},  // indices, not weights: no float view
    {"Q4_0",    32,    18,   true,      true,      true},
    {"Q4_1",    32,    20,   true,      true,      true},
    {"Q5_0",    32,    22,   true,      true,      true},
    {"Q5_1",    32,    24,   true,      true,      true},
    {"Q8_0",    32,    34,   true,      true,      true},
    {"Q4_K",   256,   144,   true,      true,      true},
    {"Q5_K",   256,   176,   true,      true,      true},
    {"Q6_K",   256,   210,   true,      true,      true},
    {"Q8_K",   256,   292,   true,      true,      true},
    {"Q3_K",   256,   110,   true,      true,      true},
};
// clang-format on
static_assert(std::size(kTraits) == static_cast<size_t>(DType::Q3_K) + 1, "one row per DType, in enum order");
}  // namespace

const DTypeTraits& dtype_traits(DType t) { return kTraits[static_cast<int>(t)]; }

size_t dtype_row_bytes(DType t, int64_t n) {
  const DTypeTraits& tr = dtype_traits(t);
  LFM_CHECK(n >= 0 && n % tr.block_elems == 0, "dtype: ", n, " elements is not a multiple of the ", tr.name,
            " block size ", tr.block_elems);
  return static_cast<size_t>(n / tr.block_elems) * tr.block_bytes;
}

DType dtype_from_name(std::string_view name) {
  std::string up(name);
  std::transform(up.begin(), up.end(), up.begin(), [](unsigned char c) { return std::toupper(c); });
  for (size_t i = 0; i < std::size(kTraits); ++i)
    if (up == kTraits[i].name) return static_cast<DType>(i);
  fail("dtype: unknown type name '", name, "'");
}

float f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      exp = 127 - 15 + 1;
      while ((mant & 0x400u) == 0) {
        mant <<= 1;
        --exp;
      }
      mant &= 0x3ffu;
      bits = sign | (exp << 23) | (mant << 13);
    }
  } else if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t f32_to_f16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t abs = x & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);   // NaN
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow -> inf
  if (abs < 0x38800000u) {                                               // result is subnormal or zero
    if (abs < 0x33000000u) return static_cast<uint16_t>(sign);
    // value = mant * 2^(e-150) and the f16 unit is 2^-24, so shift right by 126 - e.
    const uint32_t e = abs >> 23;
    const uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126 - e;
    uint32_t r = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1);
    const uint32_t halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (r & 1u))) ++r;  // nearest even
    return static_cast<uint16_t>(sign | r);
  }
  // normal: rebias exponent, round mantissa to 10 bits (nearest even)
  uint32_t r = abs - 0x38000000u;  // exponent 127 -> 15
  r += 0xfffu + ((r >> 13) & 1u);
  return static_cast<uint16_t>(sign | (r >> 13));
}

}  // namespace lfm
