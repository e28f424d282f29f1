// Probe kernels for the CUDA emulator's tests (emu_probes.h); compiled through cuda_emu.h.
#include "cuda_emu/emu_probes.h"

#include "cuda_emu/emu_internal.h"
#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/launch.cuh"

namespace lfm_emu_probe {
namespace {

__global__ void block_sum_kernel(const float* x, int n, float* out) {
  __shared__ float warp_sums[32];
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  float v = i < n ? x[i] : 0.0f;
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = v;
  __syncthreads();
  if (threadIdx.x == 0) {
    float s = 0;
    for (unsigned w = 0; w < blockDim.x / 32; ++w) s += warp_sums[w];
    out[blockIdx.x] = s;
  }
}

// out[7 i ..]: thread i's warp sum and max through warp_reduce (one exchange on the emulator),
// then the same through the explicit shuffle loop (five), then the sums of v and 0.37 v through
// warp_reduce_each and of 0.37 v through shuffles.
__global__ void warp_reduce_kernel(const float* x, float* out) {
  const float v = x[threadIdx.x];
  float s = v, m = v, s2 = v * 0.37f;
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
  for (int o = 16; o > 0; o >>= 1) s2 += __shfl_xor_sync(0xffffffffu, s2, o);
  float each[2] = {v, v * 0.37f};
  lfm::cuda::warp_reduce_each<2>(each, lfm::cuda::SumOp{});
  float* o = out + 7 * threadIdx.x;
  o[0] = lfm::cuda::warp_reduce(v, lfm::cuda::SumOp{});
  o[1] = lfm::cuda::warp_reduce(v, lfm::cuda::MaxOp{});
  o[2] = s;
  o[3] = m;
  o[4] = each[0];
  o[5] = each[1];
  o[6] = s2;
}

__global__ void early_exit_kernel(int stay, int* counter, int* seen) {
  if (static_cast<int>(threadIdx.x) >= stay) return;
  atomicAdd(counter, 1);
  __syncthreads();
  seen[threadIdx.x] = *counter;
}

__global__ void ballot_kernel(int m, unsigned* out) {
  const unsigned b = __ballot_sync(0xffffffffu, threadIdx.x % 32 % m == 0);
  if (threadIdx.x % 32 == 0) out[threadIdx.x / 32] = b;
}

__global__ void strided_read_kernel(const float* x, int stride, float* out) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  LFM_TRACE_LOAD(x + i * stride, 4);
  LFM_TRACE_STORE(out + i, 4);
  out[i] = x[i * stride];
}

__global__ void broadcast_kernel(int src, int* out) {
  out[threadIdx.x] = __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x), src);
}

// Lane 0 waits at the block's barrier for lanes that wait in a shuffle for lane 0.
__global__ void divergent_kernel(int* out) {
  int v = static_cast<int>(threadIdx.x);
  if (threadIdx.x == 0)
    __syncthreads();
  else
    v = __shfl_xor_sync(0xffffffffu, v, 1);
  out[threadIdx.x] = v;
}

__global__ void fill_kernel(float* p, int n) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) p[i] = 1.0f;
}

__global__ void add_kernel(float* p, float v) { *p += v; }

