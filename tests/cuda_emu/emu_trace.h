// What a profiler would see of the emulated backend, for the cost model (cost_model.h): per
// kernel launch its name, the backend op it serves, grid and block, and the global-memory bytes
// its threads requested with the distinct 32-byte sectors they touched; per traced stretch
// ("step") the launches, graph launches, host↔device copies and stream synchronisations.
//
// Kernels read global memory through plain dereferences, which the emulator cannot see, so only
// accesses a kernel announces are counted: LFM_TRACE_LOAD / LFM_TRACE_STORE (nothing on a GPU)
// in the weight decoders (block_decode.cuh: decode8, the decode GEMV's loads), the GEMV's
// activation loads and output stores, and the state pools' accessors (state_access.cuh: KV and
// conv state). A launch none of whose accesses are announced is marked untraced. Accesses count
// only while a traced launch runs, so host-side uses of the same decoders are not counted.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace lfm_emu {

extern bool g_trace_accesses;  // true only while a launch runs under trace::begin
// True while a launch with programmatic dependent launch runs (launch.cuh's LFM_LAUNCH_PDL): an
// announced access is then checked to come after the thread's LFM_GRID_DEPENDENCY_WAIT
// (emu_threads.cpp; a thread that did not wait fails the launch).
extern bool g_pdl_launch;
void pdl_access_check();
void trace_access_slow(const void* p, size_t bytes, bool store);
inline void trace_access(const void* p, size_t bytes, bool store) {
  if (g_pdl_launch) pdl_access_check();
  if (g_trace_accesses) trace_access_slow(p, bytes, store);
}
void trace_serial_passes_slow(int passes);
inline void trace_serial_passes(int passes) {
  if (g_trace_accesses) trace_serial_passes_slow(passes);
}

namespace trace {

struct Launch {
  std::string kernel;  // the launch's kernel expression ("cublasGemmEx" for a GEMM)
  std::string op;      // the backend op being timed (cuda_profile.h's names; "" outside one)
  dim3 grid, block;
  bool traced = false;    // some access was announced
  bool in_graph = false;  // run by a graph's replay (cudaGraphLaunch), not launched from the host
  bool pdl = false;       // launched with programmatic dependent launch (LFM_LAUNCH_PDL)
  // Bytes the threads asked for (a sector read twice counts twice), the distinct sectors they
  // touched, and the distinct bytes within those sectors ("useful": what a perfect access would move).
  uint64_t load_bytes = 0, load_sectors = 0, load_useful = 0;
  uint64_t store_bytes = 0, store_sectors = 0, store_useful = 0;
  // Per warp-level load request (begin(true) only): the k-th announced load of each lane of a warp
  // taken as one instruction, as a profiler's "sectors per request" counts it (lanes of the
  // emulator run one after another, so lanes whose control flow differs pair up wrongly).
  // request_bytes: the distinct bytes each request's lanes asked for, summed over requests.
  uint64_t requests = 0, request_sectors = 0, request_bytes = 0;
  // Passes one block makes alone over a row after the rest of the grid is done (LFM_TRACE_SERIAL_PASSES).
  int serial_passes = 0;
  uint64_t threads() const { return 1ull * grid.x * grid.y * grid.z * block.x * block.y * block.z; }
};

struct Step {
  std::vector<Launch> launches;   // in execution order (a graph replay's launches included)
  int graph_launches = 0;         // cudaGraphLaunch calls
  int uploads = 0, downloads = 0, device_copies = 0, memsets = 0;
  uint64_t up_bytes = 0, down_bytes = 0, device_copy_bytes = 0;
  int syncs = 0;                  // cudaStreamSynchronize calls: the host waiting for the device
  // Per sync, how many launches (graph launches counted as one each) the host had issued
  // before it: 0 or the step's total means at its edge, anything between a round trip inside it.
  std::vector<int> sync_at;
  int host_launches = 0;          // launches from the host plus graph launches
  uint64_t load_sectors = 0, load_useful = 0;  // distinct over the whole step
};

// Starts counting (clearing what was counted); end() stops and returns the counts.
// `per_request`: also group accesses into warp-level requests (slower; small launches).
void begin(bool per_request = false);
Step end();
bool active();
// The op the following launches serve (cuda_profile.cpp's timer calls it; "" when it ends).
void set_op(std::string_view op);

// The runtime's hooks (emu_runtime.cpp).
void launch_begin(const char* kernel, dim3 grid, dim3 block, bool pdl = false);
void launch_end();
void copy(cudaMemcpyKind kind, size_t bytes);
void memset_call();
void sync_call();
void graph_launch_call();
void graph_replay(bool running);  // around a replay's launches
// A device allocation appeared or went (the sector masks are kept per allocation).
void allocation(const void* base, size_t bytes);
void release(const void* base);

}  // namespace trace
}  // namespace lfm_emu

#define LFM_TRACE_LOAD(p, bytes) ::lfm_emu::trace_access((p), (bytes), false)
#define LFM_TRACE_STORE(p, bytes) ::lfm_emu::trace_access((p), (bytes), true)
#define LFM_TRACE_SERIAL_PASSES(n) ::lfm_emu::trace_serial_passes(n)
