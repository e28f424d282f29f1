// Reference implementations of the state ops (kv_write, paged attention, short conv with
// checkpoints): plain loops, float32 accumulation, a fixed order per output element. Every query
// row reduces its keys 0 .. p in ascending order and every conv output sums bias then taps in
// order, whatever the batch, the chunking, the thread count or the block size.
#include <algorithm>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/thread_pool.h"
#include "kernels/reference_backend.h"
#include "kernels/reference_ops.h"

namespace lfm {

namespace {

// Row index → run index, for work split by rows.
std::vector<int32_t> row_owners(std::span<const SeqRun> runs, int64_t& total_rows) {
  total_rows = 0;
  for (const SeqRun& r : runs) total_rows = std::max(total_rows, r.row0 + r.n_rows);
  std::vector<int32_t> owner(static_cast<size_t>(total_rows), -1);
  for (size_t i = 0; i < runs.size(); ++i)
    for (int64_t t = 0; t < runs[i].n_rows; ++t) owner[runs[i].row0 + t] = static_cast<int32_t>(i);
  return owner;
}

}  // namespace

namespace ref {

// Checks that a run's block table covers its positions and names only blocks of the pool.
void check_run(const SeqRun& r, int64_t block_tokens, int64_t n_blocks) {
  LFM_CHECK(r.n_rows > 0 && r.pos0 >= 0, "kernels: run with ", r.n_rows, " rows at position ", r.pos0);
  const int64_t last_block = (r.pos0 + r.n_rows - 1) / block_tokens;
  LFM_CHECK(last_block < static_cast<int64_t>(r.blocks.size()), "kernels: block table of ", r.blocks.size(),
            " blocks does not cover position ", r.pos0 + r.n_rows - 1);
  for (int64_t b = 0; b <= last_block; ++b)
    LFM_CHECK(r.blocks[b] >= 0 && r.blocks[b] < n_blocks, "kernels: block id ", r.blocks[b], " outside the pool of ",
              n_blocks);
}

const uint8_t* value_row(const KvPool& pool, std::span<const int32_t> blocks, int64_t pos, int64_t head) {
  return static_cast<const uint8_t*>(pool.v) +
         pool.value_row_offset(blocks[pos / pool.block_tokens], head, pos % pool.block_tokens);
}

namespace {
constexpr int64_t kKeyChunk = 64;  // key values converted per pass (a stack buffer of 64 × 4 bytes)
}  // namespace

void load_key(const KvPool& pool, std::span<const int32_t> blocks, int64_t pos, int64_t head, float* out) {
  const int64_t block = blocks[pos / pool.block_tokens], t = pos % pool.block_tokens;
  const size_t es = pool.elem_bytes();
  const auto* k = static_cast<const uint8_t*>(pool.k);
  uint8_t buf[kKeyChunk * 4];
  for (int64_t d0 = 0; d0 < pool.head_dim; d0 += kKeyChunk) {
    const int64_t n = std::min(kKeyChunk, pool.head_dim - d0);
    for (int64_t d = 0; d < n; ++d) std::memcpy(buf + d * es, k + pool.key_elem_offset(block, head, d0 + d, t), es);
    load_state_row(pool.type, buf, out + d0, n);
  }
}

void store_key(const KvPool& pool, std::span<const int32_t> blocks, int64_t pos, int64_t head, const float* in) {
  const int64_t block = blocks[pos / pool.block_tokens], t = pos % pool.block_tokens;
  const size_t es = pool.elem_bytes();
  auto* k = static_cast<uint8_t*>(pool.k);
  uint8_t buf[kKeyChunk * 4];
  for (int64_t d0 = 0; d0 < pool.head_dim; d0 += kKeyChunk) {
    const int64_t n = std::min(kKeyChunk, pool.head_dim - d0);
    store_state_row(pool.type, in + d0, buf, n);
    for (int64_t d = 0; d < n; ++d) std::memcpy(k + pool.key_elem_offset(block, head, d0 + d, t), buf + d * es, es);
  }
}

void paged_attention_head(const float* q, const KvPool& pool, const SeqRun& run, int64_t i, int64_t h,
                          int64_t n_heads, float scale, int64_t window, float* scores, float* kbuf, float* out) {
  const int64_t hd = pool.head_dim;
  const int64_t kvh = h / (n_heads / pool.kv_heads);
  const int64_t row = run.row0 + i;
  const float* qi = q + (row * n_heads + h) * hd;
  const int64_t end = run.pos0 + i + 1;                             // keys [first, end)
  const int64_t first = window > 0 ? std::max<int64_t>(0, end - window) : 0;  // sliding window: the last `window`
  const int64_t n_keys = end - first;
  for (int64_t j = 0; j < n_keys; ++j) {
    load_key(pool, run.blocks, first + j, kvh, kbuf);
    scores[j] = dot(qi, kbuf, hd) * scale;
  }
  softmax(scores, n_keys);
  float* o = out + (row * n_heads + h) * hd;
  std::fill(o, o + hd, 0.0f);
  for (int64_t j = 0; j < n_keys; ++j) {
    load_state_row(pool.type, value_row(pool, run.blocks, first + j, kvh), kbuf, hd);
    const float p = scores[j];
    for (int64_t e = 0; e < hd; ++e) o[e] += p * kbuf[e];
  }
}

void short_conv_run(const float* u, const ConvPool& pool, const SeqRun& run, int64_t kernel, const float* w,
                    const float* bias, float* out) {
  const int64_t dim = pool.dim, hist = kernel - 1;
  auto* slot = static_cast<uint8_t*>(pool.state) + static_cast<size_t>(run.conv_slot) * pool.slot_bytes();
  // Window of the last `hist` inputs, oldest first, as float32 (values already rounded).
  std::vector<float> win(static_cast<size_t>(hist * dim)), x(static_cast<size_t>(dim));
  load_state_row(pool.type, slot, win.data(), hist * dim);
  size_t ck = 0;
  for (int64_t t = 0; t < run.n_rows; ++t) {
    std::copy_n(u + (run.row0 + t) * dim, dim, x.data());
    round_to_state_type(pool.type, x.data(), dim);
    float* o = out + (run.row0 + t) * dim;
    for (int64_t c = 0; c < dim; ++c) {
      float z = bias ? bias[c] : 0.0f;
      for (int64_t k = 0; k < hist; ++k) z += w[c * kernel + k] * win[k * dim + c];
      z += w[c * kernel + hist] * x[c];
      o[c] = z;
    }
    if (hist > 0) {
      std::copy(win.begin() + dim, win.end(), win.begin());
      std::copy(x.begin(), x.end(), win.end() - dim);
    }
    for (; ck < run.checkpoints.size() && run.checkpoints[ck].pos == run.pos0 + t; ++ck)
      store_state_row(pool.type, win.data(),
                      static_cast<uint8_t*>(pool.snapshots) + run.checkpoints[ck].snapshot * pool.slot_bytes(),
                      hist * dim);
  }
  store_state_row(pool.type, win.data(), slot, hist * dim);
}

void check_short_conv(const ConvPool& pool, std::span<const SeqRun> runs, int64_t kernel) {
  LFM_CHECK(kernel >= 1 && pool.rows == kernel - 1, "kernels: conv kernel ", kernel, " does not match state rows ",
            pool.rows);
  for (const SeqRun& r : runs) {
    LFM_CHECK(r.conv_slot >= 0 && r.conv_slot < pool.n_slots, "kernels: conv slot ", r.conv_slot,
              " outside the pool of ", pool.n_slots);
    int64_t last = r.pos0;
    for (const ConvCheckpoint& c : r.checkpoints) {
      LFM_CHECK(c.snapshot >= 0 && c.snapshot < pool.n_snapshots, "kernels: conv snapshot ", c.snapshot,
                " outside the pool of ", pool.n_snapshots);
      LFM_CHECK(c.pos >= last && c.pos < r.pos0 + r.n_rows, "kernels: conv checkpoint at position ", c.pos,
                " is outside the run or out of order");
      last = c.pos;
    }
  }
}

}  // namespace ref

void ReferenceBackend::kv_write(const KvPool& pool, std::span<const SeqRun> runs, const float* k, const float* v) {
  const int64_t width = pool.token_elems(), hd = pool.head_dim;
  for (const SeqRun& r : runs) {
    ref::check_run(r, pool.block_tokens, pool.n_blocks);
    for (int64_t i = 0; i < r.n_rows; ++i) {
      const int64_t pos = r.pos0 + i;
      for (int64_t g = 0; g < pool.kv_heads; ++g) {
        const int64_t src = (r.row0 + i) * width + g * hd;
        ref::store_key(pool, r.blocks, pos, g, k + src);
        store_state_row(pool.type, v + src, const_cast<uint8_t*>(ref::value_row(pool, r.blocks, pos, g)), hd);
      }
    }
  }
}

void ReferenceBackend::attention(const float* q, const KvPool& pool, std::span<const SeqRun> runs, int64_t n_heads,
                                 float scale, float* out, int64_t window) {
  LFM_CHECK(pool.kv_heads > 0 && n_heads % pool.kv_heads == 0, "kernels: ", n_heads,
            " query heads cannot share ", pool.kv_heads, " kv heads");
  LFM_CHECK(window >= 0, "kernels: attention window ", window, " is negative");
  int64_t max_keys = 0;
  for (const SeqRun& r : runs) {
    ref::check_run(r, pool.block_tokens, pool.n_blocks);
    max_keys = std::max(max_keys, r.pos0 + r.n_rows);
  }
  int64_t total_rows = 0;
  const std::vector<int32_t> owner = row_owners(runs, total_rows);
  pool_.parallel_for(total_rows * n_heads, 4, [&](int64_t begin, int64_t end) {
    std::vector<float> scores(static_cast<size_t>(max_keys)), kbuf(static_cast<size_t>(pool.head_dim));
    for (int64_t task = begin; task < end; ++task) {
      const int64_t row = task / n_heads;
      if (owner[row] < 0) continue;
      const SeqRun& r = runs[owner[row]];
      ref::paged_attention_head(q, pool, r, row - r.row0, task % n_heads, n_heads, scale, window, scores.data(),
                                kbuf.data(), out);
    }
  });
}

void ReferenceBackend::short_conv(const float* u, const ConvPool& pool, std::span<const SeqRun> runs, int64_t kernel,
                                  const float* w, const float* bias, float* out) {
  ref::check_short_conv(pool, runs, kernel);
  pool_.parallel_for(static_cast<int64_t>(runs.size()), 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) ref::short_conv_run(u, pool, runs[i], kernel, w, bias, out);
  });
}

}  // namespace lfm
