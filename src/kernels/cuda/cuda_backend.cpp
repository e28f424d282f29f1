// The CUDA backend's host side: device memory, weight upload, the step's descriptors, and the
// launches (kernels in the .cu files beside it). Every op goes to one stream, in order; the host
// waits only where it reads results back (download). With LFM_CUDA_GRAPHS=1 the ops are queued
// until that download and a run of them seen before (a steady decode step) is launched as one
// recorded CUDA graph (kernels/replay_queue.h).
#include "kernels/cuda/cuda_backend.h"

#include <algorithm>
#include <bit>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_graphs.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/cuda_profile.h"
#include "kernels/cuda/cuda_weights.h"

namespace lfm {

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

// Long prompts take cuBLAS's tensor-core GEMM; shorter batches (decode) the warp-per-row kernels,
// whose results do not depend on the batch. LFM_CUDA_GEMM=own keeps every matmul on those.
constexpr int64_t kGemmMinTokens = 64;

bool own_kernels_only() {
  const char* env = std::getenv("LFM_CUDA_GEMM");
  return env && std::strcmp(env, "own") == 0;
}

class CudaBackend final : public Backend {
 public:
  CudaBackend(int device, ThreadPool& pool)
      : device_(device), own_only_(own_kernels_only()), blas_lib_(cuda::cublas_library()) {
    (void)pool;
    LFM_CUDA_CHECK(cudaSetDevice(device));
    cudaDeviceProp prop{};
    LFM_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
    name_ = cat("cuda:", device, " (", prop.name, ", sm_", prop.major, prop.minor, ")");
    LFM_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    LFM_CUBLAS_CHECK(blas_lib_.create(&blas_));
    LFM_CUBLAS_CHECK(blas_lib_.set_stream(blas_, stream_));
    // The default math mode: tensor cores for bf16/f16, and float32 GEMMs stay float32 (cuBLAS
    // uses TF32 only when asked to), as the fixtures' bounds assume.
    LFM_CUBLAS_CHECK(blas_lib_.set_math_mode(blas_, CUBLAS_DEFAULT_MATH));
    graphs_ = std::make_unique<cuda::CudaGraphs>(stream_);
    ReplayQueue::Options qo;
    qo.enabled = cuda::cuda_graphs_requested() && !profile_.enabled();
    queue_ = std::make_unique<ReplayQueue>(*graphs_, qo);
    if (qo.enabled) name_ += ", graphs";
    gate_ = queue_->free_gate();
    // cuBLAS's workspace fixed here, so a captured GEMM never allocates.
    blas_workspace_ = allocate(kBlasWorkspaceBytes);
    LFM_CUBLAS_CHECK(blas_lib_.set_workspace(blas_, blas_workspace_.data(), blas_workspace_.size()));
  }
  ~CudaBackend() override {
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

  const char* name() const override { return name_.c_str(); }
  bool host_memory() const override { return false; }
  bool reads_only_prepared_copies() const override { return true; }  // every weight uploaded
  bool bitwise_batch_invariant() const override { return own_only_; }

  // ---- memory ----
  DeviceBuffer allocate(size_t bytes) override {
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
  void upload(void* dst, const void* src, size_t bytes) override {
    auto timer = time_op("upload");
    if (!bytes) return;
    if (queue_->empty()) {  // nothing queued to keep order with: straight from the caller's memory
      LFM_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_));
      return;
    }
    enqueue("upload", [this](void* d, const void* staged, size_t n) {
      LFM_CUDA_CHECK(cudaMemcpyAsync(d, staged, n, cudaMemcpyHostToDevice, stream_));
    }, dst, queue_->stage(src, bytes), bytes);
  }
  void download(void* dst, const void* src, size_t bytes) override {
    auto timer = time_op("download");
    queue_->flush();
    if (!bytes) return;
    LFM_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_));
    LFM_CUDA_CHECK(cudaStreamSynchronize(stream_));
    // Every op the flush launched (a graph replay is ordered in stream_ like its nodes; the staged
    // uploads are copies on stream_) has run: the next step's stage() need not wait again.
    queue_->waited();
  }
  void copy(void* dst, const void* src, size_t bytes) override {
    auto timer = time_op("copy");
    if (!bytes || dst == src) return;
    enqueue("copy", [this](void* d, const void* s, size_t n) {
      LFM_CUDA_CHECK(cudaMemcpyAsync(d, s, n, cudaMemcpyDeviceToDevice, stream_));
    }, dst, src, bytes);
  }
  void fill_zero(void* dst, size_t bytes) override {
    auto timer = time_op("fill_zero");
    if (!bytes) return;
    enqueue("fill_zero", [this](void* d, size_t n) { LFM_CUDA_CHECK(cudaMemsetAsync(d, 0, n, stream_)); }, dst, bytes);
  }

  // ---- weights: every tensor uploaded once, into one arena ----
  std::unique_ptr<PreparedWeights> prepare_weights(WeightSet& set) override {
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

  // ---- the step's descriptors ----
  void begin_step(std::span<const SeqRun> runs) override {
    auto timer = time_op("begin_step");
    std::vector<cuda::DevRun> dev_runs;
    std::vector<int32_t> blocks;
    std::vector<cuda::DevCheckpoint> ckpts;
    std::vector<cuda::DevTile> tiles;
    int64_t rows = 0;
    for (const SeqRun& r : runs) rows = std::max(rows, r.row0 + r.n_rows);
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
    }
    // One upload: runs | checkpoints | blocks | row → run | tiles, each region's room rounded up
    // to a power of two, so that the regions (and the pointers the kernels get) stay where they
    // are while a batch decodes, whose block tables grow.
    auto align = [](size_t n) { return std::max<size_t>(256, std::bit_ceil(n)); };
    const size_t runs_b = align(dev_runs.size() * sizeof(cuda::DevRun)), ckpt_b = align(ckpts.size() * sizeof(cuda::DevCheckpoint));
    const size_t blocks_b = align(blocks.size() * sizeof(int32_t)), rows_b = align(row_run.size() * sizeof(int32_t));
    const size_t tiles_b = align(tiles.size() * sizeof(cuda::DevTile));
    staging_.assign(runs_b + ckpt_b + blocks_b + rows_b + tiles_b, 0);
    uint8_t* h = staging_.data();
    std::memcpy(h, dev_runs.data(), dev_runs.size() * sizeof(cuda::DevRun));
    std::memcpy(h + runs_b, ckpts.data(), ckpts.size() * sizeof(cuda::DevCheckpoint));
    std::memcpy(h + runs_b + ckpt_b, blocks.data(), blocks.size() * sizeof(int32_t));
    std::memcpy(h + runs_b + ckpt_b + blocks_b, row_run.data(), row_run.size() * sizeof(int32_t));
    std::memcpy(h + runs_b + ckpt_b + blocks_b + rows_b, tiles.data(), tiles.size() * sizeof(cuda::DevTile));
    ensure_capacity(*this, step_buf_, staging_.size());
    upload(step_buf_.data(), staging_.data(), staging_.size());
    auto* d = step_buf_.as<uint8_t>();
    step_.runs = reinterpret_cast<const cuda::DevRun*>(d);
    step_.ckpts = reinterpret_cast<const cuda::DevCheckpoint*>(d + runs_b);
    step_.blocks = reinterpret_cast<const int32_t*>(d + runs_b + ckpt_b);
    step_.row_run = reinterpret_cast<const int32_t*>(d + runs_b + ckpt_b + blocks_b);
    step_.tiles = reinterpret_cast<const cuda::DevTile*>(d + runs_b + ckpt_b + blocks_b + rows_b);
    step_.n_runs = static_cast<int32_t>(dev_runs.size());
    step_.n_tiles = static_cast<int32_t>(tiles.size());
    step_.n_rows = rows;
    step_runs_ = runs.data();
    step_n_runs_ = runs.size();
    int64_t max_keys = 0;
    for (const SeqRun& r : runs) max_keys = std::max(max_keys, r.pos0 + r.n_rows);
    // Attention's splits of the longest row, rounded up to a power of two: a row's arithmetic
    // does not depend on it (splits past a row's keys do nothing), and a decode step's launch
    // then stays the same for many steps.
    step_splits_ = static_cast<int64_t>(std::bit_ceil(static_cast<uint64_t>((max_keys + cuda::kAttnSplitKeys - 1) / cuda::kAttnSplitKeys)));
  }

  // ---- ops ----
  void matmul(const float* x, int64_t n, const TensorView& w, float* y) override {
    LFM_CHECK(w.shape.size() == 2, "cuda: matmul weight must be 2-D, got ", shape_str(w.shape));
    const void* dw = device_weight(w);
    const int64_t rows = w.shape[0], cols = w.shape[1];
    const bool gemm_path = n >= kGemmMinTokens && !own_only_;
    auto timer = time_op(profile_.enabled() ? cat(gemm_path ? "gemm " : "matmul ", dtype_name(w.dtype)) : std::string());
    if (gemm_path) return gemm(x, n, w.dtype, dw, rows, cols, y);
    enqueue("matmul", [this](DType t, const void* dw, int64_t rows, int64_t cols, const float* x, int64_t n, float* y) {
      cuda::matmul(t, dw, rows, cols, x, n, y, stream_);
    }, w.dtype, dw, rows, cols, x, n, y);
  }
  // Matrices of one type and width on the same input (q/k/v, w1/w3) in one launch when the batch
  // takes the warp-per-row kernels; each output the bits matmul gives.
  void matmul_shared(const float* x, int64_t n, std::span<const TensorView* const> ws,
                     std::span<float* const> ys) override {
    bool one_launch = !ws.empty() && ws.size() <= static_cast<size_t>(cuda::kMaxSharedMatmuls) &&
                      (n < kGemmMinTokens || own_only_);
    for (const TensorView* w : ws)
      one_launch = one_launch && w->shape.size() == 2 && w->dtype == ws[0]->dtype && w->shape[1] == ws[0]->shape[1];
    if (!one_launch) return Backend::matmul_shared(x, n, ws, ys);
    auto timer = time_op(profile_.enabled() ? cat("matmul_shared ", dtype_name(ws[0]->dtype)) : std::string());
    const int64_t cols = ws[0]->shape[1];
    cuda::SharedMatmul m;
    bool vec = true;
    for (size_t i = 0; i < ws.size(); ++i) {
      m.w[m.count] = device_weight(*ws[i]);
      m.y[m.count] = ys[i];
      m.rows[m.count] = ws[i]->shape[0];
      vec = vec && cuda::matmul_vector_ok(ws[i]->dtype, m.w[m.count], cols, x);
      ++m.count;
    }
    enqueue("matmul_shared", [this](DType t, const cuda::SharedMatmul& m, int64_t cols, const float* x, int64_t n,
                                    bool vec) { cuda::matmul_shared(t, m, cols, x, n, vec, stream_); },
            ws[0]->dtype, m, cols, x, n, vec);
  }
  void matmul_swiglu(const float* x, int64_t n, const TensorView& w1, const TensorView& w3, float* gate,
                     float* up) override {
    const bool fused = (n < kGemmMinTokens || own_only_) && w1.dtype == w3.dtype && w1.shape == w3.shape &&
                       w1.shape.size() == 2 && cuda::matmul_vector_ok(w1.dtype, device_weight(w1), w1.shape[1], x) &&
                       cuda::matmul_vector_ok(w3.dtype, device_weight(w3), w3.shape[1], x);
    if (!fused) return Backend::matmul_swiglu(x, n, w1, w3, gate, up);
    auto timer = time_op(profile_.enabled() ? cat("matmul_swiglu ", dtype_name(w1.dtype)) : std::string());
    enqueue("matmul_swiglu", [this](DType t, const void* w1, const void* w3, int64_t rows, int64_t cols, const float* x,
                                    int64_t n, float* out) { cuda::matmul_swiglu(t, w1, w3, rows, cols, x, n, out, stream_); },
            w1.dtype, device_weight(w1), device_weight(w3), w1.shape[0], w1.shape[1], x, n, gate);
  }
  void embedding(const TensorView& table, const int32_t* ids, int64_t n, float* out) override {
    auto timer = time_op("embedding");
    enqueue("embedding", [this](DType t, const void* table, int64_t cols, const int32_t* ids, int64_t n, float* out) {
      cuda::embedding(t, table, cols, ids, n, out, stream_);
    }, table.dtype, device_weight(table), table.cols(), ids, n, out);
  }
  void rms_norm(const float* x, const float* w, int64_t rows, int64_t dim, float eps, float* out) override {
    auto timer = time_op("rms_norm");
    enqueue("rms_norm", [this](const float* x, const float* w, int64_t rows, int64_t dim, float eps, float* out) {
      cuda::rms_norm(x, w, rows, dim, eps, out, stream_);
    }, x, w, rows, dim, eps, out);
  }
  void add_rms_norm(float* h, const float* x, const float* w, int64_t rows, int64_t dim, float eps,
                    float* out) override {
    auto timer = time_op("add_rms_norm");
    LFM_CHECK(out != h, "cuda: add_rms_norm cannot write its norm over the sum");
    enqueue("add_rms_norm", [this](float* h, const float* x, const float* w, int64_t rows, int64_t dim, float eps,
                                   float* out) { cuda::add_rms_norm(h, x, w, rows, dim, eps, out, stream_); },
            h, x, w, rows, dim, eps, out);
  }
  void rope_neox(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim, const int64_t* positions,
                 const float* inv_freq) override {
    auto timer = time_op("rope");
    enqueue("rope", [this](float* x, int64_t n, int64_t h, int64_t hd, const int64_t* pos, const float* f) {
      cuda::rope_neox(x, n, h, hd, pos, f, stream_);
    }, x, n_tokens, n_heads, head_dim, positions, inv_freq);
  }
  void qk_norm_rope(float* q, float* k, const float* qw, const float* kw, int64_t n_tokens, int64_t n_heads,
                    int64_t kv_heads, int64_t head_dim, float eps, const int64_t* positions,
                    const float* inv_freq) override {
    auto timer = time_op("qk_norm_rope");
    enqueue("qk_norm_rope", [this](float* q, float* k, const float* qw, const float* kw, int64_t n, int64_t h, int64_t g,
                                   int64_t hd, float eps, const int64_t* pos, const float* f) {
      cuda::qk_norm_rope(q, k, qw, kw, n, h, g, hd, eps, pos, f, stream_);
    }, q, k, qw, kw, n_tokens, n_heads, kv_heads, head_dim, eps, positions, inv_freq);
  }
  void kv_write(const KvPool& pool, std::span<const SeqRun> runs, const float* k, const float* v) override {
    auto timer = time_op("kv_write");
    check_step(runs);
    enqueue("kv_write", [this](const cuda::DevKv& kv, const cuda::DevStep& step, const float* k, const float* v) {
      cuda::kv_write(kv, step, k, v, stream_);
    }, dev_kv(pool), step_, k, v);
  }
  void attention(const float* q, const KvPool& pool, std::span<const SeqRun> runs, int64_t n_heads, float scale,
                 float* out, int64_t window) override {
    auto timer = time_op("attention");
    check_step(runs);
    LFM_CHECK(pool.kv_heads > 0 && n_heads % pool.kv_heads == 0, "cuda: ", n_heads, " query heads cannot share ",
              pool.kv_heads, " kv heads");
    LFM_CHECK(window >= 0, "cuda: attention window ", window, " is negative");
    float* partial = nullptr;
    if (step_splits_ > 1) {  // rows of several splits leave (max, sum, acc) per split
      ensure_capacity(*this, partial_buf_, sizeof(float) * static_cast<size_t>(step_.n_rows * n_heads * step_splits_ * (pool.head_dim + 2)));
      partial = partial_buf_.as<float>();
    }
    enqueue("attention", [this](const float* q, const cuda::DevKv& kv, const cuda::DevStep& step, int64_t h, float scale,
                                float* out, int64_t max_keys, float* partial, int64_t window) {
      cuda::attention(q, kv, step, h, scale, out, max_keys, partial, window, stream_);
    }, q, dev_kv(pool), step_, n_heads, scale, out, step_splits_ * cuda::kAttnSplitKeys, partial, window);
  }
  void short_conv(const float* u, const ConvPool& pool, std::span<const SeqRun> runs, int64_t kernel, const float* w,
                  const float* bias, float* out) override {
    auto timer = time_op("short_conv");
    check_step(runs);
    LFM_CHECK(pool.rows == kernel - 1, "cuda: conv kernel ", kernel, " does not match state rows ", pool.rows);
    enqueue("short_conv", [this](const float* u, const cuda::DevConv& conv, const cuda::DevStep& step, int64_t kernel,
                                 const float* w, const float* bias, float* out) {
      cuda::short_conv(u, conv, step, kernel, w, bias, out, stream_);
    }, u, cuda::DevConv{pool.state, pool.snapshots, pool.type, pool.rows, pool.dim}, step_, kernel, w, bias, out);
  }
  void gated_short_conv(const float* proj, const ConvPool& pool, std::span<const SeqRun> runs, int64_t kernel,
                        const float* w, const float* bias, float* u, float* out) override {
    auto timer = time_op("gated_short_conv");
    check_step(runs);
    LFM_CHECK(pool.rows == kernel - 1, "cuda: conv kernel ", kernel, " does not match state rows ", pool.rows);
    (void)u;  // the products are computed inside the conv
    enqueue("gated_short_conv", [this](const float* proj, const cuda::DevConv& conv, const cuda::DevStep& step,
                                       int64_t kernel, const float* w, const float* bias, float* out) {
      cuda::short_conv_gated(nullptr, proj, conv, step, kernel, w, bias, out, stream_);
    }, proj, cuda::DevConv{pool.state, pool.snapshots, pool.type, pool.rows, pool.dim}, step_, kernel, w, bias, out);
  }
  void swiglu(const float* gate, const float* up, int64_t n, float* out) override {
    auto timer = time_op("swiglu");
    enqueue("swiglu", [this](const float* g, const float* u, int64_t n, float* o) { cuda::swiglu(g, u, n, o, stream_); },
            gate, up, n, out);
  }
  void mul(const float* a, const float* b, int64_t n, float* out) override { mul_rows(a, n, b, n, 1, n, out, n); }
  void add(float* y, const float* x, int64_t n) override {
    auto timer = time_op("add");
    enqueue("add", [this](float* y, const float* x, int64_t n) { cuda::add(y, x, n, stream_); }, y, x, n);
  }
  void softmax(float* x, int64_t n) override {
    enqueue("softmax", [this](float* x, int64_t n) { cuda::softmax(x, n, stream_); }, x, n);
  }
  void mul_rows(const float* a, int64_t lda, const float* b, int64_t ldb, int64_t rows, int64_t cols, float* out,
                int64_t ldo) override {
    auto timer = time_op("mul_rows");
    enqueue("mul_rows", [this](const float* a, int64_t lda, const float* b, int64_t ldb, int64_t rows, int64_t cols,
                               float* out, int64_t ldo) { cuda::mul_rows(a, lda, b, ldb, rows, cols, out, ldo, stream_); },
            a, lda, b, ldb, rows, cols, out, ldo);
  }
  void add_bias(float* y, const float* bias, int64_t rows, int64_t cols) override {
    auto timer = time_op("add_bias");
    enqueue("add_bias", [this](float* y, const float* b, int64_t rows, int64_t cols) { cuda::add_bias(y, b, rows, cols, stream_); },
            y, bias, rows, cols);
  }
  void gather_rows(const float* x, int64_t cols, const int32_t* index, int64_t n, float* out) override {
    auto timer = time_op("gather_rows");
    enqueue("gather_rows", [this](const float* x, int64_t cols, const int32_t* index, int64_t n, float* out) {
      cuda::gather_rows(x, cols, index, n, out, stream_);
    }, x, cols, index, n, out);
  }
  void layer_norm(const float* x, const float* w, const float* b, int64_t rows, int64_t dim, float eps,
                  float* out) override {
    auto timer = time_op("layer_norm");
    enqueue("layer_norm", [this](const float* x, const float* w, const float* b, int64_t rows, int64_t dim, float eps,
                                 float* out) { cuda::layer_norm(x, w, b, rows, dim, eps, out, stream_); },
            x, w, b, rows, dim, eps, out);
  }
  void gelu(const float* x, int64_t n, bool tanh_approximation, float* out) override {
    auto timer = time_op("gelu");
    enqueue("gelu", [this](const float* x, int64_t n, bool t, float* out) { cuda::gelu(x, n, t, out, stream_); }, x, n,
            tanh_approximation, out);
  }
  void segment_attention(const float* q, const float* k, const float* v, const SegmentAttention& a,
                         float* out) override {
    auto timer = time_op("segment_attention");
    check_segment_attention(a, "cuda");
    LFM_CHECK(a.head_dim <= 256, "cuda: segment_attention supports head_dim up to 256, not ", a.head_dim);
    // Each row's key range, uploaded with the call (a few KiB for a batch of tiles or texts).
    const int64_t rows = a.seg.back();
    std::vector<int64_t>& bounds = segment_host_;  // kept: an upload with nothing queued reads it in place
    bounds.assign(static_cast<size_t>(2 * rows), 0);
    for (size_t s = 0; s + 1 < a.seg.size(); ++s) {
      const int64_t key_end = a.key_end.empty() ? a.seg[s + 1] : a.key_end[s];
      for (int64_t r = a.seg[s]; r < a.seg[s + 1]; ++r) {
        bounds[static_cast<size_t>(r)] = a.seg[s];
        bounds[static_cast<size_t>(rows + r)] = a.causal ? std::min(key_end, r + 1) : key_end;
      }
    }
    ensure_capacity(*this, segment_buf_, bounds.size() * sizeof(int64_t));
    auto* dev = static_cast<int64_t*>(segment_buf_.data());
    upload(dev, bounds.data(), bounds.size() * sizeof(int64_t));
    enqueue("segment_attention", [this](const float* q, const float* k, const float* v, const int64_t* begin,
                                        const int64_t* end, int64_t rows, int64_t h, int64_t g, int64_t hd, float scale,
                                        float* out) {
      cuda::segment_attention(q, k, v, begin, end, rows, h, g, hd, scale, out, stream_);
    }, q, k, v, static_cast<const int64_t*>(dev), static_cast<const int64_t*>(dev + rows), rows, a.n_heads,
        a.n_kv_heads, a.head_dim, a.scale, out);
  }
  void segment_conv(const float* u, std::span<const int64_t> seg, int64_t dim, int64_t kernel, int64_t left,
                    const float* w, const float* bias, float* out) override {
    auto timer = time_op("segment_conv");
    LFM_CHECK(seg.size() >= 2 && seg.front() == 0, "cuda: segment_conv needs segment bounds from 0");
    LFM_CHECK(kernel > 0 && left >= 0 && left < kernel, "cuda: segment_conv with kernel ", kernel, " and ", left,
              " taps to the left");
    const int64_t rows = seg.back();
    std::vector<int64_t>& bounds = conv_segment_host_;  // as segment_attention's
    bounds.assign(static_cast<size_t>(2 * rows), 0);
    for (size_t s = 0; s + 1 < seg.size(); ++s) {
      LFM_CHECK(seg[s + 1] > seg[s], "cuda: segment_conv segment ", s, " is empty or reversed");
      for (int64_t r = seg[s]; r < seg[s + 1]; ++r) {
        bounds[static_cast<size_t>(r)] = seg[s];
        bounds[static_cast<size_t>(rows + r)] = seg[s + 1];
      }
    }
    ensure_capacity(*this, conv_segment_buf_, bounds.size() * sizeof(int64_t));
    auto* dev = static_cast<int64_t*>(conv_segment_buf_.data());
    upload(dev, bounds.data(), bounds.size() * sizeof(int64_t));
    enqueue("segment_conv", [this](const float* u, const int64_t* begin, const int64_t* end, int64_t rows, int64_t dim,
                                   int64_t kernel, int64_t left, const float* w, const float* bias, float* out) {
      cuda::segment_conv(u, begin, end, rows, dim, kernel, left, w, bias, out, stream_);
    }, u, static_cast<const int64_t*>(dev), static_cast<const int64_t*>(dev + rows), rows, dim, kernel, left, w, bias,
        out);
  }
  void activation(const float* x, int64_t n, Activation f, float* out) override {
    auto timer = time_op("activation");
    enqueue("activation", [this](const float* x, int64_t n, int kind, float* out) {
      cuda::activation(x, n, kind, out, stream_);
    }, x, n, f == Activation::kRelu ? 0 : 1, out);
  }
  void glu(const float* x, int64_t rows, int64_t cols, float* out) override {
    auto timer = time_op("glu");
    enqueue("glu", [this](const float* x, int64_t rows, int64_t cols, float* out) {
      cuda::glu(x, rows, cols, out, stream_);
    }, x, rows, cols, out);
  }
  void conv2d(const float* x, const Conv2d& c, const float* w, const float* bias, float* out) override {
    auto timer = time_op("conv2d");
    const int64_t rows = check_conv2d(c, "cuda");
    // Each output row's image, uploaded with the call (24 bytes a row).
    std::vector<int64_t>& image = conv2d_host_;
    image.clear();
    for (size_t s = 0; s + 1 < c.seg.size(); ++s) {
      const int64_t h = c.seg[s + 1] - c.seg[s];
      for (int64_t o = 0; o < c.out_rows(h); ++o) image.insert(image.end(), {c.seg[s], h, o});
    }
    ensure_capacity(*this, conv2d_buf_, image.size() * sizeof(int64_t));
    auto* dev = static_cast<int64_t*>(conv2d_buf_.data());
    upload(dev, image.data(), image.size() * sizeof(int64_t));
    enqueue("conv2d", [this](const float* x, const int64_t* image, int64_t rows, int64_t width, int64_t out_width,
                             int64_t channels, bool depthwise, int64_t kernel, int64_t stride, int64_t pad,
                             const float* w, const float* bias, float* out) {
      cuda::conv2d(x, image, rows, width, out_width, channels, depthwise, kernel, stride, pad, w, bias, out, stream_);
    }, x, static_cast<const int64_t*>(dev), rows, c.width, c.out_width(), c.channels, c.depthwise, c.kernel, c.stride,
        c.pad, w, bias, out);
  }
  void rel_pos_attention(const float* q, const float* k, const float* v, const float* pos, const float* bias_u,
                         const float* bias_v, const RelPosAttention& a, float* out) override {
    auto timer = time_op("rel_pos_attention");
    check_rel_pos_attention(a, "cuda");
    LFM_CHECK(a.head_dim <= 256, "cuda: rel_pos_attention supports head_dim up to 256, not ", a.head_dim);
    const int64_t rows = a.seg.back();
    std::vector<int64_t>& bounds = rel_pos_host_;  // as segment_attention's
    bounds.assign(static_cast<size_t>(2 * rows), 0);
    for (size_t s = 0; s + 1 < a.seg.size(); ++s)
      for (int64_t r = a.seg[s]; r < a.seg[s + 1]; ++r) {
        bounds[static_cast<size_t>(r)] = a.seg[s];
        bounds[static_cast<size_t>(rows + r)] = a.seg[s + 1];
      }
    ensure_capacity(*this, rel_pos_buf_, bounds.size() * sizeof(int64_t));
    auto* dev = static_cast<int64_t*>(rel_pos_buf_.data());
    upload(dev, bounds.data(), bounds.size() * sizeof(int64_t));
    enqueue("rel_pos_attention", [this](const float* q, const float* k, const float* v, const float* pos,
                                        const float* bu, const float* bv, const int64_t* begin, const int64_t* end,
                                        int64_t rows, int64_t h, int64_t hd, int64_t p0, float scale, float* out) {
      cuda::rel_pos_attention(q, k, v, pos, bu, bv, begin, end, rows, h, hd, p0, scale, out, stream_);
    }, q, k, v, pos, bias_u, bias_v, static_cast<const int64_t*>(dev), static_cast<const int64_t*>(dev + rows), rows,
        a.n_heads, a.head_dim, a.max_relative, a.scale, out);
  }
  void moe_route(const float* logits, int64_t rows, int64_t n_experts, int64_t k, const float* selection_bias,
                 bool normalize, float scale, int32_t* experts, float* weights) override {
    auto timer = time_op("moe_route");
    enqueue("moe_route", [this](const float* logits, int64_t rows, int64_t e, int64_t k, const float* bias, bool norm,
                                float scale, int32_t* experts, float* weights) {
      cuda::moe_route(logits, rows, e, k, bias, norm, scale, experts, weights, stream_);
    }, logits, rows, n_experts, k, selection_bias, normalize, scale, experts, weights);
  }
  void moe_group(const int32_t* experts, int64_t rows, int64_t k, int64_t n_experts, int32_t* first, int32_t* index,
                 int32_t* src) override {
    auto timer = time_op("moe_group");
    enqueue("moe_group", [this](const int32_t* experts, int64_t rows, int64_t k, int64_t e, int32_t* first,
                                int32_t* index, int32_t* src) {
      cuda::moe_group(experts, rows, k, e, first, index, src, stream_);
    }, experts, rows, k, n_experts, first, index, src);
  }
  void moe_matmul(const float* x, const int32_t* first, std::span<const TensorView* const> ws, int64_t rows,
                  float* y) override {
    const int64_t E = static_cast<int64_t>(ws.size());
    LFM_CHECK(E > 0, "cuda: moe_matmul without experts");
    const TensorView& w0 = *ws[0];
    for (const TensorView* w : ws)
      LFM_CHECK(w->dtype == w0.dtype && w->shape == w0.shape, "cuda: moe_matmul's experts differ: ",
                dtype_name(w->dtype), " ", shape_str(w->shape), " and ", dtype_name(w0.dtype), " ", shape_str(w0.shape));
    const int64_t out = w0.shape[0], cols = w0.shape[1];
    if (rows >= kGemmMinTokens * E && !own_only_) {
      // Long batches (prefill), where the experts average a cuBLAS matmul's worth of rows: each
      // expert's rows as one matmul, sized on the host from the groups (one wait; the step is
      // compute-bound). Fewer rows (batched decode) stay one grouped launch: no wait mid-step, no
      // launch per expert, and the step remains one CUDA graph.
      std::vector<int32_t> f(static_cast<size_t>(E + 1));
      download(f.data(), first, f.size() * sizeof(int32_t));
      LFM_CHECK(f[0] == 0 && f[E] == rows, "cuda: moe_matmul's groups cover ", f[E] - f[0], " rows, not ", rows);
      for (int64_t e = 0; e < E; ++e)
        if (f[e + 1] > f[e]) matmul(x + f[e] * cols, f[e + 1] - f[e], *ws[e], y + f[e] * out);
      return;
    }
    auto timer = time_op(profile_.enabled() ? cat("moe_matmul ", dtype_name(w0.dtype)) : std::string());
    const void* const* list = expert_list(ws);
    bool vec = true;
    for (const TensorView* w : ws) vec = vec && cuda::matmul_vector_ok(w->dtype, device_weight(*w), cols, x);
    enqueue("moe_matmul", [this](DType t, const void* const* list, int64_t E, int64_t out, int64_t cols, const float* x,
                                 const int32_t* first, float* y, bool vec) {
      cuda::grouped_matmul(t, list, E, out, cols, x, first, y, vec, stream_);
    }, w0.dtype, list, E, out, cols, x, first, y, vec);
  }

  void argmax_rows(const float* logits, int64_t rows, int64_t vocab, const uint8_t* allowed, int32_t* ids) override {
    auto timer = time_op("argmax_rows");
    enqueue("argmax_rows", [this](const float* logits, int64_t rows, int64_t vocab, const uint8_t* allowed, int32_t* ids) {
      cuda::argmax_rows(logits, rows, vocab, allowed, ids, stream_);
    }, logits, rows, vocab, allowed, ids);
  }
  void edit_logits(float* logits, int64_t vocab, const LogitEdit* edits, int64_t n) override {
    auto timer = time_op("edit_logits");
    enqueue("edit_logits", [this](float* logits, int64_t vocab, const LogitEdit* edits, int64_t n) {
      cuda::edit_logits(logits, vocab, edits, n, stream_);
    }, logits, vocab, edits, n);
  }
  void top_candidates(const float* logits, int64_t vocab, const CandidateRow* rows, int64_t count,
                      const uint8_t* allowed, int64_t n, Candidate* best, float* tail) override {
    auto timer = time_op("top_candidates");
    enqueue("top_candidates", [this](const float* logits, int64_t vocab, const CandidateRow* rows, int64_t count,
                                     const uint8_t* allowed, int64_t n, Candidate* best, float* tail) {
      cuda::top_candidates(logits, vocab, rows, count, allowed, n, best, tail, stream_);
    }, logits, vocab, rows, count, allowed, n, best, tail);
  }
  void logsumexp_rows(const float* logits, int64_t vocab, const int32_t* rows, int64_t count, double* out) override {
    auto timer = time_op("logsumexp_rows");
    enqueue("logsumexp_rows", [this](const float* logits, int64_t vocab, const int32_t* rows, int64_t count, double* out) {
      cuda::logsumexp_rows(logits, vocab, rows, count, out, stream_);
    }, logits, vocab, rows, count, out);
  }
  void moe_combine(const float* x, const int32_t* src, const float* weights, int64_t rows, int64_t k, int64_t cols,
                   float* out) override {
    auto timer = time_op("moe_combine");
    enqueue("moe_combine", [this](const float* x, const int32_t* src, const float* w, int64_t rows, int64_t k,
                                  int64_t cols, float* out) { cuda::moe_combine(x, src, w, rows, k, cols, out, stream_); },
            x, src, weights, rows, k, cols, out);
  }

 private:
  cuda::OpProfile::Timer time_op(std::string_view name) { return profile_.time(stream_, name); }

  const void* device_weight(const TensorView& w) const {
    LFM_CHECK(w.packed && w.packed_layout == PackedLayout::kDevice, "cuda: a ", dtype_name(w.dtype), " weight ",
              shape_str(w.shape), " was not uploaded (load the model with LoadOptions::backend set to this backend)");
    return w.packed;
  }

  // A device array of the experts' weight pointers, uploaded once per expert set (keyed by its
  // first matrix, checked against the whole list).
  const void* const* expert_list(std::span<const TensorView* const> ws) {
    std::vector<const void*> ptrs;
    for (const TensorView* w : ws) ptrs.push_back(device_weight(*w));
    ExpertList& l = expert_lists_[ws[0]];
    if (l.ptrs != ptrs) {
      ensure_capacity(*this, l.dev, ptrs.size() * sizeof(void*));
      upload(l.dev.data(), ptrs.data(), ptrs.size() * sizeof(void*));
      l.ptrs = std::move(ptrs);
    }
    return l.dev.as<const void* const>();
  }

  void check_step(std::span<const SeqRun> runs) const {
    LFM_CHECK(runs.data() == step_runs_ && runs.size() == step_n_runs_,
              "cuda: a state op's runs are not the ones begin_step uploaded");
  }

  static cuda::DevKv dev_kv(const KvPool& p) {
    return cuda::DevKv{p.k, p.v, p.type, p.block_tokens, p.kv_heads, p.head_dim};
  }

  // y [n, rows] = x [n, cols] · Wᵀ on the tensor cores. In column-major terms W is a cols × rows
  // matrix, x a cols × n one and y rows × n: y = Wᵀ x. F32 weights stay float32 (no TF32); F16
  // weights multiply f16-rounded activations; BF16 and quantized ones (decoded to bf16 first)
  // bf16-rounded activations, as transformers running in those dtypes does.
  void gemm(const float* x, int64_t n, DType type, const void* w, int64_t rows, int64_t cols, float* y) {
    // Scratch sized here, at the call: a queued op never allocates.
    uint16_t* xa = nullptr;
    uint16_t* wa = nullptr;
    if (type != DType::F32) {
      ensure_capacity(*this, act_buf_, static_cast<size_t>(n * cols) * 2);
      xa = act_buf_.as<uint16_t>();
      if (type != DType::F16 && type != DType::BF16) {
        ensure_capacity(*this, weight_buf_, static_cast<size_t>(rows * cols) * 2);
        wa = weight_buf_.as<uint16_t>();
      }
    }
    enqueue("gemm", [this](const float* x, int64_t n, DType type, const void* w, int64_t rows, int64_t cols, float* y,
                           uint16_t* xa, uint16_t* wa) {
      const float one = 1.0f, zero = 0.0f;
      const int m = static_cast<int>(rows), nn = static_cast<int>(n), k = static_cast<int>(cols);
      if (type == DType::F32) {
        LFM_CUBLAS_CHECK(blas_lib_.sgemm(blas_, CUBLAS_OP_T, CUBLAS_OP_N, m, nn, k, &one, static_cast<const float*>(w), k,
                                     x, k, &zero, y, m));
        return;
      }
      cudaDataType_t t = CUDA_R_16BF;
      const void* a = w;
      if (type == DType::F16) {
        t = CUDA_R_16F;
        cuda::to_f16(x, n * cols, xa, stream_);
      } else {
        cuda::to_bf16(x, n * cols, xa, stream_);
        if (wa) {
          cuda::dequantize_to_bf16(type, w, rows, cols, wa, stream_);
          a = wa;
        }
      }
      LFM_CUBLAS_CHECK(blas_lib_.gemm_ex(blas_, CUBLAS_OP_T, CUBLAS_OP_N, m, nn, k, &one, a, t, k, xa, t, k, &zero, y,
                                    CUDA_R_32F, m, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    }, x, n, type, w, rows, cols, y, xa, wa);
  }

  template <typename Fn, typename... Args>
  void enqueue(const char* name, Fn fn, const Args&... args) {
    queue_->enqueue(name, std::move(fn), args...);
  }

  int device_;
  bool own_only_;
  cuda::OpProfile profile_;
  std::string name_;
  cudaStream_t stream_ = nullptr;
  const cuda::CublasLibrary& blas_lib_;  // opened by the first backend
  cublasHandle_t blas_ = nullptr;
  // The step's descriptors (begin_step) and what they were made from.
  std::vector<uint8_t> staging_;
  DeviceBuffer step_buf_;
  cuda::DevStep step_;
  const SeqRun* step_runs_ = nullptr;
  size_t step_n_runs_ = 0;
  int64_t step_splits_ = 1;  // attention's key splits this step (see begin_step)
  // GEMM scratch: activations rounded to 16 bits, a quantized matrix decoded to bf16.
  DeviceBuffer act_buf_, weight_buf_;
  DeviceBuffer segment_buf_;  // segment_attention's per-row key ranges
  DeviceBuffer conv2d_buf_, rel_pos_buf_;  // conv2d's per-row images, rel_pos_attention's per-row segments
  std::vector<int64_t> conv2d_host_, rel_pos_host_;
  std::vector<int64_t> segment_host_;
  DeviceBuffer conv_segment_buf_;  // segment_conv's per-row segments
  std::vector<int64_t> conv_segment_host_;
  DeviceBuffer partial_buf_;  // attention's per-split partials
  struct ExpertList {
    std::vector<const void*> ptrs;  // host copy of what dev holds
    DeviceBuffer dev;
  };
  std::unordered_map<const TensorView*, ExpertList> expert_lists_;
  static constexpr size_t kBlasWorkspaceBytes = size_t{32} << 20;
  DeviceBuffer blas_workspace_;
  // Declared last: the queue's ops use the members above, and it goes first.
  std::shared_ptr<FreeGate> gate_;
  std::unique_ptr<cuda::CudaGraphs> graphs_;
  std::unique_ptr<ReplayQueue> queue_;
};

}  // namespace

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
  return std::make_unique<CudaBackend>(device, pool);
}

}  // namespace lfm
