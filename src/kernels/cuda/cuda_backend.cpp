// The CUDA backend's host side: device memory, weight upload, the step's descriptors, and the
// launches (kernels in the .cu files beside it). Every op goes to one stream, in order; the host
// waits only where it reads results back (download). With LFM_CUDA_GRAPHS=1 the ops are queued
// until that download and a run of them seen before (a steady decode step) is launched as one
// recorded CUDA graph (kernels/replay_queue.h).
// This file holds the class's construction, memory and weights, begin_step, and the functions of
// cuda_backend.h; the class is declared in cuda_backend_impl.h and the ops' launches are in
// cuda_backend_ops.cpp, cuda_backend_encoder.cpp and cuda_backend_moe.cpp.
#include "kernels/cuda/cuda_backend.h"

#include <algorithm>
#include <bit>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/cuda/cuda_backend_impl.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_weights.h"

namespace lfm::cuda {

namespace {

// Freed through the queue's gate: memory that queued ops may still use goes after they ran.
class CudaAllocation final : public DeviceAllocation {
 public:
  CudaAllocation(void* p, size_t bytes, std::shared_ptr<FreeGate> gate) : gate_(std::move(gate)) {
    data_ = p;
    size_ = bytes;
  }
  ~CudaAllocation() override {
    // An error here cannot be reported from a destructor.
    if (data_) gate_->release([p = data_] { cudaFree(p); });
  }

 private:
  std::shared_ptr<FreeGate> gate_;
};

class CudaPreparedWeights final : public PreparedWeights {
 public:
  DeviceBuffer arena;
};

// Whether the environment variable `name` is set to `value` (the backend's switches:
// LFM_CUDA_GEMM=own, see kGemmMinTokens; LFM_CUDA_ATTN=plain keeps prefill attention on the
// CUDA-core kernel; LFM_CUDA_PDL=1 launches the GEMV kernel with programmatic dependent launch;
// LFM_CUDA_FUSE=0 runs matmul_add_rms_norm, matmul_gated_short_conv, moe_combine_add_rms_norm and
// qk_norm_rope_kv_write as their separate ops).
bool env_is(const char* name, const char* value) {
  const char* env = std::getenv(name);
  return env && std::strcmp(env, value) == 0;
}

}  // namespace

CudaBackend::CudaBackend(int device, ThreadPool& pool)
    : device_(device),
      own_only_(env_is("LFM_CUDA_GEMM", "own")),
      attention_tc_(!own_only_ && !env_is("LFM_CUDA_ATTN", "plain")),
      fuse_(!env_is("LFM_CUDA_FUSE", "0")),
      blas_lib_(cuda::cublas_library()) {
  (void)pool;
  LFM_CUDA_CHECK(cudaSetDevice(device));
  cudaDeviceProp prop{};
  LFM_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  name_ = cat("cuda:", device, " (", prop.name, ", sm_", prop.major, prop.minor, ")");
  cuda::set_pdl_launches(env_is("LFM_CUDA_PDL", "1"));
  LFM_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  LFM_CUBLAS_CHECK(blas_lib_.create(&blas_));
  LFM_CUBLAS_CHECK(blas_lib_.set_stream(blas_, stream_));
  // The default math mode: tensor cores for bf16/f16, and float32 GEMMs stay float32 (cuBLAS
  // uses TF32 only when asked to), as the fixtures' bounds assume.
  LFM_CUBLAS_CHECK(blas_lib_.set_math_mode(blas_, CUBLAS_DEFAULT_MATH));
  graphs_ = std::make_unique<cuda::CudaGraphs>(stream_);
  ReplayQueue::Options qo;
  qo.enabled = cuda::cuda_graphs_requested() && !profile_.enabled();
  // A served batch keeps a layers' graph per bucket (and attention split count) and a head's per
  // batch size and kind (greedy ids, candidates): more than the default 64 at 64 streams, and a
  // graph dropped before its next use was recorded for nothing.
  qo.max_graphs = 256;
  queue_ = std::make_unique<ReplayQueue>(*graphs_, qo);
  if (qo.enabled) name_ += ", graphs";
  buckets_ = qo.enabled && !env_is("LFM_CUDA_BUCKETS", "0");
  gate_ = queue_->free_gate();
  // cuBLAS's workspace fixed here, so a captured GEMM never allocates.
  blas_workspace_ = allocate(kBlasWorkspaceBytes);
  LFM_CUBLAS_CHECK(blas_lib_.set_workspace(blas_, blas_workspace_.data(), blas_workspace_.size()));
  add_norm_done_ = allocate(sizeof(unsigned));  // zeroed
}

CudaBackend::~CudaBackend() {
  try {
    queue_->flush();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cuda: the last queued ops failed: %s\n", e.what());
  }
  cudaStreamSynchronize(stream_);
  if (profile_.enabled()) profile_.print(name_);
  if (queue_->enabled() && cuda::cuda_graph_stats_requested()) {
    const ReplayQueue::Stats& st = queue_->stats();
    std::fprintf(stderr, "cuda graphs (%s): %lld flushes: %lld replayed, %lld recorded, %lld op by op\n", name_.c_str(),
                 static_cast<long long>(st.flushes), static_cast<long long>(st.replayed),
                 static_cast<long long>(st.recorded), static_cast<long long>(st.eager));
  }
  queue_.reset();
  blas_workspace_ = DeviceBuffer();
  blas_lib_.destroy(blas_);
  cudaStreamDestroy(stream_);
}

DeviceBuffer CudaBackend::allocate(size_t bytes) {
  if (bytes == 0) return DeviceBuffer();
  void* p = nullptr;
  const cudaError_t err = cudaMalloc(&p, bytes);
  if (err != cudaSuccess) {
    cudaGetLastError();  // clear the sticky allocation error
    size_t free_b = 0, total_b = 0;
    cudaMemGetInfo(&free_b, &total_b);
    fail("cuda: could not allocate ", bytes, " bytes on ", name_, " (", free_b, " of ", total_b,
         " bytes free): ", cudaGetErrorString(err));
  }
  DeviceBuffer buf(std::make_unique<CudaAllocation>(p, bytes, gate_));
  LFM_CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, stream_));
  return buf;
}

