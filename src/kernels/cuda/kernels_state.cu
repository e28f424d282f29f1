// State kernels over the paged pools (kernels/state_pools.h): K/V writes and the short conv with
// its rolling state and checkpoints (attention: kernels_attention.cu). A row finds its run through the step's
// row → run table; positions map to blocks through the run's block table.
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/conv_state.cuh"
#include "kernels/cuda/state_access.cuh"

namespace lfm::cuda {

namespace {

__global__ void kv_write_kernel(DevKv kv, DevStep step, const float* k, const float* v) {
  const int64_t width = kv.kv_heads * kv.head_dim;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= step.n_rows * width) return;
  const int64_t row = i / width, e = i % width, g = e / kv.head_dim, d = e % kv.head_dim;
  int64_t base, t;
  if (!kv_slot(kv, step, row, g, base, t)) return;
  store_state(kv.type, kv.k, base + d * kv.block_tokens + t, k[i]);  // keys dim-major
  store_state(kv.type, kv.v, base + t * kv.head_dim + d, v[i]);      // values one row per position
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
