// CUDA graphs for the CUDA backend's ReplayQueue (kernels/replay_queue.h): a run of queued ops is
// recorded by stream capture and launched again with one cudaGraphLaunch; staged uploads are read
// from pinned host memory. Also the signature words of the step descriptors the kernels take by
// value.
#pragma once

#include <cuda_runtime.h>

#include <functional>
#include <span>
#include <vector>

#include "kernels/cuda/cuda_kernels.h"
#include "kernels/replay_queue.h"

namespace lfm::cuda {

class CudaGraphs final : public OpGraphs {
 public:
  explicit CudaGraphs(cudaStream_t stream) : stream_(stream) {}
  void* record(std::span<const std::function<void()>> ops) override;
  void launch(void* graph) override;
  void release(void* graph) override;
  void wait() override;
  void* alloc_staging(size_t bytes) override;
  void free_staging(void* p) override;

 private:
  cudaStream_t stream_;
};

// Whether LFM_CUDA_GRAPHS asks for graphs ("1", or "stats": and a line of how many flushes were
// replayed, recorded or launched op by op when the backend closes). Off by default until they
// have run on a GPU.
bool cuda_graphs_requested();
bool cuda_graph_stats_requested();

// The batch sizes decode steps are padded to when graphs replay them, so that a serving batch
// whose size moves a little keeps replaying one graph: n ≤ 2 as it is, then 4 (the most rows the
// GEMV with the residual add + norm fused takes), 8, multiples of 8 up to 56, 63 (the most rows
// of the GEMV kernels: 64 and more go to cuBLAS), multiples of 16 up to 512; larger steps keep
// their size. At most kMaxDecodePad pad rows.
int64_t decode_bucket_rows(int64_t n);
inline constexpr int64_t kMaxDecodePad = 15;

void append_signature(std::vector<uint64_t>& words, const DevKv& kv);
void append_signature(std::vector<uint64_t>& words, const DevConv& conv);
void append_signature(std::vector<uint64_t>& words, const DevStep& step);
void append_signature(std::vector<uint64_t>& words, const SharedMatmul& m);
}  // namespace lfm::cuda