void CudaBackend::upload(void* dst, const void* src, size_t bytes) {
  auto timer = time_op("upload");
  if (!bytes) return;
  if (queue_->idle()) {  // nothing to keep order with: straight from the caller's memory
    LFM_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_));
    return;
  }
  enqueue("upload", [this](void* d, const void* staged, size_t n) {
    LFM_CUDA_CHECK(cudaMemcpyAsync(d, staged, n, cudaMemcpyHostToDevice, stream_));
  }, dst, queue_->stage(src, bytes), bytes);
}

void CudaBackend::download(void* dst, const void* src, size_t bytes) {
  auto timer = time_op("download");
  queue_->flush();
  if (!bytes) return;
  LFM_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_));
  LFM_CUDA_CHECK(cudaStreamSynchronize(stream_));
  // Every op the flush launched (a graph replay is ordered in stream_ like its nodes; the staged
  // uploads are copies on stream_) has run: the next step's stage() need not wait again.
  queue_->waited();
}

void CudaBackend::launch_queued() { queue_->flush(/*mid_step=*/true); }

void CudaBackend::copy(void* dst, const void* src, size_t bytes) {
  auto timer = time_op("copy");
  if (!bytes || dst == src) return;
  enqueue("copy", [this](void* d, const void* s, size_t n) {
    LFM_CUDA_CHECK(cudaMemcpyAsync(d, s, n, cudaMemcpyDeviceToDevice, stream_));
  }, dst, src, bytes);
}

void CudaBackend::fill_zero(void* dst, size_t bytes) {
  auto timer = time_op("fill_zero");
  if (!bytes) return;
  enqueue("fill_zero", [this](void* d, size_t n) { LFM_CUDA_CHECK(cudaMemsetAsync(d, 0, n, stream_)); }, dst, bytes);
}

