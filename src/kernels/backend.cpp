#include "kernels/backend.h"

#include <vector>

#include "core/error.h"

namespace lfm {

void Backend::moe_matmul(const float* x, const int32_t* first, std::span<const TensorView* const> ws, int64_t rows,
                         float* y) {
  LFM_CHECK(host_memory(), name(), ": moe_matmul needs its own implementation on device memory");
  const int64_t E = static_cast<int64_t>(ws.size());
  LFM_CHECK(E > 0 && first[0] == 0 && first[E] == rows, name(), ": moe_matmul's groups cover ", first[E] - first[0],
            " rows, not ", rows);
  const int64_t cols = ws[0]->shape[1], out = ws[0]->shape[0];
  std::vector<MatmulJob> jobs;
  for (int64_t e = 0; e < E; ++e) {
    const int64_t n = first[e + 1] - first[e];
    LFM_CHECK(n >= 0, name(), ": moe_matmul's group ", e, " has ", n, " rows");
    if (n > 0) jobs.push_back({x + first[e] * cols, n, ws[e], y + first[e] * out});
  }
  matmul_jobs(jobs);
}

}  // namespace lfm
