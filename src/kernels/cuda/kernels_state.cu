// State kernels over the paged pools (kernels/state_pools.h): K/V writes and the short conv with
// its rolling state and checkpoints (attention: kernels_attention.cu). A row finds its run through the step's
// row → run table; positions map to blocks through the run's block table.
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/state_access.cuh"

namespace lfm::cuda {

namespace {

__global__ void kv_write_kernel(DevKv kv, DevStep step, const float* k, const float* v) {
  const int64_t width = kv.kv_heads * kv.head_dim;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= step.n_rows * width) return;
  const int64_t row = i / width, e = i % width, g = e / kv.head_dim, d = e % kv.head_dim;
  const int32_t ri = step.row_run[row];
  if (ri < 0) return;
  const DevRun r = step.runs[ri];
  const int64_t pos = r.pos0 + (row - r.row0);
  const int32_t block = step.blocks[r.blocks_at + pos / kv.block_tokens];
  const int64_t t = pos % kv.block_tokens, base = head_block(kv, block, g);
  store_state(kv.type, kv.k, base + d * kv.block_tokens + t, k[i]);  // keys dim-major
  store_state(kv.type, kv.v, base + t * kv.head_dim + d, v[i]);      // values one row per position
}

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
// position) and the new state (the window after the run's last row).
__device__ __forceinline__ void conv_state_run(const ConvIn& u, const DevConv& conv, const DevStep& step,
                                               const DevRun& r, int64_t c, int64_t kernel) {
  const int64_t dim = conv.dim, hist = kernel - 1;
  const int64_t slot = static_cast<int64_t>(r.conv_slot) * conv.rows * dim;
  float old[kMaxConvHistory];
  for (int64_t k = 0; k < hist; ++k) old[k] = load_state(conv.type, conv.state, slot + k * dim + c);
  auto in = [&](int64_t tau) { return tau >= 0 ? round_state(conv.type, u.at(r.row0 + tau, c, dim)) : old[hist + tau]; };
  for (int32_t ck = 0; ck < r.n_ckpt; ++ck) {
    const DevCheckpoint cp = step.ckpts[r.ckpt_at + ck];
    const int64_t tp = cp.pos - r.pos0, snap = static_cast<int64_t>(cp.snapshot) * conv.rows * dim;
    for (int64_t k = 0; k < hist; ++k) store_state(conv.type, conv.snapshots, snap + k * dim + c, in(tp - hist + 1 + k));
  }
  float now[kMaxConvHistory];
  for (int64_t k = 0; k < hist; ++k) now[k] = in(r.n_rows - hist + k);
  for (int64_t k = 0; k < hist; ++k) store_state(conv.type, conv.state, slot + k * dim + c, now[k]);
}

// One thread per (row, channel), every row at once.
__global__ void short_conv_out_kernel(ConvIn u, DevConv conv, DevStep step, int64_t kernel, const float* w,
                                      const float* bias, float* out) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= step.n_rows * conv.dim) return;
  const int64_t row = i / conv.dim, c = i % conv.dim;
  const int32_t ri = step.row_run[row];
  if (ri < 0) return;
  conv_out_row(u, conv, step.runs[ri], row, c, kernel, w, bias, out);
}

// One thread per (run, channel), after the outputs.
__global__ void short_conv_state_kernel(ConvIn u, DevConv conv, DevStep step, int64_t kernel) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= static_cast<int64_t>(step.n_runs) * conv.dim) return;
  conv_state_run(u, conv, step, step.runs[i / conv.dim], i % conv.dim, kernel);
}

// A step whose runs have one row each (decode): one thread per (run, channel) writes the row's
// output, then the run's state, in one launch instead of the two above. Only this thread reads
// or writes its (run, channel) state, and it reads before it writes: the same bits.
__global__ void short_conv_decode_kernel(ConvIn u, DevConv conv, DevStep step, int64_t kernel, const float* w,
                                         const float* bias, float* out) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= static_cast<int64_t>(step.n_runs) * conv.dim) return;
  const DevRun r = step.runs[i / conv.dim];
  const int64_t c = i % conv.dim;
  conv_out_row(u, conv, r, r.row0, c, kernel, w, bias, out);
  conv_state_run(u, conv, step, r, c, kernel);
}

unsigned blocks_for(int64_t n, int per) { return static_cast<unsigned>((n + per - 1) / per); }

}  // namespace

void kv_write(const DevKv& kv, const DevStep& step, const float* k, const float* v, cudaStream_t s) {
  const int64_t n = step.n_rows * kv.kv_heads * kv.head_dim;
  if (n == 0) return;
  LFM_LAUNCH(blocks_for(n, 256), 256, 0, s, kv_write_kernel)(kv, step, k, v);
  LFM_CUDA_CHECK(cudaGetLastError());
}

void short_conv(const float* u, const DevConv& conv, const DevStep& step, int64_t kernel, const float* w,
                const float* bias, float* out, cudaStream_t s) {
  short_conv_gated(u, nullptr, conv, step, kernel, w, bias, out, s);
}

void short_conv_gated(const float* u, const float* proj, const DevConv& conv, const DevStep& step, int64_t kernel,
                      const float* w, const float* bias, float* out, cudaStream_t s) {
  LFM_CHECK(kernel >= 1 && kernel - 1 <= kMaxConvHistory, "cuda: short conv supports kernels of 1 to ",
            kMaxConvHistory + 1, " taps, got ", kernel);
  const int64_t n = step.n_rows * conv.dim, runs = static_cast<int64_t>(step.n_runs) * conv.dim;
  if (n == 0) return;
  const ConvIn in{proj ? nullptr : u, proj};
  if (step.max_run_rows == 1) {
    LFM_LAUNCH(blocks_for(runs, 128), 128, 0, s, short_conv_decode_kernel)(in, conv, step, kernel, w, bias, out);
    LFM_CUDA_CHECK(cudaGetLastError());
    return;
  }
  LFM_LAUNCH(blocks_for(n, 256), 256, 0, s, short_conv_out_kernel)(in, conv, step, kernel, w, bias, out);
  LFM_CUDA_CHECK(cudaGetLastError());
  LFM_LAUNCH(blocks_for(runs, 128), 128, 0, s, short_conv_state_kernel)(in, conv, step, kernel);
  LFM_CUDA_CHECK(cudaGetLastError());
}

}  // namespace lfm::cuda
