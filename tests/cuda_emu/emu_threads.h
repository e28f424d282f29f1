// The CUDA emulator's execution model (see cuda_emu.h): a launch runs its blocks one after
// another; a block's threads are fibers on one OS thread that switch only where CUDA threads wait
// for each other (__syncthreads, a warp's shuffle or ballot), so a barrier releases when every
// live thread of the block (or warp) has reached it, threads that returned early no longer count,
// and a barrier some threads can never reach is reported as a deadlock naming the kernel.
// Kernels seen to run a whole launch without a barrier run their later launches as plain calls.
// Launches from several OS threads take turns (one global lock).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <tuple>
#include <type_traits>
#include <utility>

namespace lfm_emu {

// The running thread's indices and the launch's shape.
const uint3& thread_idx();
const uint3& block_idx();
const dim3& block_dim();
const dim3& grid_dim();
// The launch's dynamic shared memory (zeroed, as many bytes as the launch asked for).
void* dynamic_shared();

void sync_block();
// __syncwarp: the live lanes of the running thread's warp wait for each other.
void sync_warp();
// A warp-wide operation (wmma's mma_sync) whose lanes all pass the same inputs: the first lane to
// make its k-th such call runs compute(out), the others get its result (after checking their
// inputs are the same bytes: a kernel that gives one warp-wide product different tiles per lane
// is reported). Lanes of a warp make the same calls in the same order, as a GPU requires.
void warp_collective(const void* in, size_t in_bytes, void* out, size_t out_bytes,
                     const std::function<void(void*)>& compute);
// The running thread's lane in its warp.
int lane_id();
// Every lane of the warp offers `bits`; each gets the bits offered by lane `source`.
uint64_t warp_exchange(uint64_t bits, int source);
unsigned warp_ballot(unsigned mask, bool predicate);
// Every lane of a full warp offers n values (bits[0 .. n)); the last to arrive runs `butterfly`
// over each value's 32 offers (lanes[v · 32 + lane], in place) and each lane gets its own entries
// of the results back in bits.
void warp_reduce_bits(uint64_t* bits, int n, void (*butterfly)(uint64_t* lanes));

// The kernels' warp_reduce (kernels/cuda/block_reduce.cuh): the butterfly
//   for (o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(~0u, v, o));
// as the same operations in the same order on every lane's value, in one exchange, not five.
template <typename T, typename Op>
void butterfly_lanes(uint64_t* lanes) {
  T t[32], n[32];
  for (int l = 0; l < 32; ++l) std::memcpy(&t[l], &lanes[l], sizeof(T));
  for (int o = 16; o > 0; o >>= 1) {
    for (int l = 0; l < 32; ++l) n[l] = Op{}(t[l], t[l ^ o]);
    for (int l = 0; l < 32; ++l) t[l] = n[l];
  }
  for (int l = 0; l < 32; ++l) {
    lanes[l] = 0;
    std::memcpy(&lanes[l], &t[l], sizeof(T));
  }
}
// The butterfly of each of N values (v[0 .. N)) on every lane, in one exchange.
template <int N, typename T, typename Op>
void warp_butterfly_each(T* v, Op) {
  static_assert(sizeof(T) <= 8 && std::is_trivially_copyable_v<T>, "emulated reductions move up to 8 bytes");
  static_assert(std::is_empty_v<Op>, "an emulated reduction's operation carries no state");
  uint64_t bits[N] = {};
  for (int i = 0; i < N; ++i) std::memcpy(&bits[i], &v[i], sizeof(T));
  warp_reduce_bits(bits, N, &butterfly_lanes<T, Op>);
  for (int i = 0; i < N; ++i) std::memcpy(&v[i], &bits[i], sizeof(T));
}

template <typename T>
T warp_shuffle(unsigned /*mask*/, T v, int source) {
  static_assert(sizeof(T) <= 8 && std::is_trivially_copyable_v<T>, "emulated shuffles move up to 8 bytes");
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof(T));
  bits = warp_exchange(bits, source);
  T r;
  std::memcpy(&r, &bits, sizeof(T));
  return r;
}

struct LaunchConfig {
  const char* kernel;  // the launch's kernel expression, for messages
  const void* key;     // the kernel function
  dim3 grid, block;
  size_t shared_bytes;
  cudaStream_t stream;
  bool pdl = false;  // launched with programmatic dependent launch (LFM_LAUNCH_PDL)
};

// Checks the configuration, then runs the grid (or records it while the stream is captured).
// Errors become the runtime's sticky error, as a failed launch does on a GPU.
void submit(const LaunchConfig& cfg, std::function<void()> thread_body);
// Runs every block of a launch now (emu_runtime.cpp calls it when the launch's turn comes).
void run_grid(const LaunchConfig& cfg, const std::function<void()>& thread_body);

template <typename... P>
struct Launcher {
  LaunchConfig cfg;
  void (*kernel)(P...);
  template <typename... A>
  void operator()(A&&... args) const {
    // The parameters are copied at the launch, converted to the kernel's types, as CUDA does.
    std::tuple<std::decay_t<P>...> params(static_cast<std::decay_t<P>>(std::forward<A>(args))...);
    submit(cfg, [k = kernel, params] { std::apply(k, params); });
  }
};

template <typename... P>
Launcher<P...> launcher(const char* name, dim3 grid, dim3 block, size_t shared_bytes, cudaStream_t stream,
                        void (*kernel)(P...), bool pdl = false) {
  return Launcher<P...>{{name, reinterpret_cast<const void*>(kernel), grid, block, shared_bytes, stream, pdl}, kernel};
}

// LFM_GRID_DEPENDENCY_WAIT() in an emulated kernel: the launches run one after another, so there
// is nothing to wait for; the thread is marked as having waited (see g_pdl_launch).
void grid_dependency_wait();

}  // namespace lfm_emu
