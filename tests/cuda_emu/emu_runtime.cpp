// The emulator's CUDA runtime and cuBLAS (the calls cuda_emu.h renames): device memory is host
// memory with guard bytes after every allocation (checked after every kernel) and range checks on
// every copy; streams run their work at once, in order; stream capture records it into a graph
// that cudaGraphLaunch runs again with the parameters it was captured with; GEMMs are plain loops
// accumulating in float. One device with LFM_CUDA_EMU_MEMORY_MB of memory (default 4096).
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <stdexcept>
#include <algorithm>
#include <string>
#include <unordered_map>
#include <vector>

#include "cuda_emu/emu_internal.h"
#include "cuda_emu/emu_threads.h"
#include "cuda_emu/emu_trace.h"

// The declarations of the renamed API (cuda_emu.h without its macros).
cudaError_t lfm_emu_set_max_dynamic_shared(const void* kernel, int bytes);

namespace lfm_emu {
namespace {

constexpr size_t kGuardBytes = 256;
constexpr unsigned char kGuardByte = 0xCD;
constexpr size_t kMaxDynamicShared = 232448;  // sm_90's opt-in limit per block
constexpr size_t kDefaultDynamicShared = 48 * 1024;

struct Stream {
  bool capturing = false;
  std::vector<std::function<void()>> captured;
};

struct Graph {
  std::vector<std::function<void()>> ops;
};

struct BlasHandle {
  cudaStream_t stream = nullptr;
};

std::recursive_mutex g_mu;  // the runtime's state; ops run under it, in submission order
std::map<uintptr_t, size_t> g_device;  // allocation base → bytes
size_t g_used = 0;
cudaError_t g_last = cudaSuccess;   // cleared by cudaGetLastError
cudaError_t g_fault = cudaSuccess;  // a kernel's fault: sticky
std::string g_detail;
std::unordered_map<const void*, size_t> g_shared_limit;
Stream g_default_stream;

size_t memory_budget() {
  const char* env = std::getenv("LFM_CUDA_EMU_MEMORY_MB");
  const long mb = env ? std::atol(env) : 4096;
  return static_cast<size_t>(mb > 0 ? mb : 4096) << 20;
}

Stream& stream_of(cudaStream_t s) { return s ? *reinterpret_cast<Stream*>(s) : g_default_stream; }

cudaError_t fail_with(cudaError_t err, const std::string& detail) {
  g_last = err;
  g_detail = detail.rfind("cuda emulator: ", 0) == 0 ? detail : "cuda emulator: " + detail;
  std::fprintf(stderr, "%s\n", g_detail.c_str());
  return err;
}

// Whether [p, p + bytes) lies inside one device allocation.
bool on_device(const void* p, size_t bytes) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  auto it = g_device.upper_bound(a);
  if (it == g_device.begin()) return false;
  --it;
  return a >= it->first && a + bytes <= it->first + it->second;
}

float load_element(const void* base, cudaDataType_t t, size_t i) {
  switch (t) {
    case CUDA_R_32F: return static_cast<const float*>(base)[i];
    case CUDA_R_16F: return __half2float(static_cast<const __half*>(base)[i]);
    case CUDA_R_16BF: return __bfloat162float(static_cast<const __nv_bfloat16*>(base)[i]);
    default: throw std::runtime_error("cuda emulator: a GEMM operand type cuBLAS emulation does not read");
  }
}

void store_element(void* base, cudaDataType_t t, size_t i, float v) {
  switch (t) {
    case CUDA_R_32F: static_cast<float*>(base)[i] = v; break;
    case CUDA_R_16F: static_cast<__half*>(base)[i] = __float2half_rn(v); break;
    case CUDA_R_16BF: static_cast<__nv_bfloat16*>(base)[i] = __float2bfloat16_rn(v); break;
    default: throw std::runtime_error("cuda emulator: a GEMM result type cuBLAS emulation does not write");
  }
}

size_t element_bytes(cudaDataType_t t) { return t == CUDA_R_32F ? 4 : 2; }

// C (m × n, column-major, ldc) = alpha · op(A) · op(B) + beta · C, every dot product in float, in
// order. The operands are unpacked to float once: op(B) as n × k, op(A) in panels of 8 rows (k × 8
// each), so that the eight outputs of a panel and column run side by side, each its own in-order
// sum (a loop vectorised across outputs, not within a sum), with the panel in cache for every column.
void gemm(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, float alpha, const void* a,
          cudaDataType_t at, int lda, const void* b, cudaDataType_t bt, int ldb, float beta, void* c,
          cudaDataType_t ct, int ldc) {
  const size_t a_span = static_cast<size_t>(lda) * static_cast<size_t>(ta == CUBLAS_OP_N ? k : m);
  const size_t b_span = static_cast<size_t>(ldb) * static_cast<size_t>(tb == CUBLAS_OP_N ? n : k);
  const size_t c_span = static_cast<size_t>(ldc) * static_cast<size_t>(n);
  if (!on_device(a, a_span * element_bytes(at)) || !on_device(b, b_span * element_bytes(bt)) ||
      !on_device(c, c_span * element_bytes(ct)))
    throw std::runtime_error("cuda emulator: a GEMM operand runs past its device allocation");
  constexpr size_t kPanel = 8;
  const size_t M = static_cast<size_t>(m), N = static_cast<size_t>(n), K = static_cast<size_t>(k);
  const size_t panels = (M + kPanel - 1) / kPanel;
  std::vector<float> b_nk(N * K), panel(K * kPanel);  // b_nk[j · k + l] = op(B)[l, j]; panel[l · 8 + r] = op(A)[i0 + r, l]
  for (size_t j = 0; j < N; ++j)
    for (size_t l = 0; l < K; ++l)
      b_nk[j * K + l] = load_element(b, bt, tb == CUBLAS_OP_N ? l + j * static_cast<size_t>(ldb)
                                                              : j + l * static_cast<size_t>(ldb));
  for (size_t p = 0; p < panels; ++p) {
    const size_t i0 = p * kPanel, w = std::min(kPanel, M - i0);
    for (size_t l = 0; l < K; ++l)
      for (size_t r = 0; r < kPanel; ++r) {
        const size_t i = i0 + (r < w ? r : 0);
        panel[l * kPanel + r] = load_element(a, at, ta == CUBLAS_OP_N ? i + l * static_cast<size_t>(lda)
                                                                      : l + i * static_cast<size_t>(lda));
      }
    for (size_t j = 0; j < N; ++j) {
      const float* bj = &b_nk[j * K];
      float acc[kPanel] = {};
      for (size_t l = 0; l < K; ++l)
        for (size_t r = 0; r < kPanel; ++r) acc[r] += panel[l * kPanel + r] * bj[l];
      for (size_t r = 0; r < w; ++r) {
        const size_t ci = i0 + r + j * static_cast<size_t>(ldc);
        const float old = beta == 0.0f ? 0.0f : load_element(c, ct, ci);
        store_element(c, ct, ci, alpha * acc[r] + beta * old);
      }
    }
  }
}

}  // namespace

