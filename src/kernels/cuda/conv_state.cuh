// The short conv's per-channel device functions (kernels_state.cu's conv kernels, and the decode
// GEMV that runs a conv layer's in_proj and its conv in one launch): a row's output and a run's new
// state, one thread per (row or run, channel), in the reference's order.
#pragma once

#include <cstdint>

#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/state_access.cuh"

namespace lfm::cuda {

// The longest conv history the kernels take (kernel size − 1): a bound checked at launch.
constexpr int kMaxConvHistory = 15;

// The conv's new inputs: rows of u [T, dim], or (gated, u null) B ⊙ x from the projection
// proj [T, 3·dim] = B | C | x, computed as mul_rows computes it.
struct ConvIn {
  const float* u;
  const float* proj;
  __device__ __forceinline__ float at(int64_t row, int64_t c, int64_t dim) const {
    if (proj) return proj[row * 3 * dim + c] * proj[row * 3 * dim + 2 * dim + c];
    return u[row * dim + c];
  }
};

// Input τ of channel c of a run's conv (τ counted from the run's first row): a new row's value
// rounded as the state stores it, or for τ < 0 the stored state (its rows are the inputs before
// the run, oldest first).
__device__ __forceinline__ float conv_input(const ConvIn& u, const DevConv& conv, const DevRun& r, int64_t hist,
                                            int64_t tau, int64_t c) {
  if (tau >= 0) return round_state(conv.type, u.at(r.row0 + tau, c, conv.dim));
  return load_state(conv.type, conv.state, (static_cast<int64_t>(r.conv_slot) * conv.rows + hist + tau) * conv.dim + c);
}

// Row `row` of run r, channel c: bias, then the taps oldest first, then the new input (the
// reference's order), reading the state as it was before the step.
__device__ __forceinline__ void conv_out_row(const ConvIn& u, const DevConv& conv, const DevRun& r, int64_t row,
                                             int64_t c, int64_t kernel, const float* w, const float* bias,
                                             float* out) {
  const int64_t t = row - r.row0, hist = kernel - 1;
  float z = bias ? bias[c] : 0.0f;
  for (int64_t k = 0; k < hist; ++k) z = __fadd_rn(z, __fmul_rn(w[c * kernel + k], conv_input(u, conv, r, hist, t - hist + k, c)));
  z = __fadd_rn(z, __fmul_rn(w[c * kernel + hist], conv_input(u, conv, r, hist, t, c)));
  // Gated: the output is C ⊙ z, as mul_rows computes it.
  out[row * conv.dim + c] = u.proj ? u.proj[row * 3 * conv.dim + conv.dim + c] * z : z;
}

// Run r, channel c, after its outputs: the checkpoints (the window after each checkpointed
// position) and the new state (the window after the run's last row). The new window is written
// over the old one in place, oldest row first: row k takes input n_rows − hist + k, which (τ < 0)
// is old row n_rows + k > k, not yet overwritten; so no copy of the old window is kept (no local
// array: the kernels keep no stack frame).
__device__ __forceinline__ void conv_state_run(const ConvIn& u, const DevConv& conv, const DevStep& step,
                                               const DevRun& r, int64_t c, int64_t kernel) {
  const int64_t dim = conv.dim, hist = kernel - 1;
  const int64_t slot = static_cast<int64_t>(r.conv_slot) * conv.rows * dim;
  auto in = [&](int64_t tau) {
    return tau >= 0 ? round_state(conv.type, u.at(r.row0 + tau, c, dim))
                    : load_state(conv.type, conv.state, slot + (hist + tau) * dim + c);
  };
  for (int32_t ck = 0; ck < r.n_ckpt; ++ck) {
    const DevCheckpoint cp = step.ckpts[r.ckpt_at + ck];
    const int64_t tp = cp.pos - r.pos0, snap = static_cast<int64_t>(cp.snapshot) * conv.rows * dim;
    for (int64_t k = 0; k < hist; ++k) store_state(conv.type, conv.snapshots, snap + k * dim + c, in(tp - hist + 1 + k));
  }
  for (int64_t k = 0; k < hist; ++k) store_state(conv.type, conv.state, slot + k * dim + c, in(r.n_rows - hist + k));
}

}  // namespace lfm::cuda