std::unique_ptr<PreparedWeights> CudaBackend::prepare_weights(WeightSet& set) {
  for (const TensorView* t : set.matrices)
    LFM_CHECK(cuda_supports_weight_type(t->dtype), "cuda: no kernels for ", dtype_name(t->dtype),
              " matrices (", shape_str(t->shape),
              "); the CUDA backend reads F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K and Q6_K (convert the model with "
              "`lfm convert --type q8_0` or another of them, or run it with --device cpu)");
  for (const TensorView* t : set.tables)
    LFM_CHECK(cuda_supports_weight_type(t->dtype), "cuda: no kernels for a ", dtype_name(t->dtype),
              " embedding table");
  const cuda::WeightArena plan = cuda::plan_weight_arena(set);
  auto out = std::make_unique<CudaPreparedWeights>();
  out->arena = allocate(plan.bytes);
  cuda::fill_weight_arena(set, plan, static_cast<uint8_t*>(out->arena.data()),
                    [this](void* dst, const void* src, size_t n) { upload(dst, src, n); },
                    [this] { LFM_CUDA_CHECK(cudaStreamSynchronize(stream_)); });
  LFM_CUDA_CHECK(cudaStreamSynchronize(stream_));
  out->bytes = plan.bytes;
  return out;
}

void CudaBackend::begin_step(std::span<const SeqRun> runs) {
  auto timer = time_op("begin_step");
  std::vector<cuda::DevRun> dev_runs;
  std::vector<int32_t> blocks;
  std::vector<cuda::DevCheckpoint> ckpts;
  std::vector<cuda::DevTile> tiles, wide;
  int64_t rows = 0, max_run_rows = 0;
  for (const SeqRun& r : runs) rows = std::max(rows, r.row0 + r.n_rows), max_run_rows = std::max(max_run_rows, r.n_rows);
  std::vector<int32_t> row_run(static_cast<size_t>(rows), -1);
  for (size_t i = 0; i < runs.size(); ++i) {
    const SeqRun& r = runs[i];
    LFM_CHECK(r.n_rows > 0 && r.pos0 >= 0 && r.row0 >= 0, "cuda: run with ", r.n_rows, " rows at position ", r.pos0);
    dev_runs.push_back({r.row0, r.n_rows, r.pos0, static_cast<int32_t>(blocks.size()),
                        static_cast<int32_t>(r.blocks.size()), r.conv_slot, static_cast<int32_t>(ckpts.size()),
                        static_cast<int32_t>(r.checkpoints.size())});
    blocks.insert(blocks.end(), r.blocks.begin(), r.blocks.end());
    for (const ConvCheckpoint& c : r.checkpoints) ckpts.push_back({c.pos, c.snapshot});
    for (int64_t t = 0; t < r.n_rows; ++t) row_run[r.row0 + t] = static_cast<int32_t>(i);
    for (int64_t t = 0; t < r.n_rows; t += cuda::kAttnTileRows)
      tiles.push_back({r.row0 + t, static_cast<int32_t>(std::min<int64_t>(cuda::kAttnTileRows, r.n_rows - t)),
                       static_cast<int32_t>(i)});
    // The tensor-core attention's tiles, for the steps that can take it (64+ rows: not decode).
    for (int64_t t = 0; rows >= kGemmMinTokens && t < r.n_rows; t += cuda::kAttnWideTileRows)
      wide.push_back({r.row0 + t, static_cast<int32_t>(std::min<int64_t>(cuda::kAttnWideTileRows, r.n_rows - t)),
                      static_cast<int32_t>(i)});
  }
  // One upload: runs | checkpoints | blocks | row → run | tiles | wide tiles, each region's room rounded up
  // to a power of two, so that the regions (and the pointers the kernels get) stay where they
  // are while a batch decodes, whose block tables grow.
  auto align = [](size_t n) { return std::max<size_t>(256, std::bit_ceil(n)); };
  const size_t runs_b = align(dev_runs.size() * sizeof(cuda::DevRun)), ckpt_b = align(ckpts.size() * sizeof(cuda::DevCheckpoint));
  const size_t blocks_b = align(blocks.size() * sizeof(int32_t)), rows_b = align(row_run.size() * sizeof(int32_t));
  const size_t tiles_b = align(tiles.size() * sizeof(cuda::DevTile)), wide_b = align(wide.size() * sizeof(cuda::DevTile));
  staging_.assign(runs_b + ckpt_b + blocks_b + rows_b + tiles_b + wide_b, 0);
  uint8_t* h = staging_.data();
  std::memcpy(h, dev_runs.data(), dev_runs.size() * sizeof(cuda::DevRun));
  std::memcpy(h + runs_b, ckpts.data(), ckpts.size() * sizeof(cuda::DevCheckpoint));
  std::memcpy(h + runs_b + ckpt_b, blocks.data(), blocks.size() * sizeof(int32_t));
  std::memcpy(h + runs_b + ckpt_b + blocks_b, row_run.data(), row_run.size() * sizeof(int32_t));
  std::memcpy(h + runs_b + ckpt_b + blocks_b + rows_b, tiles.data(), tiles.size() * sizeof(cuda::DevTile));
  std::memcpy(h + runs_b + ckpt_b + blocks_b + rows_b + tiles_b, wide.data(), wide.size() * sizeof(cuda::DevTile));
  ensure_capacity(*this, step_buf_, staging_.size());
  upload(step_buf_.data(), staging_.data(), staging_.size());
  auto* d = step_buf_.as<uint8_t>();
  step_.runs = reinterpret_cast<const cuda::DevRun*>(d);
  step_.ckpts = reinterpret_cast<const cuda::DevCheckpoint*>(d + runs_b);
  step_.blocks = reinterpret_cast<const int32_t*>(d + runs_b + ckpt_b);
  step_.row_run = reinterpret_cast<const int32_t*>(d + runs_b + ckpt_b + blocks_b);
  step_.tiles = reinterpret_cast<const cuda::DevTile*>(d + runs_b + ckpt_b + blocks_b + rows_b);
  step_.wide_tiles = reinterpret_cast<const cuda::DevTile*>(d + runs_b + ckpt_b + blocks_b + rows_b + tiles_b);
  step_.n_runs = static_cast<int32_t>(dev_runs.size());
  step_.n_tiles = static_cast<int32_t>(tiles.size());
  step_.n_wide_tiles = static_cast<int32_t>(wide.size());
  step_.n_rows = rows;
  step_.max_run_rows = max_run_rows;
  step_runs_ = runs.data();
  step_n_runs_ = runs.size();
  int64_t max_keys = 0;
  for (const SeqRun& r : runs) max_keys = std::max(max_keys, r.pos0 + r.n_rows);
  // Attention's splits of the longest row, rounded up to a power of two: a row's arithmetic
  // does not depend on it (splits past a row's keys do nothing), and a decode step's launch
  // then stays the same for many steps.
  step_splits_ = static_cast<int64_t>(std::bit_ceil(static_cast<uint64_t>((max_keys + cuda::kAttnSplitKeys - 1) / cuda::kAttnSplitKeys)));
}

}  // namespace lfm::cuda

namespace lfm {

bool cuda_supports_weight_type(DType t) {
  switch (t) {
    case DType::F32:
    case DType::F16:
    case DType::BF16:
    case DType::Q8_0:
    case DType::Q4_0:
    case DType::Q4_K:
    case DType::Q5_K:
    case DType::Q6_K: return true;
    default: return false;
  }
}

bool cuda_device_present(std::string* why) {
  int n = 0;
  const cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess) {
    cudaGetLastError();
    if (why) *why = cat("no usable CUDA device (", cudaGetErrorString(err), ")");
    return false;
  }
  if (n == 0) {
    if (why) *why = "no CUDA device was found";
    return false;
  }
  return true;
}

std::unique_ptr<Backend> make_cuda_backend(int device, ThreadPool& pool) {
  std::string why;
  LFM_CHECK(cuda_device_present(&why), "cuda: ", why);
  return std::make_unique<cuda::CudaBackend>(device, pool);
}

}  // namespace lfm