cudaError_t stream_op(cudaStream_t s, std::function<void()> op) {
  std::lock_guard<std::recursive_mutex> lock(g_mu);
  if (g_fault != cudaSuccess) return g_fault;
  Stream& st = stream_of(s);
  if (st.capturing) {
    st.captured.push_back(std::move(op));
    return cudaSuccess;
  }
  try {
    op();
  } catch (const std::exception& e) {
    g_fault = fail_with(cudaErrorLaunchFailure, e.what());
    return g_fault;
  }
  return cudaSuccess;
}

std::string last_error_detail() {
  std::lock_guard<std::recursive_mutex> lock(g_mu);
  return g_detail;
}

void clear_fault() {
  std::lock_guard<std::recursive_mutex> lock(g_mu);
  g_fault = g_last = cudaSuccess;
  g_detail.clear();
}

void set_launch_error(cudaError_t err, const std::string& detail) {
  std::lock_guard<std::recursive_mutex> lock(g_mu);
  fail_with(err, detail);
}

size_t max_dynamic_shared(const void* kernel) {
  std::lock_guard<std::recursive_mutex> lock(g_mu);
  auto it = g_shared_limit.find(kernel);
  return it == g_shared_limit.end() ? kDefaultDynamicShared : it->second;
}

void check_guards(const char* kernel) {
  std::lock_guard<std::recursive_mutex> lock(g_mu);
  for (const auto& [base, bytes] : g_device) {
    unsigned char* guard = reinterpret_cast<unsigned char*>(base) + bytes;
    for (size_t i = 0; i < kGuardBytes; ++i)
      if (guard[i] != kGuardByte) {
        std::memset(guard, kGuardByte, kGuardBytes);
        throw std::runtime_error(std::string("cuda emulator: ") + kernel + " wrote past the end of a " +
                                 std::to_string(bytes) + "-byte allocation (byte " + std::to_string(i) + " after it)");
      }
  }
}

