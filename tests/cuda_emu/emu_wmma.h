// nvcuda::wmma on the CUDA emulator (cuda_emu.h includes it; <mma.h> declares nothing outside
// nvcc): the subset the kernels use, tf32 m16n16k8 with float accumulators.
//
// On a GPU a fragment's elements are spread over the warp's lanes in an unspecified order, so
// kernels may only apply one operation to every element (x[i] for all i). Here every lane holds
// the whole tile: loads, products and stores need no exchange between lanes, and a kernel that
// obeys that rule computes the same thing. What a GPU would refuse is refused here too: a tile
// pointer that is not 32-byte aligned, a leading dimension that is not a multiple of 4 floats.
// Products use what the tensor cores use of each input (its tf32 part: the low 13 bits dropped),
// summed in float in k order (the order and rounding inside one GPU mma are the hardware's own).
#pragma once

#include <bit>
#include <cstring>
#include <cstdint>
#include <string>
#include <type_traits>

#include "cuda_emu/emu_threads.h"

namespace lfm_emu {
[[noreturn]] void wmma_misuse(const std::string& what);
}

namespace nvcuda::wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
namespace precision {
struct tf32 {};
}  // namespace precision
enum layout_t { mem_row_major, mem_col_major };

namespace detail {
template <int R, int C>
struct Tile {
  static constexpr int rows = R, cols = C, num_elements = R * C;
  float x[R * C];
};
inline float tf32_part(float f) { return std::bit_cast<float>(std::bit_cast<uint32_t>(f) & 0xFFFFE000u); }
inline void check_tile(const void* p, unsigned ldm, const char* what) {
  if (reinterpret_cast<uintptr_t>(p) % 32 != 0) lfm_emu::wmma_misuse(std::string(what) + " of a tile not 32-byte aligned");
  if (ldm % 4 != 0) lfm_emu::wmma_misuse(std::string(what) + " with a leading dimension of " + std::to_string(ldm) + " floats");
}
template <int R, int C>
void load(Tile<R, C>& t, const float* p, unsigned ldm, bool row_major) {
  check_tile(p, ldm, "load_matrix_sync");
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) t.x[r * C + c] = row_major ? p[r * ldm + c] : p[c * ldm + r];
}
}  // namespace detail

template <typename Use, int M, int N, int K, typename T, typename Layout = void>
class fragment;
template <int M, int N, int K, typename L>
class fragment<matrix_a, M, N, K, precision::tf32, L> : public detail::Tile<M, K> {};
template <int M, int N, int K, typename L>
class fragment<matrix_b, M, N, K, precision::tf32, L> : public detail::Tile<K, N> {};
template <int M, int N, int K>
class fragment<accumulator, M, N, K, float, void> : public detail::Tile<M, N> {};

// cvt.rna.tf32.f32: to nearest, ties away from zero, on the magnitude's bits.
inline float __float_to_tf32(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7F800000u) == 0x7F800000u) return f;  // inf and NaN as they are
  return std::bit_cast<float>((u + 0x1000u) & 0xFFFFE000u);
}

template <typename Use, int M, int N, int K, typename T, typename L>
void fill_fragment(fragment<Use, M, N, K, T, L>& f, float v) {
  for (float& e : f.x) e = v;
}
template <typename Use, int M, int N, int K, typename T, typename L>
void load_matrix_sync(fragment<Use, M, N, K, T, L>& f, const float* p, unsigned ldm) {
  static_assert(!std::is_same_v<Use, accumulator>, "an accumulator's load names its layout");
  detail::load(f, p, ldm, std::is_same_v<L, row_major>);
}
template <int M, int N, int K>
void load_matrix_sync(fragment<accumulator, M, N, K, float>& f, const float* p, unsigned ldm, layout_t layout) {
  detail::load(f, p, ldm, layout == mem_row_major);
}
template <int M, int N, int K>
void store_matrix_sync(float* p, const fragment<accumulator, M, N, K, float>& f, unsigned ldm, layout_t layout) {
  detail::check_tile(p, ldm, "store_matrix_sync");
  for (int r = 0; r < M; ++r)
    for (int c = 0; c < N; ++c) (layout == mem_row_major ? p[r * ldm + c] : p[c * ldm + r]) = f.x[r * N + c];
}
// d = a·b + c
template <int M, int N, int K, typename LA, typename LB>
void mma_sync(fragment<accumulator, M, N, K, float>& d, const fragment<matrix_a, M, N, K, precision::tf32, LA>& a,
              const fragment<matrix_b, M, N, K, precision::tf32, LB>& b,
              const fragment<accumulator, M, N, K, float>& c) {
  // Every lane holds the same tiles: the product is computed once a warp (warp_collective).
  struct In {
    float a[M * K], b[K * N], c[M * N];
  } in;
  std::memcpy(in.a, a.x, sizeof in.a);
  std::memcpy(in.b, b.x, sizeof in.b);
  std::memcpy(in.c, c.x, sizeof in.c);
  lfm_emu::warp_collective(&in, sizeof in, d.x, sizeof d.x, [&in](void* out) {
    float* o = static_cast<float*>(out);
    float bt[K * N];
    for (int i = 0; i < K * N; ++i) bt[i] = detail::tf32_part(in.b[i]);
    for (int i = 0; i < M * N; ++i) o[i] = in.c[i];
    for (int m = 0; m < M; ++m)  // each sum in k order
      for (int k = 0; k < K; ++k) {
        const float av = detail::tf32_part(in.a[m * K + k]);
        for (int n = 0; n < N; ++n) o[m * N + n] += av * bt[k * N + n];
      }
  });
}

}  // namespace nvcuda::wmma
