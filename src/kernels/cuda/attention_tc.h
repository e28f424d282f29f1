// The tensor-core pass of paged attention (kernels_attention_tc.cu), called by cuda::attention
// (kernels_attention.cu), which launches the merge of multi-split rows after it.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/cuda_kernels.h"

namespace lfm::cuda {

// Whether the tensor-core kernel takes this shape: head_dim ≤ 128, at most 64 query heads per KV head.
bool attention_tc_fits(const DevKv& kv, int64_t n_heads);
// The split pass: every tile × KV head × split of kAttnSplitKeys keys, writing `out` for rows of
// one split and (max, sum, acc) partials for the others, as the CUDA-core kernel does.
void attention_tc_splits(const float* q, const DevKv& kv, const DevStep& step, int n_heads, float scale, float* out,
                         float* partial, int splits, int64_t window, cudaStream_t s);

}  // namespace lfm::cuda