void submit(const LaunchConfig& cfg, std::function<void()> thread_body) {
  const dim3 g = cfg.grid, b = cfg.block;
  const unsigned long long threads = 1ull * b.x * b.y * b.z;
  if (threads == 0 || threads > 1024 || b.z > 64 || g.x == 0 || g.y == 0 || g.z == 0 || g.y > 65535 ||
      g.z > 65535 || g.x > 2147483647u) {
    set_launch_error(cudaErrorInvalidConfiguration,
                     std::string(cfg.kernel) + ": grid (" + std::to_string(g.x) + "," + std::to_string(g.y) + "," +
                         std::to_string(g.z) + ") of blocks (" + std::to_string(b.x) + "," + std::to_string(b.y) + "," +
                         std::to_string(b.z) + ")");
    return;
  }
  if (cfg.shared_bytes > max_dynamic_shared(cfg.key)) {
    set_launch_error(cudaErrorInvalidValue, std::string(cfg.kernel) + ": " + std::to_string(cfg.shared_bytes) +
                                                " bytes of dynamic shared memory over the kernel's limit");
    return;
  }
  const cudaError_t err = stream_op(cfg.stream, [cfg, body = std::move(thread_body)] {
    trace::launch_begin(cfg.kernel, cfg.grid, cfg.block, cfg.pdl);
    struct EndLaunch {
      ~EndLaunch() { trace::launch_end(); }
    } end_launch;
    run_grid(cfg, body);
    check_guards(cfg.kernel);
  });
  if (err != cudaSuccess) {
    std::lock_guard<std::recursive_mutex> lock(g_mu);
    g_last = err;
  }
}

}  // namespace lfm_emu

using lfm_emu::g_mu;

cudaError_t lfm_emu_set_max_dynamic_shared(const void* kernel, int bytes) {
  std::lock_guard<std::recursive_mutex> lock(g_mu);
  if (bytes < 0 || static_cast<size_t>(bytes) > lfm_emu::kMaxDynamicShared)
    return lfm_emu::fail_with(cudaErrorInvalidValue, "cudaFuncSetAttribute: " + std::to_string(bytes) +
                                                         " bytes of dynamic shared memory");
  lfm_emu::g_shared_limit[kernel] = static_cast<size_t>(bytes);
  return cudaSuccess;
}

cudaError_t lfm_emu_cudaGetLastError() {
  std::lock_guard<std::recursive_mutex> lock(g_mu);
  const cudaError_t e = lfm_emu::g_last != cudaSuccess ? lfm_emu::g_last : lfm_emu::g_fault;
  lfm_emu::g_last = cudaSuccess;
  return e;
}

const char* lfm_emu_cudaGetErrorString(cudaError_t err) {
  switch (err) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument (emulated)";
    case cudaErrorMemoryAllocation: return "out of memory (emulated)";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument (emulated)";
    case cudaErrorLaunchFailure: return "unspecified launch failure (emulated; the emulator's message is above)";
    case cudaErrorStreamCaptureUnsupported: return "operation not permitted when stream is capturing (emulated)";
    case cudaErrorIllegalState: return "illegal state (emulated)";
    default: return "error (emulated)";
  }
}

cudaError_t lfm_emu_cudaGetDeviceCount(int* n) {
  *n = 1;
  return cudaSuccess;
}

cudaError_t lfm_emu_cudaSetDevice(int device) {
  return device == 0 ? cudaSuccess : lfm_emu::fail_with(cudaErrorInvalidDevice, "no emulated device " + std::to_string(device));
}

