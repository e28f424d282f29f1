#include "kernels/cuda/cuda_graphs.h"

#include <cstdlib>
#include <cstring>

#include "kernels/cuda/cuda_check.h"

namespace lfm::cuda {

void* CudaGraphs::record(std::span<const std::function<void()>> ops) {
  // Relaxed: the ops may set a kernel's attributes (not a stream operation) while capturing.
  LFM_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeRelaxed));
  cudaGraph_t graph = nullptr;
  try {
    for (const auto& op : ops) op();
  } catch (...) {
    cudaStreamEndCapture(stream_, &graph);  // leave the stream usable; the op's error is the one to report
    if (graph) cudaGraphDestroy(graph);
    cudaGetLastError();
    throw;
  }
  LFM_CUDA_CHECK(cudaStreamEndCapture(stream_, &graph));
  cudaGraphExec_t exec = nullptr;
  const cudaError_t err = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  LFM_CUDA_CHECK(err);
  return exec;
}

void CudaGraphs::launch(void* graph) { LFM_CUDA_CHECK(cudaGraphLaunch(static_cast<cudaGraphExec_t>(graph), stream_)); }

void CudaGraphs::release(void* graph) { cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(graph)); }

void CudaGraphs::wait() { LFM_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

void* CudaGraphs::alloc_staging(size_t bytes) {
  void* p = nullptr;
  LFM_CUDA_CHECK(cudaHostAlloc(&p, bytes, cudaHostAllocDefault));
  return p;
}

void CudaGraphs::free_staging(void* p) { cudaFreeHost(p); }

bool cuda_graphs_requested() {
  const char* env = std::getenv("LFM_CUDA_GRAPHS");
  return env && (std::strcmp(env, "1") == 0 || std::strcmp(env, "stats") == 0);
}

bool cuda_graph_stats_requested() {
  const char* env = std::getenv("LFM_CUDA_GRAPHS");
  return env && std::strcmp(env, "stats") == 0;
}

int64_t decode_bucket_rows(int64_t n) {
  auto round_up = [](int64_t v, int64_t m) { return (v + m - 1) / m * m; };
  if (n <= 2) return n;
  if (n <= 4) return 4;
  if (n <= 56) return round_up(n, 8);
  if (n <= 63) return 63;
  if (n <= 512) return round_up(n, 16);
  return n;
}

void append_signature(std::vector<uint64_t>& words, const DevKv& kv) {
  lfm::append_signatures(words, kv.k, kv.v, kv.type, kv.block_tokens, kv.kv_heads, kv.head_dim);
}

void append_signature(std::vector<uint64_t>& words, const DevConv& conv) {
  lfm::append_signatures(words, conv.state, conv.snapshots, conv.type, conv.rows, conv.dim);
}

void append_signature(std::vector<uint64_t>& words, const DevStep& step) {
  lfm::append_signatures(words, step.runs, step.blocks, step.ckpts, step.row_run, step.tiles, step.wide_tiles,
                         step.n_runs, step.n_tiles, step.n_wide_tiles, step.n_rows, step.max_run_rows);
}

void append_signature(std::vector<uint64_t>& words, const SharedMatmul& m) {
  lfm::append_signature(words, m.count);
  for (int g = 0; g < m.count; ++g) lfm::append_signatures(words, m.w[g], m.y[g], m.rows[g]);
}

}  // namespace lfm::cuda