// One warp: a [16 × 8] · b [8 × 16] through wmma's tf32 tiles, once with the inputs rounded to
// tf32 (out[0 .. 256)) and once in three terms of their tf32 parts (out[256 .. 512)), as the
// tensor-core attention multiplies.
__global__ void wmma_kernel(const float* a, const float* b, float* out) {
  alignas(32) __shared__ float sa[128], sb[128], so[256];
  for (int i = static_cast<int>(threadIdx.x); i < 128; i += 32) sa[i] = a[i], sb[i] = b[i];
  __syncwarp();
  using namespace nvcuda;
  wmma::fragment<wmma::matrix_a, 16, 16, 8, wmma::precision::tf32, wmma::row_major> ab, as;
  wmma::fragment<wmma::matrix_b, 16, 16, 8, wmma::precision::tf32, wmma::row_major> bb, bs;
  wmma::fragment<wmma::accumulator, 16, 16, 8, float> one, three;
  wmma::load_matrix_sync(ab, sa, 8);
  wmma::load_matrix_sync(bb, sb, 16);
  for (int i = 0; i < ab.num_elements; ++i) {
    const float x = ab.x[i];
    ab.x[i] = wmma::__float_to_tf32(x);
    as.x[i] = wmma::__float_to_tf32(x - ab.x[i]);
  }
  for (int i = 0; i < bb.num_elements; ++i) {
    const float x = bb.x[i];
    bb.x[i] = wmma::__float_to_tf32(x);
    bs.x[i] = wmma::__float_to_tf32(x - bb.x[i]);
  }
  wmma::fill_fragment(one, 0.0f);
  wmma::fill_fragment(three, 0.0f);
  wmma::mma_sync(one, ab, bb, one);
  wmma::mma_sync(three, ab, bs, three);
  wmma::mma_sync(three, as, bb, three);
  wmma::mma_sync(three, ab, bb, three);
  wmma::store_matrix_sync(so, one, 16, wmma::mem_row_major);
  __syncwarp();
  for (int i = static_cast<int>(threadIdx.x); i < 256; i += 32) out[i] = so[i];
  __syncwarp();
  wmma::store_matrix_sync(so, three, 16, wmma::mem_row_major);
  __syncwarp();
  for (int i = static_cast<int>(threadIdx.x); i < 256; i += 32) out[256 + i] = so[i];
}

__global__ void pdl_double_kernel(const float* x, float* y, int n, bool early) {
  const int i = static_cast<int>(threadIdx.x);
  if (early && i < n) LFM_TRACE_LOAD(x + i, 4);
  LFM_GRID_DEPENDENCY_WAIT();
  if (i >= n) return;
  LFM_TRACE_LOAD(x + i, 4);
  LFM_TRACE_STORE(y + i, 4);
  y[i] = 2.0f * x[i];
}

template <typename T>
T* device(size_t n) {
  void* p = nullptr;
  cudaMalloc(&p, n * sizeof(T));
  cudaMemsetAsync(p, 0, n * sizeof(T), nullptr);
  return static_cast<T*>(p);
}

template <typename T>
std::vector<T> host(const T* p, size_t n) {
  std::vector<T> v(n);
  cudaMemcpyAsync(v.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost, nullptr);
  cudaStreamSynchronize(nullptr);
  return v;
}

std::string error_and_reset() {
  const cudaError_t e = cudaGetLastError();
  std::string s = e == cudaSuccess ? std::string() : lfm_emu::last_error_detail();
  lfm_emu::clear_fault();
  return s;
}

}  // namespace

std::vector<float> block_sums(const std::vector<float>& x, int threads) {
  const int n = static_cast<int>(x.size());
  const int blocks = (n + threads - 1) / threads;
  float* dx = device<float>(x.size());
  float* dout = device<float>(static_cast<size_t>(blocks));
  cudaMemcpyAsync(dx, x.data(), x.size() * sizeof(float), cudaMemcpyHostToDevice, nullptr);
  LFM_LAUNCH(blocks, threads, 0, nullptr, block_sum_kernel)(dx, n, dout);
  auto r = host(dout, static_cast<size_t>(blocks));
  cudaFree(dx);
  cudaFree(dout);
  return r;
}

std::vector<float> warp_reductions(const std::vector<float>& x) {
  float* dx = device<float>(x.size());
  float* dout = device<float>(7 * x.size());
  cudaMemcpyAsync(dx, x.data(), x.size() * sizeof(float), cudaMemcpyHostToDevice, nullptr);
  LFM_LAUNCH(1, static_cast<unsigned>(x.size()), 0, nullptr, warp_reduce_kernel)(dx, dout);
  auto r = host(dout, 7 * x.size());
  cudaFree(dx);
  cudaFree(dout);
  return r;
}

std::vector<int> early_exit_barrier(int threads, int stay) {
  int* counter = device<int>(1);
  int* seen = device<int>(static_cast<size_t>(threads));
  LFM_LAUNCH(1, threads, 0, nullptr, early_exit_kernel)(stay, counter, seen);
  auto r = host(seen, static_cast<size_t>(stay));
  cudaFree(counter);
  cudaFree(seen);
  return r;
}

std::vector<unsigned> ballots(int threads, int m) {
  unsigned* out = device<unsigned>(static_cast<size_t>(threads / 32));
  LFM_LAUNCH(1, threads, 0, nullptr, ballot_kernel)(m, out);
  auto r = host(out, static_cast<size_t>(threads / 32));
  cudaFree(out);
  return r;
}