cudaError_t lfm_emu_cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  if (device != 0) return lfm_emu::fail_with(cudaErrorInvalidDevice, "no emulated device " + std::to_string(device));
  std::memset(prop, 0, sizeof(*prop));
  std::snprintf(prop->name, sizeof(prop->name), "CUDA emulator on the CPU");
  prop->major = 9;
  prop->minor = 0;
  prop->totalGlobalMem = lfm_emu::memory_budget();
  prop->sharedMemPerBlock = lfm_emu::kDefaultDynamicShared;
  prop->sharedMemPerBlockOptin = lfm_emu::kMaxDynamicShared;
  prop->warpSize = 32;
  prop->maxThreadsPerBlock = 1024;
  prop->multiProcessorCount = 132;
  return cudaSuccess;
}

cudaError_t lfm_emu_cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  std::lock_guard<std::recursive_mutex> lock(g_mu);
  *total_bytes = lfm_emu::memory_budget();
  *free_bytes = *total_bytes - std::min(*total_bytes, lfm_emu::g_used);
  return cudaSuccess;
}

cudaError_t lfm_emu_cudaMalloc(void** p, size_t bytes) {
  std::lock_guard<std::recursive_mutex> lock(g_mu);
  *p = nullptr;
  if (bytes == 0) return cudaSuccess;
  if (bytes > lfm_emu::memory_budget() - std::min(lfm_emu::memory_budget(), lfm_emu::g_used))
    return lfm_emu::fail_with(cudaErrorMemoryAllocation, "cudaMalloc of " + std::to_string(bytes) + " bytes");
  const size_t total = (bytes + lfm_emu::kGuardBytes + 255) / 256 * 256;
  auto* mem = static_cast<unsigned char*>(std::aligned_alloc(256, total));
  if (!mem) return lfm_emu::fail_with(cudaErrorMemoryAllocation, "cudaMalloc of " + std::to_string(bytes) + " bytes");
  std::memset(mem, 0xFF, bytes);  // as good as garbage: NaN floats, -1 integers
  std::memset(mem + bytes, lfm_emu::kGuardByte, total - bytes);
  lfm_emu::g_device[reinterpret_cast<uintptr_t>(mem)] = bytes;
  lfm_emu::trace::allocation(mem, bytes);
  lfm_emu::g_used += bytes;
  *p = mem;
  return cudaSuccess;
}

cudaError_t lfm_emu_cudaFree(void* p) {
  if (!p) return cudaSuccess;
  std::lock_guard<std::recursive_mutex> lock(g_mu);
  auto it = lfm_emu::g_device.find(reinterpret_cast<uintptr_t>(p));
  if (it == lfm_emu::g_device.end()) return lfm_emu::fail_with(cudaErrorInvalidValue, "cudaFree of a pointer cudaMalloc did not return");
  try {
    lfm_emu::check_guards("a kernel");
  } catch (const std::exception& e) {
    lfm_emu::g_fault = lfm_emu::fail_with(cudaErrorLaunchFailure, e.what());
  }
  lfm_emu::g_used -= it->second;
  lfm_emu::g_device.erase(it);
  lfm_emu::trace::release(p);
  std::free(p);
  return cudaSuccess;
}

cudaError_t lfm_emu_cudaHostAlloc(void** p, size_t bytes, unsigned) {
  *p = std::aligned_alloc(256, (bytes + 255) / 256 * 256 + 256);
  return *p ? cudaSuccess : lfm_emu::fail_with(cudaErrorMemoryAllocation, "cudaHostAlloc");
}

cudaError_t lfm_emu_cudaFreeHost(void* p) {
  std::free(p);
  return cudaSuccess;
}

cudaError_t lfm_emu_cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t s) {
  if (bytes == 0) return cudaSuccess;
  {
    std::lock_guard<std::recursive_mutex> lock(g_mu);
    const bool src_dev = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
    const bool dst_dev = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
    if ((src_dev && !lfm_emu::on_device(src, bytes)) || (dst_dev && !lfm_emu::on_device(dst, bytes)))
      return lfm_emu::fail_with(cudaErrorInvalidValue, "cudaMemcpyAsync of " + std::to_string(bytes) +
                                                           " bytes outside a device allocation");
    if ((kind == cudaMemcpyHostToDevice && lfm_emu::on_device(src, 1)) ||
        (kind == cudaMemcpyDeviceToHost && lfm_emu::on_device(dst, 1)))
      return lfm_emu::fail_with(cudaErrorInvalidValue, "cudaMemcpyAsync: a host side that is device memory");
  }
  lfm_emu::trace::copy(kind, bytes);  // counted where the host asks for it (a graph replays it unseen)
  return lfm_emu::stream_op(s, [=] { std::memmove(dst, src, bytes); });
}

