#include "kernels/backend.h"

#include <algorithm>
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

int64_t check_segment_attention(const SegmentAttention& a, const char* who) {
  LFM_CHECK(a.seg.size() >= 2 && a.seg.front() == 0, who, ": segment_attention needs segment bounds from 0");
  LFM_CHECK(a.n_heads > 0 && a.n_kv_heads > 0 && a.head_dim > 0 && a.n_heads % a.n_kv_heads == 0, who,
            ": segment_attention with ", a.n_heads, " heads over ", a.n_kv_heads, " kv heads of ", a.head_dim);
  LFM_CHECK(a.key_end.empty() || a.key_end.size() + 1 == a.seg.size(), who, ": segment_attention has ",
            a.key_end.size(), " key ends for ", a.seg.size() - 1, " segments");
  int64_t longest = 0;
  for (size_t i = 1; i < a.seg.size(); ++i) {
    LFM_CHECK(a.seg[i] > a.seg[i - 1], who, ": segment_attention segment ", i - 1, " is empty or reversed");
    if (!a.key_end.empty())
      LFM_CHECK(a.key_end[i - 1] > a.seg[i - 1] && a.key_end[i - 1] <= a.seg[i], who, ": segment_attention segment ",
                i - 1, " has keys up to row ", a.key_end[i - 1], ", outside its rows [", a.seg[i - 1], ", ", a.seg[i],
                ")");
    longest = std::max(longest, a.seg[i] - a.seg[i - 1]);
  }
  return longest;
}

int64_t check_conv2d(const Conv2d& c, const char* who) {
  LFM_CHECK(c.seg.size() >= 2 && c.seg.front() == 0, who, ": conv2d needs image row bounds from 0");
  LFM_CHECK(c.width > 0 && c.channels > 0 && c.kernel > 0 && c.stride > 0 && c.pad >= 0 && c.pad < c.kernel, who,
            ": conv2d of width ", c.width, ", ", c.channels, " channels, kernel ", c.kernel, ", stride ", c.stride,
            ", pad ", c.pad);
  LFM_CHECK(c.out_width() > 0, who, ": conv2d of width ", c.width, " has no output column with kernel ", c.kernel,
            " and pad ", c.pad);
  int64_t rows = 0;
  for (size_t i = 1; i < c.seg.size(); ++i) {
    const int64_t h = c.seg[i] - c.seg[i - 1];
    LFM_CHECK(h > 0, who, ": conv2d image ", i - 1, " is empty or reversed");
    LFM_CHECK(c.out_rows(h) > 0, who, ": conv2d image ", i - 1, " of ", h, " rows has no output row with kernel ",
              c.kernel, " and pad ", c.pad);
    rows += c.out_rows(h);
  }
  return rows;
}

int64_t check_rel_pos_attention(const RelPosAttention& a, const char* who) {
  LFM_CHECK(a.seg.size() >= 2 && a.seg.front() == 0, who, ": rel_pos_attention needs segment bounds from 0");
  LFM_CHECK(a.n_heads > 0 && a.head_dim > 0, who, ": rel_pos_attention with ", a.n_heads, " heads of ", a.head_dim);
  int64_t longest = 0;
  for (size_t i = 1; i < a.seg.size(); ++i) {
    LFM_CHECK(a.seg[i] > a.seg[i - 1], who, ": rel_pos_attention segment ", i - 1, " is empty or reversed");
    longest = std::max(longest, a.seg[i] - a.seg[i - 1]);
  }
  LFM_CHECK(a.max_relative >= longest - 1, who, ": rel_pos_attention's position table reaches relative position ",
            a.max_relative, ", a segment of ", longest, " rows needs ", longest - 1);
  return longest;
}

}  // namespace lfm
