#include "kernels/weight_pack.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/error.h"
#include "kernels/cpu/bf16_pairs.h"
#include "kernels/cpu_features.h"
#include "kernels/quant_blocks.h"

namespace lfm {

namespace {

// One K-quant super-block unpacked: unsigned quants and the 8 (Q6_K: 16) sub-block scales.
struct KValues {
  uint8_t q[quant::kQK_K];
  uint8_t scale[16];  // Q4_K/Q5_K: 8 six-bit scales; Q6_K: 16 int8 scales (bit patterns)
  uint8_t min[8];     // Q4_K/Q5_K
  uint16_t d = 0, dmin = 0;
};

KValues unpack_kquant(DType t, const uint8_t* src) {
  using namespace quant;
  KValues v{};
  if (t == DType::Q3_K) {  // as Q6_K (rows16_kernel_type): scale sc − 32, quant q + 28
    BlockQ3_K b;
    std::memcpy(&b, src, sizeof b);
    v.d = b.d;
    for (int s = 0; s < 16; ++s) v.scale[s] = static_cast<uint8_t>(static_cast<int8_t>(unpack_q3k_scale(b.scales, s) - 32));
    for (int e = 0; e < kQK_K; ++e) v.q[e] = static_cast<uint8_t>(unpack_q3k_quant(b.hmask, b.qs, e) + 28);
    return v;
  }
  if (t == DType::Q6_K) {
    BlockQ6_K b;
    std::memcpy(&b, src, sizeof b);
    v.d = b.d;
    std::memcpy(v.scale, b.scales, 16);
    for (int h = 0; h < 2; ++h)
      for (int l = 0; l < 32; ++l) {
        const uint8_t lo = b.ql[64 * h + l], hi = b.ql[64 * h + l + 32], qh = b.qh[32 * h + l];
        uint8_t* q = v.q + 128 * h;
        q[l] = static_cast<uint8_t>((lo & 0x0F) | ((qh & 3) << 4));
        q[l + 32] = static_cast<uint8_t>((hi & 0x0F) | (((qh >> 2) & 3) << 4));
        q[l + 64] = static_cast<uint8_t>((lo >> 4) | (((qh >> 4) & 3) << 4));
        q[l + 96] = static_cast<uint8_t>((hi >> 4) | (((qh >> 6) & 3) << 4));
      }
    return v;
  }
  // Q4_K and Q5_K share the head: d, dmin, 12 bytes of packed 6-bit scales and mins.
  const bool q5 = t == DType::Q5_K;
  BlockQ5_K b5{};
  BlockQ4_K b4{};
  if (q5) std::memcpy(&b5, src, sizeof b5); else std::memcpy(&b4, src, sizeof b4);
  v.d = q5 ? b5.d : b4.d;
  v.dmin = q5 ? b5.dmin : b4.dmin;
  const uint8_t* scales = q5 ? b5.scales : b4.scales;
  const uint8_t* qs = q5 ? b5.qs : b4.qs;
  for (int j = 0; j < 8; ++j) {
    const KScaleMin sm = unpack_k_scale(scales, j);
    v.scale[j] = static_cast<uint8_t>(sm.scale);
    v.min[j] = static_cast<uint8_t>(sm.min);
  }
  for (int c = 0; c < 4; ++c)
    for (int l = 0; l < 32; ++l) {
      const uint8_t byte = qs[32 * c + l];
      const int hb_lo = q5 && (b5.qh[l] >> (2 * c)) & 1, hb_hi = q5 && (b5.qh[l] >> (2 * c + 1)) & 1;
      v.q[64 * c + l] = static_cast<uint8_t>((byte & 0x0F) | (hb_lo << 4));
      v.q[64 * c + 32 + l] = static_cast<uint8_t>((byte >> 4) | (hb_hi << 4));
    }
  return v;
}

// Writes lane i's 32 unsigned quants q (of `bits` bits) into a packed block of 16 rows (blk):
// the low 4 bits in the Q4_0 arrangement (group g, byte 4i + j: element 4g + j in the low
// nibble, 16 + 4g + j in the high one), then the high bits in the planes weight_pack.h describes
// (5 bits: one plane; 6 bits: two). The planes are ORed into: blk must start zeroed.
void pack_block_quants(int bits, const uint8_t* q, int64_t i, uint8_t* blk) {
  for (int g = 0; g < 4; ++g)
    for (int b = 0; b < 4; ++b) {
      const uint8_t lo = q[4 * g + b], hi = q[16 + 4 * g + b];
      blk[64 * g + 4 * i + b] = static_cast<uint8_t>((lo & 0x0F) | ((hi & 0x0F) << 4));
      if (bits == 5)
        blk[256 + 4 * i + b] |= static_cast<uint8_t>(((lo >> 4) << (2 * g)) | ((hi >> 4) << (2 * g + 1)));
      if (bits == 6)
        blk[256 + 64 * (g / 2) + 4 * i + b] |=
            static_cast<uint8_t>(((lo >> 4) << (4 * (g % 2))) | ((hi >> 4) << (4 * (g % 2) + 2)));
    }
}

// Writes lane i's block (src: one stored block of a 32-block format) into a unit's block blk and
// its d (and m) slots. The stored nibble bytes already are in Q4_0's arrangement (group g = qs[4g
// .. 4g+3]), so they are copied 4 bytes at a time (Q8_0's with each byte's top bit flipped: +128);
// Q5_x's fifth bits (qh bit k = element k) go to Q5_K's plane: bit 2g of byte j = element 4g + j,
// bit 2g + 1 = element 16 + 4g + j.
void pack_block32_lane(DType t, const uint8_t* src, int64_t i, uint8_t* blk, uint8_t* d_slot, uint8_t* m_slot) {
  const bool mins = rows16_has_mins(t), five = rows16_fifth_bits(t);
  std::memcpy(d_slot, src, 2);
  if (mins) std::memcpy(m_slot, src + 2, 2);
  const uint8_t* after = src + (mins ? 4 : 2);
  const uint8_t* qs = after + (five ? 4 : 0);
  const int64_t groups = rows16_group_count(t);
  for (int64_t g = 0; g < groups; ++g) {
    uint32_t v;
    std::memcpy(&v, qs + 4 * g, 4);
    if (t == DType::Q8_0) v ^= 0x80808080u;
    std::memcpy(blk + g * 64 + 4 * i, &v, 4);
  }
  if (!five) return;
  const uint32_t qh = quant::load_qh32(after);
  for (int j = 0; j < 4; ++j) {
    uint32_t plane = 0;
    for (int g = 0; g < 4; ++g) plane |= ((qh >> (4 * g + j)) & 1u) << (2 * g) | ((qh >> (16 + 4 * g + j)) & 1u) << (2 * g + 1);
    blk[256 + 4 * i + j] = static_cast<uint8_t>(plane);
  }
}

// Writes row i (lane) of one K-quant super-block into its packed unit.
void pack_kquant_row(DType t, const KValues& v, int64_t i, uint8_t* unit) {
  const size_t kb = rows16_kblock_bytes(t);
  std::memcpy(unit + 2 * i, &v.d, 2);
  std::memcpy(unit + 32 + 2 * i, &v.dmin, 2);
  for (int j = 0; j < 8; ++j) {
    uint8_t* hdr = unit + 64 + 32 * j;
    hdr[i] = t == DType::Q6_K ? v.scale[2 * j] : v.scale[j];
    hdr[16 + i] = t == DType::Q6_K ? v.scale[2 * j + 1] : v.min[j];
    pack_block_quants(t == DType::Q5_K ? 5 : t == DType::Q6_K ? 6 : 4, v.q + 32 * j, i, unit + 320 + j * kb);
  }
}

}  // namespace

size_t rows16_panel_bytes(DType t, int64_t cols) {
  t = rows16_kernel_type(t);
  if (rows16_kquant(t)) return static_cast<size_t>(cols / quant::kQK_K) * rows16_unit_bytes(t);
  const int64_t blocks = cols / 32;
  return static_cast<size_t>((blocks + 1) / 2) * rows16_unit_bytes(t);
}

namespace {

void check_rows16(const TensorView& w) {
  LFM_CHECK(rows16_packable(w.dtype), "weight pack: no 16-row layout for ", dtype_name(w.dtype));
  const int64_t blk = rows16_kquant(rows16_kernel_type(w.dtype)) ? quant::kQK_K : 32;
  LFM_CHECK(w.shape.size() == 2 && w.shape[1] % blk == 0, "weight pack: expected a [rows, ", blk,
            "·k] matrix, got ", shape_str(w.shape));
}

size_t rows16_bytes(const TensorView& w) {
  check_rows16(w);
  const int64_t panels = (w.shape[0] + kPackRows - 1) / kPackRows;
  return static_cast<size_t>(panels) * rows16_panel_bytes(w.dtype, w.shape[1]);
}

void pack_rows16_into(const TensorView& w, uint8_t* base) {
  const int64_t M = w.shape[0], panels = (M + kPackRows - 1) / kPackRows;
  const DType kt = rows16_kernel_type(w.dtype);
  const size_t unit = rows16_unit_bytes(kt), panel_bytes = rows16_panel_bytes(kt, w.shape[1]);
  const size_t src_block = static_cast<size_t>(dtype_traits(w.dtype).block_bytes);
  std::memset(base, 0, rows16_bytes(w));  // rows past M, and the high-bit planes ORed into below
  if (rows16_kquant(kt)) {
    for (int64_t r = 0; r < M; ++r)
      for (int64_t s = 0; s < w.shape[1] / quant::kQK_K; ++s)
        pack_kquant_row(kt, unpack_kquant(w.dtype, w.row(r) + s * src_block), r % kPackRows,
                        base + (r / kPackRows) * panel_bytes + s * unit);
    return;
  }
  const int64_t blocks = w.shape[1] / 32;
  const size_t kb = rows16_kblock_bytes(w.dtype);
  for (int64_t p = 0; p < panels; ++p) {
    for (int64_t i = 0; i < kPackRows && p * kPackRows + i < M; ++i) {
      const uint8_t* row = w.row(p * kPackRows + i);
      for (int64_t b = 0; b < blocks; ++b) {
        uint8_t* u = base + p * panel_bytes + (b / 2) * unit;
        uint8_t* scales = u + 2 * kb + (b % 2) * 32 + 2 * i;  // d; m 64 bytes further
        pack_block32_lane(w.dtype, row + b * src_block, i, u + (b % 2) * kb, scales, scales + 64);
      }
    }
  }
}

void check_pairs16(const TensorView& w) {
  LFM_CHECK(w.dtype == DType::BF16 || w.dtype == DType::F16, "weight pack: no column-pair layout for ",
            dtype_name(w.dtype));
  LFM_CHECK(w.shape.size() == 2, "weight pack: expected a matrix, got ", shape_str(w.shape));
}

size_t pairs16_bytes(const TensorView& w) {
  check_pairs16(w);
  return static_cast<size_t>((w.shape[0] + kPackRows - 1) / kPackRows) * pairs16_panel_bytes(w.shape[1]);
}

// codes of a row of f16 values (pairs16_f16_code): 32 at a time where the CPU has AVX-512 BW, else
// one by one; false once a value has none.
bool f16_row_codes(const uint16_t* f16, int64_t n, uint16_t* codes) {
#ifndef LFM_REFERENCE_KERNELS_ONLY
  static const bool simd = cpu_features().avx512f && cpu_features().avx512bw;
  if (simd) return bf16_pairs::encode_f16_codes(f16, n, codes);
#endif
  for (int64_t c = 0; c < n; ++c) {
    const int32_t code = pairs16_f16_code(f16[c]);
    if (code < 0) return false;
    codes[c] = static_cast<uint16_t>(code);
  }
  return true;
}

// Writes w in kPairs16; false (dst partly written) where an F16 value has no code.
bool write_pairs16(const TensorView& w, uint8_t* base) {
  const int64_t M = w.shape[0], K = w.shape[1];
  const size_t panel_bytes = pairs16_panel_bytes(K);
  std::memset(base, 0, pairs16_bytes(w));
  const bool f16 = w.dtype == DType::F16;
  std::vector<uint16_t> codes(f16 ? static_cast<size_t>(K) : 0), values(f16 ? static_cast<size_t>(K) : 0);
  for (int64_t r = 0; r < M; ++r) {
    const uint8_t* row = w.row(r);
    if (f16) {
      std::memcpy(values.data(), row, static_cast<size_t>(K) * 2);
      if (!f16_row_codes(values.data(), K, codes.data())) return false;
      row = reinterpret_cast<const uint8_t*>(codes.data());
    }
    uint8_t* lane = base + (r / kPackRows) * panel_bytes + 4 * (r % kPackRows);
    for (int64_t c = 0; c < K / 2; ++c) std::memcpy(lane + c * 64, row + 4 * c, 4);  // one column pair
    if (K % 2) std::memcpy(lane + (K / 2) * 64, row + 2 * (K - 1), 2);
  }
  return true;
}

void pack_pairs16_into(const TensorView& w, uint8_t* base) {
  if (write_pairs16(w, base)) return;
  for (int64_t i = 0; i < w.numel(); ++i) {
    uint16_t h;
    std::memcpy(&h, w.row(i / w.cols()) + 2 * (i % w.cols()), 2);
    LFM_CHECK(pairs16_f16_code(h) >= 0, "weight pack: F16 value ", f16_to_f32(h), " (row ", i / w.cols(), ", column ",
              i % w.cols(), ") has no column-pair code (|w| >= 128, inf or NaN)");
  }
}

size_t chunks16_bytes(const TensorView& w) {
  LFM_CHECK(plain_matrix_type(w.dtype),
            "weight pack: kChunks16 holds F32/F16/BF16 matrices, not ", dtype_name(w.dtype));
  LFM_CHECK(w.data && w.shape.size() == 2 && w.nbytes == w.row_bytes() * static_cast<size_t>(w.rows()),
            "weight pack: a ", shape_str(w.shape), " matrix of ", w.nbytes, " bytes cannot be packed by rows");
  return static_cast<size_t>((w.shape[0] + kPackRows - 1) / kPackRows) * chunks16_panel_bytes(w.dtype, w.shape[1]);
}

void pack_chunks16_into(const TensorView& w, uint8_t* base) {
  const int64_t M = w.shape[0], K = w.shape[1];
  const size_t elem = dtype_row_bytes(w.dtype, 1), piece = static_cast<size_t>(kChunkCols) * elem;
  const size_t panel_bytes = chunks16_panel_bytes(w.dtype, K);
  const int64_t chunks = (K + kChunkCols - 1) / kChunkCols;
  std::memset(base, 0, chunks16_bytes(w));
  for (int64_t r = 0; r < M; ++r) {
    const uint8_t* row = w.row(r);
    uint8_t* lane = base + static_cast<size_t>(r / kPackRows) * panel_bytes + static_cast<size_t>(r % kPackRows) * piece;
    for (int64_t c = 0; c < chunks; ++c) {
      const int64_t cols = std::min(kChunkCols, K - c * kChunkCols);
      uint8_t* run = lane + static_cast<size_t>(c * kPackRows) * piece;
      const uint8_t* src = row + static_cast<size_t>(c * kChunkCols) * elem;
      if (w.dtype == DType::BF16) {  // columns j and j + 16 side by side (chunks16_position)
        uint16_t in[kChunkCols] = {}, out[kChunkCols];
        std::memcpy(in, src, static_cast<size_t>(cols) * 2);
        for (int64_t j = 0; j < kChunkCols; ++j) out[chunks16_position(DType::BF16, j)] = in[j];
        std::memcpy(run, out, sizeof out);
      } else {
        std::memcpy(run, src, static_cast<size_t>(cols) * elem);
      }
    }
  }
}

}  // namespace

size_t chunks16_panel_bytes(DType t, int64_t cols) {
  return static_cast<size_t>((cols + kChunkCols - 1) / kChunkCols * kPackRows * kChunkCols) * dtype_row_bytes(t, 1);
}

size_t pairs16_panel_bytes(int64_t cols) { return static_cast<size_t>((cols + 1) / 2) * 64; }

int32_t pairs16_f16_code(uint16_t f16) {
  const uint32_t sign = f16 & 0x8000u, a = f16 & 0x7FFFu;
  if (a >= 0x5800u) return -1;  // |w| ≥ 128, inf, NaN
  if (a >= 0x0400u)             // normal: exponent e = E5 − 15, so E = E5 + 10; F and m are the significand's 7 + 3 bits
    return static_cast<int32_t>(sign | (a & 7u) << 12 | ((a >> 3) + (10u << 7)));
  if (a == 0) return static_cast<int32_t>(sign);
  // Subnormal a·2^−24 with its leading one at bit p (e = p − 24, E = p + 1): hi keeps the leading
  // one and the next 7 bits, lo the p − 7 bits below (p ≤ 9) as m·2^(e−10), m = rest·2^(10−p).
  const int p = 31 - __builtin_clz(a);
  const uint32_t F = (p >= 7 ? a >> (p - 7) : a << (7 - p)) & 0x7Fu;
  const uint32_t m = p > 7 ? (a & ((1u << (p - 7)) - 1)) << (10 - p) : 0;
  return static_cast<int32_t>(sign | m << 12 | static_cast<uint32_t>(p + 1) << 7 | F);
}

size_t packed_size(PackedLayout layout, const TensorView& w) {
  switch (layout) {
    case PackedLayout::kRows16: return rows16_bytes(w);
    case PackedLayout::kPairs16: return pairs16_bytes(w);
    case PackedLayout::kChunks16: return chunks16_bytes(w);
    default: throw Error("weight pack: no layout to pack into");
  }
}

void pack_weight_into(PackedLayout layout, const TensorView& w, void* dst) {
  auto* out = static_cast<uint8_t*>(dst);
  switch (layout) {
    case PackedLayout::kRows16: return pack_rows16_into(w, out);
    case PackedLayout::kPairs16: return pack_pairs16_into(w, out);
    case PackedLayout::kChunks16: return pack_chunks16_into(w, out);
    default: throw Error("weight pack: no layout to pack into");
  }
}

PackedLayout pack_pairs16_or_chunks16_into(const TensorView& w, void* dst) {
  auto* out = static_cast<uint8_t*>(dst);
  if (write_pairs16(w, out)) return PackedLayout::kPairs16;
  LFM_CHECK(chunks16_bytes(w) == pairs16_bytes(w), "weight pack: ", shape_str(w.shape),
            " F16 matrix beyond the column-pair codes has no kChunks16 copy of the same size");
  pack_chunks16_into(w, out);
  return PackedLayout::kChunks16;
}

AlignedBuffer pack_weight(PackedLayout layout, const TensorView& w) {
  AlignedBuffer out(packed_size(layout, w));
  pack_weight_into(layout, w, out.data());
  return out;
}

AlignedBuffer pack_rows16(const TensorView& w) { return pack_weight(PackedLayout::kRows16, w); }
AlignedBuffer pack_pairs16(const TensorView& w) { return pack_weight(PackedLayout::kPairs16, w); }

bool pairs16_selected(DType t, DType act) {
  if ((t != DType::BF16 && t != DType::F16) || selected_isa() != Isa::kAvx512) return false;
#ifdef LFM_REFERENCE_KERNELS_ONLY  // no AMX / AVX-512 BF16 kernels built
  (void)act;
  return false;
#else
  if (t == DType::F16) {  // AMX, each value split into bf16 hi + lo (bf16_pairs.h); LFM_AMX_F16=0 says no
    static const bool f16_off = [] {
      const char* env = std::getenv("LFM_AMX_F16");
      return env && std::string(env) == "0";
    }();
    return act == DType::F32 && !f16_off && bf16_pairs::available();
  }
  return bf16_pairs::available() || (act == DType::BF16 && bf16_pairs::dot_available());
#endif
}

PackedLayout cpu_packed_layout(const TensorView& w) {
  PackedLayout l = cpu_packed_layout(w.dtype);
  if (l != PackedLayout::kNone && pairs16_selected(w.dtype, w.act_type)) l = PackedLayout::kPairs16;
  if (l == PackedLayout::kPairs16 && (w.shape.size() != 2 || !bf16_pairs::fits(w.shape[1])))
    return PackedLayout::kChunks16;
  return l;
}

PackedLayout cpu_packed_layout(DType t) {
  const char* env = std::getenv("LFM_PACK");
  if (env && std::string(env) == "0") return PackedLayout::kNone;
  const Isa isa = selected_isa();
  const bool simd = isa == Isa::kAvx512 || isa == Isa::kAvx2;
  if (pairs16_selected(t, DType::F32)) return PackedLayout::kPairs16;  // AMX
  if (plain_matrix_type(t))
    return simd ? PackedLayout::kChunks16 : PackedLayout::kNone;
  // AVX-512 VNNI and AVX2 read every packable type (simd_packed.inc, simd_packed_avx2.inc).
  const bool reads = simd && rows16_packable(t);
  return reads ? PackedLayout::kRows16 : PackedLayout::kNone;
}

}  // namespace lfm