cudaError_t lfm_emu_cudaMemsetAsync(void* dst, int value, size_t bytes, cudaStream_t s) {
  if (bytes == 0) return cudaSuccess;
  {
    std::lock_guard<std::recursive_mutex> lock(g_mu);
    if (!lfm_emu::on_device(dst, bytes))
      return lfm_emu::fail_with(cudaErrorInvalidValue, "cudaMemsetAsync of " + std::to_string(bytes) +
                                                           " bytes outside a device allocation");
  }
  lfm_emu::trace::memset_call();
  return lfm_emu::stream_op(s, [=] { std::memset(dst, value, bytes); });
}

cudaError_t lfm_emu_cudaStreamCreateWithFlags(cudaStream_t* s, unsigned) {
  *s = reinterpret_cast<cudaStream_t>(new lfm_emu::Stream());
  return cudaSuccess;
}

cudaError_t lfm_emu_cudaStreamDestroy(cudaStream_t s) {
  delete reinterpret_cast<lfm_emu::Stream*>(s);
  return cudaSuccess;
}

namespace lfm_emu {
struct Event {
  std::chrono::steady_clock::time_point at;
  bool recorded = false;
};
}  // namespace lfm_emu

cudaError_t lfm_emu_cudaEventCreate(cudaEvent_t* e) {
  *e = reinterpret_cast<cudaEvent_t>(new lfm_emu::Event);
  return cudaSuccess;
}

cudaError_t lfm_emu_cudaEventDestroy(cudaEvent_t e) {
  delete reinterpret_cast<lfm_emu::Event*>(e);
  return cudaSuccess;
}

cudaError_t lfm_emu_cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
  std::lock_guard<std::recursive_mutex> lock(g_mu);
  if (!e) return lfm_emu::fail_with(cudaErrorInvalidResourceHandle, "cudaEventRecord of a null event");
  if (lfm_emu::stream_of(s).capturing)
    return lfm_emu::fail_with(cudaErrorStreamCaptureUnsupported, "cudaEventRecord on a capturing stream");
  auto* ev = reinterpret_cast<lfm_emu::Event*>(e);
  ev->at = std::chrono::steady_clock::now();
  ev->recorded = true;
  return lfm_emu::g_fault;
}

cudaError_t lfm_emu_cudaEventSynchronize(cudaEvent_t e) {
  if (!e || !reinterpret_cast<lfm_emu::Event*>(e)->recorded)
    return lfm_emu::fail_with(cudaErrorInvalidResourceHandle, "cudaEventSynchronize of an event never recorded");
  return lfm_emu::g_fault;  // its work ran when it was submitted
}

cudaError_t lfm_emu_cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  const auto* a = reinterpret_cast<const lfm_emu::Event*>(start);
  const auto* b = reinterpret_cast<const lfm_emu::Event*>(end);
  if (!a || !b || !a->recorded || !b->recorded)
    return lfm_emu::fail_with(cudaErrorInvalidResourceHandle, "cudaEventElapsedTime of an event never recorded");
  *ms = std::chrono::duration<float, std::milli>(b->at - a->at).count();
  return cudaSuccess;
}

cudaError_t lfm_emu_cudaStreamSynchronize(cudaStream_t s) {
  std::lock_guard<std::recursive_mutex> lock(g_mu);
  lfm_emu::trace::sync_call();
  if (lfm_emu::stream_of(s).capturing)
    return lfm_emu::fail_with(cudaErrorStreamCaptureUnsupported, "cudaStreamSynchronize on a capturing stream");
  return lfm_emu::g_fault;
}

cudaError_t lfm_emu_cudaStreamBeginCapture(cudaStream_t s, cudaStreamCaptureMode) {
  std::lock_guard<std::recursive_mutex> lock(g_mu);
  lfm_emu::Stream& st = lfm_emu::stream_of(s);
  if (!s || st.capturing) return lfm_emu::fail_with(cudaErrorIllegalState, "cudaStreamBeginCapture");
  st.capturing = true;
  st.captured.clear();
  return cudaSuccess;
}

