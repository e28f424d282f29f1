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

void append_signature(std::vector<uint64_t>& words, const DevKv& kv);
void append_signature(std::vector<uint64_t>& words, const DevConv& conv);
void append_signature(std::vector<uint64_t>& words, const DevStep& step);
void append_signature(std::vector<uint64_t>& words, const SharedMatmul& m);
}  // namespace lfm::cuda
