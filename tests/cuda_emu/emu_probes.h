// Small kernels that probe the CUDA emulator's own promises (emu_probes.cpp is compiled like the
// backend's sources, through cuda_emu.h); each returns what the kernel computed, or the error the
// runtime reported, and clears the emulated device's fault afterwards.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace lfm_emu_probe {

// Per block of `threads`, the sum of its x through a warp butterfly, shared memory and
// __syncthreads (threads past x's end add 0).
std::vector<float> block_sums(const std::vector<float>& x, int threads);
// For one block of x.size() threads (whole warps), per thread (7 values): its warp's sum and max
// through block_reduce.cuh's warp_reduce, the same through the explicit __shfl_xor_sync
// butterfly, the sums of v and 0.37 v through warp_reduce_each, and of 0.37 v through shuffles.
std::vector<float> warp_reductions(const std::vector<float>& x);
// A block of `threads` where threads >= `stay` return before a barrier: each remaining thread
// gets the count of those that wrote before it, proving the barrier released without the others.
std::vector<int> early_exit_barrier(int threads, int stay);
// __ballot_sync of (lane % m == 0) in every warp of one block.
std::vector<unsigned> ballots(int threads, int m);
// __shfl_sync broadcast of lane `src`'s id in each warp.
std::vector<int> broadcasts(int threads, int src);
// The error text a faulting launch leaves: lane 0 at a block barrier while its warp waits for it
// in a shuffle; a write one element past a device allocation; a block of 2048 threads.
std::string divergent_barrier_error();
std::string write_past_end_error();
std::string oversized_block_error();
// Launches captured into a graph run again with the values they were captured with: a captured
// "add v" applied `replays` times to a zeroed device float.
float graph_replays(int replays, float v);
// cudaStreamSynchronize while capturing is refused.
bool sync_in_capture_refused();
// The cost-model trace (emu_trace.h) of one launch of `threads` threads, thread i reading the
// float at i · stride and writing one float at i (both announced): {load bytes, load sectors,
// distinct load bytes, store sectors, launches, traced}.
std::vector<uint64_t> strided_read_trace(int threads, int stride);

// One launch with programmatic dependent launch (LFM_LAUNCH_PDL) of 64 threads computing y = 2x,
// each thread announcing its read of x after LFM_GRID_DEPENDENCY_WAIT, or (early) also before
// it: the error the runtime reported ("" for none).
std::string pdl_read_error(bool early);

// a [16 × 8] · b [8 × 16] (row-major) through the emulated wmma tf32 tiles of one warp: the
// product of the inputs rounded to tf32 (256 values), then the three-term product of their tf32
// big and small parts (256 more).
std::vector<float> wmma_products(const std::vector<float>& a, const std::vector<float>& b);

}  // namespace lfm_emu_probe