cudaError_t lfm_emu_cudaStreamEndCapture(cudaStream_t s, cudaGraph_t* graph) {
  std::lock_guard<std::recursive_mutex> lock(g_mu);
  lfm_emu::Stream& st = lfm_emu::stream_of(s);
  if (!st.capturing) return lfm_emu::fail_with(cudaErrorIllegalState, "cudaStreamEndCapture without a capture");
  st.capturing = false;
  auto* g = new lfm_emu::Graph();
  g->ops = std::move(st.captured);
  st.captured.clear();
  *graph = reinterpret_cast<cudaGraph_t>(g);
  return cudaSuccess;
}

cudaError_t lfm_emu_cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long) {
  *exec = reinterpret_cast<cudaGraphExec_t>(new lfm_emu::Graph(*reinterpret_cast<lfm_emu::Graph*>(graph)));
  return cudaSuccess;
}

cudaError_t lfm_emu_cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t s) {
  const auto* g = reinterpret_cast<const lfm_emu::Graph*>(exec);
  lfm_emu::trace::graph_launch_call();
  lfm_emu::trace::graph_replay(true);
  for (const auto& op : g->ops)
    if (const cudaError_t e = lfm_emu::stream_op(s, op); e != cudaSuccess) {
      lfm_emu::trace::graph_replay(false);
      return e;
    }
  lfm_emu::trace::graph_replay(false);
  return cudaSuccess;
}

cudaError_t lfm_emu_cudaGraphDestroy(cudaGraph_t graph) {
  delete reinterpret_cast<lfm_emu::Graph*>(graph);
  return cudaSuccess;
}

cudaError_t lfm_emu_cudaGraphExecDestroy(cudaGraphExec_t exec) {
  delete reinterpret_cast<lfm_emu::Graph*>(exec);
  return cudaSuccess;
}

cublasStatus_t lfm_emu_cublasCreate(cublasHandle_t* h) {
  *h = reinterpret_cast<cublasHandle_t>(new lfm_emu::BlasHandle());
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t lfm_emu_cublasDestroy(cublasHandle_t h) {
  delete reinterpret_cast<lfm_emu::BlasHandle*>(h);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t lfm_emu_cublasSetStream(cublasHandle_t h, cudaStream_t s) {
  reinterpret_cast<lfm_emu::BlasHandle*>(h)->stream = s;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t lfm_emu_cublasSetWorkspace(cublasHandle_t, void*, size_t) { return CUBLAS_STATUS_SUCCESS; }

cublasStatus_t lfm_emu_cublasSetMathMode(cublasHandle_t, cublasMath_t) { return CUBLAS_STATUS_SUCCESS; }

const char* lfm_emu_cublasGetStatusString(cublasStatus_t st) {
  return st == CUBLAS_STATUS_SUCCESS ? "CUBLAS_STATUS_SUCCESS" : "CUBLAS_STATUS_EXECUTION_FAILED (emulated)";
}

cublasStatus_t lfm_emu_cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                                    const void* alpha, const void* a, cudaDataType_t at, int lda, const void* b,
                                    cudaDataType_t bt, int ldb, const void* beta, void* c, cudaDataType_t ct, int ldc,
                                    cublasComputeType_t, cublasGemmAlgo_t) {
  const float al = *static_cast<const float*>(alpha), be = *static_cast<const float*>(beta);
  const cudaError_t e = lfm_emu::stream_op(reinterpret_cast<lfm_emu::BlasHandle*>(h)->stream, [=] {
    // A launch of its own in the trace, its accesses unannounced (cost_model.cpp estimates them).
    lfm_emu::trace::launch_begin("cublasGemmEx", dim3(static_cast<unsigned>(m), static_cast<unsigned>(n),
                                                      static_cast<unsigned>(k)), dim3(1, 1, 1));
    lfm_emu::trace::launch_end();
    lfm_emu::gemm(ta, tb, m, n, k, al, a, at, lda, b, bt, ldb, be, c, ct, ldc);
  });
  return e == cudaSuccess ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_EXECUTION_FAILED;
}

cublasStatus_t lfm_emu_cublasSgemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                                   const float* alpha, const float* a, int lda, const float* b, int ldb,
                                   const float* beta, float* c, int ldc) {
  return lfm_emu_cublasGemmEx(h, ta, tb, m, n, k, alpha, a, CUDA_R_32F, lda, b, CUDA_R_32F, ldb, beta, c, CUDA_R_32F,
                              ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
}