std::vector<int> broadcasts(int threads, int src) {
  int* out = device<int>(static_cast<size_t>(threads));
  LFM_LAUNCH(1, threads, 0, nullptr, broadcast_kernel)(src, out);
  auto r = host(out, static_cast<size_t>(threads));
  cudaFree(out);
  return r;
}

std::string divergent_barrier_error() {
  int* out = device<int>(32);
  LFM_LAUNCH(1, 32, 0, nullptr, divergent_kernel)(out);
  std::string e = error_and_reset();
  cudaFree(out);
  return e;
}

std::string write_past_end_error() {
  float* p = device<float>(100);
  LFM_LAUNCH(1, 128, 0, nullptr, fill_kernel)(p, 101);
  std::string e = error_and_reset();
  cudaFree(p);
  lfm_emu::clear_fault();
  return e;
}

std::string oversized_block_error() {
  float* p = device<float>(4096);
  LFM_LAUNCH(1, 2048, 0, nullptr, fill_kernel)(p, 4096);
  cudaFree(p);
  return error_and_reset();
}

float graph_replays(int replays, float v) {
  cudaStream_t s = nullptr;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  float* p = device<float>(1);
  cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed);
  float captured = v;
  LFM_LAUNCH(1, 1, 0, s, add_kernel)(p, captured);
  captured = 1000;  // the graph keeps the value it was captured with
  cudaGraph_t g = nullptr;
  cudaStreamEndCapture(s, &g);
  cudaGraphExec_t exec = nullptr;
  cudaGraphInstantiate(&exec, g, 0);
  cudaGraphDestroy(g);
  const float before = host(p, 1)[0];  // capturing ran nothing
  for (int i = 0; i < replays; ++i) cudaGraphLaunch(exec, s);
  cudaGraphExecDestroy(exec);
  const float r = host(p, 1)[0];
  cudaFree(p);
  cudaStreamDestroy(s);
  return before == 0 ? r : -1;
}

std::vector<uint64_t> strided_read_trace(int threads, int stride) {
  float* x = device<float>(static_cast<size_t>(threads * stride));
  float* out = device<float>(static_cast<size_t>(threads));
  lfm_emu::trace::begin();
  LFM_LAUNCH((threads + 31) / 32, 32, 0, nullptr, strided_read_kernel)(x, stride, out);
  const lfm_emu::trace::Step s = lfm_emu::trace::end();
  cudaFree(x);
  cudaFree(out);
  if (s.launches.size() != 1) return {0, 0, 0, 0, s.launches.size(), 0};
  const lfm_emu::trace::Launch& l = s.launches[0];
  return {l.load_bytes, l.load_sectors, l.load_useful, l.store_sectors, 1, l.traced ? 1u : 0u};
}

bool sync_in_capture_refused() {
  cudaStream_t s = nullptr;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed);
  const bool refused = cudaStreamSynchronize(s) == cudaErrorStreamCaptureUnsupported;
  cudaGraph_t g = nullptr;
  cudaStreamEndCapture(s, &g);
  cudaGraphDestroy(g);
  cudaStreamDestroy(s);
  error_and_reset();
  return refused;
}

std::vector<float> wmma_products(const std::vector<float>& a, const std::vector<float>& b) {
  float* da = device<float>(128);
  float* db = device<float>(128);
  float* dout = device<float>(512);
  cudaMemcpyAsync(da, a.data(), 128 * sizeof(float), cudaMemcpyHostToDevice, nullptr);
  cudaMemcpyAsync(db, b.data(), 128 * sizeof(float), cudaMemcpyHostToDevice, nullptr);
  LFM_LAUNCH(1, 32, 0, nullptr, wmma_kernel)(da, db, dout);
  auto r = host(dout, 512);
  cudaFree(da);
  cudaFree(db);
  cudaFree(dout);
  return r;
}

std::string pdl_read_error(bool early) {
  float* x = device<float>(64);
  float* y = device<float>(64);
  LFM_LAUNCH_PDL(true, 1, 64, 0, nullptr, pdl_double_kernel)(x, y, 64, early);
  cudaStreamSynchronize(nullptr);
  std::string e = error_and_reset();
  cudaFree(x);
  cudaFree(y);
  return e;
}

}  // namespace lfm_emu_probe
