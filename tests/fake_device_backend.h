// A backend that computes on "device" memory the host cannot read: the reference kernels, but
// host_memory() is false, and
//  - every pointer an op receives must lie inside memory this backend allocated (activations,
//    scratch, ids, positions, indices, pools, its copies of the small weight vectors); an op
//    handed anything else (a host vector the caller forgot to upload) throws, naming the op;
//  - that memory is one arena mapped PROT_NONE except while one of the backend's own ops runs, so
//    host code that reads or writes it directly (as a CPU would, and a GPU's memory forbids) dies
//    with SIGSEGV in the test that does it.
// Transfers are counted. What it proves on a CPU is the data flow a GPU backend relies on:
// Forward, the engine and the state cache touch backend memory only through the backend.
#pragma once

#include <sys/mman.h>

#include <bit>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "core/error.h"
#include "kernels/reference_backend.h"
#include "kernels/replay_queue.h"

namespace lfm::test {

// Host "graphs" that behave as CUDA's: record keeps the ops with the arguments they had then,
// and a launch runs those again.
class HostOpGraphs final : public OpGraphs {
 public:
  void* record(std::span<const std::function<void()>> ops) override {
    ++records;
    graphs.emplace_back(ops.begin(), ops.end());
    return &graphs.back();
  }
  void launch(void* g) override {
    ++launches;
    for (const auto& op : *static_cast<std::vector<std::function<void()>>*>(g)) op();
  }
  void release(void* g) override {
    ++releases;
    for (auto it = graphs.begin(); it != graphs.end(); ++it)
      if (&*it == g) {
        graphs.erase(it);
        return;
      }
  }
  void wait() override { ++waits; }
  void* alloc_staging(size_t bytes) override { return std::aligned_alloc(64, (bytes + 63) / 64 * 64); }
  void free_staging(void* p) override { std::free(p); }

  std::list<std::vector<std::function<void()>>> graphs;
  int records = 0, launches = 0, releases = 0, waits = 0;
};

// A host value a queued op depends on, as signature words.
struct HostWords {
  std::vector<int64_t> v;
};
inline void append_signature(std::vector<uint64_t>& words, const HostWords& h) {
  words.push_back(h.v.size());
  for (int64_t x : h.v) words.push_back(static_cast<uint64_t>(x));
}
inline HostWords pool_words(const KvPool& p) {
  return {{reinterpret_cast<intptr_t>(p.k), reinterpret_cast<intptr_t>(p.v), static_cast<int64_t>(p.type), p.n_blocks,
           p.block_tokens, p.kv_heads, p.head_dim}};
}
inline HostWords pool_words(const ConvPool& p) {
  return {{reinterpret_cast<intptr_t>(p.state), reinterpret_cast<intptr_t>(p.snapshots), static_cast<int64_t>(p.type),
           p.n_slots, p.n_snapshots, p.rows, p.dim}};
}

class FakeDeviceBackend final : public ReferenceBackend {
 public:
  // replay: ops are queued until a download and runs of them seen before are launched as
  // recorded "graphs" (kernels/replay_queue.h on HostOpGraphs), as the CUDA backend does with
  // LFM_CUDA_GRAPHS=1; the state ops then read the step's runs from memory begin_step uploaded.
  explicit FakeDeviceBackend(ThreadPool& pool, bool replay = false)
      : ReferenceBackend(pool), queue_(graphs_, replay_options(replay)) {}
  ~FakeDeviceBackend() override {
    try {
      queue_.flush();
    } catch (...) {
    }
  }
  const char* name() const override { return queue_.enabled() ? "fake-device-replay" : "fake-device"; }
  bool host_memory() const override { return false; }
  // Replaying, decode steps of up to 16 sequences are padded to a power of two (the CUDA
  // backend's buckets are others; what Forward does with them is the same).
  int64_t decode_step_rows(int64_t n) const override {
    return queue_.enabled() && n <= 16 ? static_cast<int64_t>(std::bit_ceil(static_cast<uint64_t>(n))) : n;
  }
  int64_t decode_step_max_pad() const override { return queue_.enabled() ? 7 : 0; }
  void launch_queued() override { queue_.flush(/*mid_step=*/true); }
  const ReplayQueue::Stats& replay_stats() const { return queue_.stats(); }

  DeviceBuffer allocate(size_t bytes) override {
    if (bytes == 0) return DeviceBuffer();
    ++allocations;
    return DeviceBuffer(std::make_unique<Tracked>(bytes, live_, queue_.free_gate()));
  }
  void upload(void* dst, const void* src, size_t bytes) override {
    ++uploads;
    mine(dst, "upload");
    if (queue_.idle()) {
      Open open(*live_);
      ReferenceBackend::upload(dst, src, bytes);
      return;
    }
    run("upload", [](void* d, const void* s, size_t n) { std::memcpy(d, s, n); }, dst, queue_.stage(src, bytes), bytes);
  }
  void download(void* dst, const void* src, size_t bytes) override {
    queue_.flush();
    Open open(*live_);
    ++downloads;
    downloaded_bytes += bytes;
    mine(src, "download");
    ReferenceBackend::download(dst, src, bytes);
  }
  void copy(void* dst, const void* src, size_t bytes) override {
    mine(dst, "copy");
    mine(src, "copy");
    run("copy", [this](void* d, const void* s, size_t n) { ReferenceBackend::copy(d, s, n); }, dst, src, bytes);
  }
  void fill_zero(void* dst, size_t bytes) override {
    mine(dst, "fill_zero");
    run("fill_zero", [this](void* d, size_t n) { ReferenceBackend::fill_zero(d, n); }, dst, bytes);
  }
  std::unique_ptr<PreparedWeights> prepare_weights(WeightSet& set) override {
    Open open(*live_);
    auto out = std::make_unique<Copies>();
    for (WeightVector* v : set.vectors) {
      out->buffers.push_back(allocate(v->size() * sizeof(float)));
      upload(out->buffers.back().data(), v->host.data(), v->size() * sizeof(float));
      v->device = out->buffers.back().as<float>();
    }
    return out;
  }

  // Replay: the runs go up as words (a GPU backend's step descriptors), in room rounded up to a
  // power of two so that a decode step's upload keeps its size while block tables grow.
  void begin_step(std::span<const SeqRun> runs) override {
    if (!queue_.enabled()) return;
    std::vector<int64_t> w = {static_cast<int64_t>(runs.size())};
    for (const SeqRun& r : runs) {
      w.insert(w.end(), {r.row0, r.n_rows, r.pos0, r.conv_slot, static_cast<int64_t>(r.blocks.size()),
                         static_cast<int64_t>(r.checkpoints.size())});
      w.insert(w.end(), r.blocks.begin(), r.blocks.end());
      for (const ConvCheckpoint& c : r.checkpoints) w.insert(w.end(), {c.pos, c.snapshot});
    }
    w.resize(std::bit_ceil(w.size()), 0);
    ensure_capacity(*this, runs_buf_, w.size() * sizeof(int64_t));
    upload(runs_buf_.data(), w.data(), w.size() * sizeof(int64_t));
    runs_words_ = static_cast<int64_t>(w.size());
  }

  void matmul(const float* x, int64_t n, const TensorView& w, float* y) override {
    mine(x, "matmul x"), mine(y, "matmul y");
    run("matmul", [this](const float* x, int64_t n, const TensorView* w, float* y) { ReferenceBackend::matmul(x, n, *w, y); },
        x, n, &w, y);
  }
  // Both as separate matmuls (the same bits, as Backend promises).
  void matmul_shared(const float* x, int64_t n, std::span<const TensorView* const> ws,
                     std::span<float* const> ys) override {
    for (size_t i = 0; i < ws.size(); ++i) matmul(x, n, *ws[i], ys[i]);
  }
  void matmul_jobs(std::span<const MatmulJob> jobs) override {
    for (const MatmulJob& j : jobs) matmul(j.x, j.n, *j.w, j.y);
  }
  void embedding(const TensorView& table, const int32_t* ids, int64_t n, float* out) override {
    mine(ids, "embedding ids"), mine(out, "embedding out");
    run("embedding", [this](const TensorView* t, const int32_t* ids, int64_t n, float* out) {
      ReferenceBackend::embedding(*t, ids, n, out);
    }, &table, ids, n, out);
  }
  void rms_norm(const float* x, const float* w, int64_t rows, int64_t dim, float eps, float* out) override {
    mine(x, "rms_norm x"), mine(w, "rms_norm weight"), mine(out, "rms_norm out");
    run("rms_norm", [this](const float* x, const float* w, int64_t rows, int64_t dim, float eps, float* out) {
      ReferenceBackend::rms_norm(x, w, rows, dim, eps, out);
    }, x, w, rows, dim, eps, out);
  }
  void rope_neox(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim, const int64_t* positions,
                 const float* inv_freq) override {
    mine(x, "rope x"), mine(positions, "rope positions"), mine(inv_freq, "rope inv_freq");
    run("rope", [this](float* x, int64_t n, int64_t h, int64_t hd, const int64_t* p, const float* f) {
      ReferenceBackend::rope_neox(x, n, h, hd, p, f);
    }, x, n_tokens, n_heads, head_dim, positions, inv_freq);
  }
  void kv_write(const KvPool& pool, std::span<const SeqRun> runs, const float* k, const float* v) override {
    mine(pool.k, "kv_write pool"), mine(pool.v, "kv_write pool"), mine(k, "kv_write k"), mine(v, "kv_write v");
    if (!queue_.enabled()) {
      Open open(*live_);
      return ReferenceBackend::kv_write(pool, runs, k, v);
    }
    run("kv_write", [this, pool](const HostWords&, const int64_t* dev_runs, const float* k, const float* v) {
      Runs r(dev_runs);
      ReferenceBackend::kv_write(pool, r.runs, k, v);
    }, pool_words(pool), step_runs(), k, v);
  }
  void attention(const float* q, const KvPool& pool, std::span<const SeqRun> runs, int64_t n_heads, float scale,
                 float* out, int64_t window) override {
    mine(q, "attention q"), mine(pool.k, "attention pool"), mine(out, "attention out");
    if (!queue_.enabled()) {
      Open open(*live_);
      return ReferenceBackend::attention(q, pool, runs, n_heads, scale, out, window);
    }
    run("attention", [this, pool](const float* q, const HostWords&, const int64_t* dev_runs, int64_t h, float scale,
                                  float* out, int64_t window) {
      Runs r(dev_runs);
      ReferenceBackend::attention(q, pool, r.runs, h, scale, out, window);
    }, q, pool_words(pool), step_runs(), n_heads, scale, out, window);
  }
  void short_conv(const float* u, const ConvPool& pool, std::span<const SeqRun> runs, int64_t kernel, const float* w,
                  const float* bias, float* out) override {
    mine(u, "short_conv u"), mine(pool.state, "short_conv state"), mine(w, "short_conv taps"),
        mine(bias, "short_conv bias"), mine(out, "short_conv out");
    if (pool.snapshots) mine(pool.snapshots, "short_conv snapshots");
    if (!queue_.enabled()) {
      Open open(*live_);
      return ReferenceBackend::short_conv(u, pool, runs, kernel, w, bias, out);
    }
    run("short_conv", [this, pool](const float* u, const HostWords&, const int64_t* dev_runs, int64_t kernel,
                                   const float* w, const float* bias, float* out) {
      Runs r(dev_runs);
      ReferenceBackend::short_conv(u, pool, r.runs, kernel, w, bias, out);
    }, u, pool_words(pool), step_runs(), kernel, w, bias, out);
  }
  void swiglu(const float* gate, const float* up, int64_t n, float* out) override {
    mine(gate, "swiglu"), mine(up, "swiglu"), mine(out, "swiglu");
    run("swiglu", [this](const float* g, const float* u, int64_t n, float* o) { ReferenceBackend::swiglu(g, u, n, o); },
        gate, up, n, out);
  }
  void mul(const float* a, const float* b, int64_t n, float* out) override {
    mine(a, "mul"), mine(b, "mul"), mine(out, "mul");
    run("mul", [this](const float* a, const float* b, int64_t n, float* o) { ReferenceBackend::mul(a, b, n, o); }, a, b,
        n, out);
  }
  void softmax(float* x, int64_t n) override {
    mine(x, "softmax");
    run("softmax", [this](float* x, int64_t n) { ReferenceBackend::softmax(x, n); }, x, n);
  }
  void add(float* y, const float* x, int64_t n) override {
    mine(y, "add"), mine(x, "add");
    run("add", [this](float* y, const float* x, int64_t n) { ReferenceBackend::add(y, x, n); }, y, x, n);
  }
  void mul_rows(const float* a, int64_t lda, const float* b, int64_t ldb, int64_t rows, int64_t cols, float* out,
                int64_t ldo) override {
    mine(a, "mul_rows"), mine(b, "mul_rows"), mine(out, "mul_rows");
    run("mul_rows", [this](const float* a, int64_t lda, const float* b, int64_t ldb, int64_t rows, int64_t cols,
                           float* out, int64_t ldo) { ReferenceBackend::mul_rows(a, lda, b, ldb, rows, cols, out, ldo); },
        a, lda, b, ldb, rows, cols, out, ldo);
  }
  void add_bias(float* y, const float* bias, int64_t rows, int64_t cols) override {
    mine(y, "add_bias"), mine(bias, "add_bias bias");
    run("add_bias", [this](float* y, const float* b, int64_t rows, int64_t cols) { ReferenceBackend::add_bias(y, b, rows, cols); },
        y, bias, rows, cols);
  }
  void gather_rows(const float* x, int64_t cols, const int32_t* index, int64_t n, float* out) override {
    mine(x, "gather_rows"), mine(index, "gather_rows index"), mine(out, "gather_rows");
    run("gather_rows", [this](const float* x, int64_t cols, const int32_t* index, int64_t n, float* out) {
      ReferenceBackend::gather_rows(x, cols, index, n, out);
    }, x, cols, index, n, out);
  }
  void layer_norm(const float* x, const float* w, const float* b, int64_t rows, int64_t dim, float eps,
                  float* out) override {
    mine(x, "layer_norm"), mine(w, "layer_norm weight"), mine(out, "layer_norm");
    if (b) mine(b, "layer_norm bias");
    run("layer_norm", [this](const float* x, const float* w, const float* b, int64_t rows, int64_t dim, float eps,
                             float* out) { ReferenceBackend::layer_norm(x, w, b, rows, dim, eps, out); },
        x, w, b, rows, dim, eps, out);
  }
  void gelu(const float* x, int64_t n, bool tanh_approximation, float* out) override {
    mine(x, "gelu"), mine(out, "gelu");
    run("gelu", [this](const float* x, int64_t n, bool t, float* out) { ReferenceBackend::gelu(x, n, t, out); }, x, n,
        tanh_approximation, out);
  }
  void segment_attention(const float* q, const float* k, const float* v, const SegmentAttention& a,
                         float* out) override {
    mine(q, "segment_attention"), mine(k, "segment_attention"), mine(v, "segment_attention"),
        mine(out, "segment_attention");
    run("segment_attention", [this](const float* q, const float* k, const float* v, const HostWords& seg,
                                    const HostWords& key_end, int64_t h, int64_t g, int64_t hd, float scale,
                                    bool causal, float* out) {
      ReferenceBackend::segment_attention(q, k, v, SegmentAttention{seg.v, key_end.v, h, g, hd, scale, causal}, out);
    }, q, k, v, HostWords{{a.seg.begin(), a.seg.end()}}, HostWords{{a.key_end.begin(), a.key_end.end()}}, a.n_heads,
        a.n_kv_heads, a.head_dim, a.scale, a.causal, out);
  }
  void segment_conv(const float* u, std::span<const int64_t> seg, int64_t dim, int64_t kernel, int64_t left,
                    const float* w, const float* bias, float* out) override {
    mine(u, "segment_conv"), mine(w, "segment_conv weight"), mine(out, "segment_conv");
    if (bias) mine(bias, "segment_conv bias");
    run("segment_conv", [this](const float* u, const HostWords& seg, int64_t dim, int64_t kernel, int64_t left,
                               const float* w, const float* bias, float* out) {
      ReferenceBackend::segment_conv(u, seg.v, dim, kernel, left, w, bias, out);
    }, u, HostWords{{seg.begin(), seg.end()}}, dim, kernel, left, w, bias, out);
  }
  void activation(const float* x, int64_t n, Activation f, float* out) override {
    mine(x, "activation"), mine(out, "activation");
    run("activation", [this](const float* x, int64_t n, int64_t f, float* out) {
      ReferenceBackend::activation(x, n, static_cast<Activation>(f), out);
    }, x, n, static_cast<int64_t>(f), out);
  }
  void glu(const float* x, int64_t rows, int64_t cols, float* out) override {
    mine(x, "glu"), mine(out, "glu");
    run("glu", [this](const float* x, int64_t rows, int64_t cols, float* out) {
      ReferenceBackend::glu(x, rows, cols, out);
    }, x, rows, cols, out);
  }
  void conv2d(const float* x, const Conv2d& c, const float* w, const float* bias, float* out) override {
    check_conv2d(c, "fake-device");  // now, not when a queued op runs
    mine(x, "conv2d"), mine(w, "conv2d weight"), mine(out, "conv2d");
    if (bias) mine(bias, "conv2d bias");
    run("conv2d", [this](const float* x, const HostWords& seg, const HostWords& shape, const float* w,
                         const float* bias, float* out) {
      const Conv2d c{seg.v, shape.v[0], shape.v[1], shape.v[2] != 0, shape.v[3], shape.v[4], shape.v[5]};
      ReferenceBackend::conv2d(x, c, w, bias, out);
    }, x, HostWords{{c.seg.begin(), c.seg.end()}},
        HostWords{{c.width, c.channels, c.depthwise ? 1 : 0, c.kernel, c.stride, c.pad}}, w, bias, out);
  }
  void rel_pos_attention(const float* q, const float* k, const float* v, const float* pos, const float* bias_u,
                         const float* bias_v, const RelPosAttention& a, float* out) override {
    check_rel_pos_attention(a, "fake-device");
    mine(q, "rel_pos_attention"), mine(k, "rel_pos_attention"), mine(v, "rel_pos_attention"),
        mine(pos, "rel_pos_attention positions"), mine(bias_u, "rel_pos_attention bias_u"),
        mine(bias_v, "rel_pos_attention bias_v"), mine(out, "rel_pos_attention");
    run("rel_pos_attention", [this](const float* q, const float* k, const float* v, const float* pos, const float* bu,
                                    const float* bv, const HostWords& seg, int64_t heads, int64_t hd, int64_t p0,
                                    float scale, float* out) {
      ReferenceBackend::rel_pos_attention(q, k, v, pos, bu, bv, RelPosAttention{seg.v, heads, hd, p0, scale}, out);
    }, q, k, v, pos, bias_u, bias_v, HostWords{{a.seg.begin(), a.seg.end()}}, a.n_heads, a.head_dim, a.max_relative,
        a.scale, out);
  }
  void moe_route(const float* logits, int64_t rows, int64_t n_experts, int64_t k, const float* selection_bias,
                 bool normalize, float scale, int32_t* experts, float* weights) override {
    mine(logits, "moe_route"), mine(selection_bias, "moe_route bias"), mine(experts, "moe_route"),
        mine(weights, "moe_route");
    run("moe_route", [this](const float* logits, int64_t rows, int64_t e, int64_t k, const float* bias, bool norm,
                            float scale, int32_t* experts, float* weights) {
      ReferenceBackend::moe_route(logits, rows, e, k, bias, norm, scale, experts, weights);
    }, logits, rows, n_experts, k, selection_bias, normalize, scale, experts, weights);
  }
  void moe_combine(const float* x, const int32_t* src, const float* weights, int64_t rows, int64_t k, int64_t cols,
                   float* out) override {
    mine(x, "moe_combine"), mine(src, "moe_combine"), mine(weights, "moe_combine"), mine(out, "moe_combine");
    run("moe_combine", [this](const float* x, const int32_t* src, const float* w, int64_t rows, int64_t k, int64_t cols,
                              float* out) { ReferenceBackend::moe_combine(x, src, w, rows, k, cols, out); },
        x, src, weights, rows, k, cols, out);
  }

  void moe_group(const int32_t* experts, int64_t rows, int64_t k, int64_t n_experts, int32_t* first, int32_t* index,
                 int32_t* src) override {
    mine(experts, "moe_group"), mine(first, "moe_group first"), mine(index, "moe_group index"), mine(src, "moe_group src");
    run("moe_group", [this](const int32_t* experts, int64_t rows, int64_t k, int64_t e, int32_t* first, int32_t* index,
                            int32_t* src) { ReferenceBackend::moe_group(experts, rows, k, e, first, index, src); },
        experts, rows, k, n_experts, first, index, src);
  }
  // `first` is read where it is, inside the op (as a GPU kernel would), and each expert's rows
  // go through matmul (run inside this op).
  void moe_matmul(const float* x, const int32_t* first, std::span<const TensorView* const> ws, int64_t rows,
                  float* y) override {
    mine(x, "moe_matmul x"), mine(first, "moe_matmul first"), mine(y, "moe_matmul y");
    HostWords experts;
    for (const TensorView* w : ws) experts.v.push_back(reinterpret_cast<intptr_t>(w));
    run("moe_matmul", [this](const float* x, const int32_t* first, const HostWords& ws, int64_t rows, float* y) {
      const int64_t E = static_cast<int64_t>(ws.v.size());
      LFM_CHECK(first[0] == 0 && first[E] == rows, "fake-device: moe_matmul's groups do not cover ", rows, " rows");
      const auto* w0 = reinterpret_cast<const TensorView*>(ws.v[0]);
      const int64_t cols = w0->shape[1], out = w0->shape[0];
      for (int64_t e = 0; e < E; ++e)
        if (first[e + 1] > first[e])
          matmul(x + first[e] * cols, first[e + 1] - first[e], *reinterpret_cast<const TensorView*>(ws.v[e]),
                 y + first[e] * out);
    }, x, first, experts, rows, y);
  }

  void argmax_rows(const float* logits, int64_t rows, int64_t vocab, const uint8_t* allowed, int32_t* ids) override {
    mine(logits, "argmax_rows logits"), mine(allowed, "argmax_rows allowed"), mine(ids, "argmax_rows ids");
    run("argmax_rows", [this](const float* logits, int64_t rows, int64_t vocab, const uint8_t* allowed, int32_t* ids) {
      ReferenceBackend::argmax_rows(logits, rows, vocab, allowed, ids);
    }, logits, rows, vocab, allowed, ids);
  }

  void edit_logits(float* logits, int64_t vocab, const LogitEdit* edits, int64_t n) override {
    mine(logits, "edit_logits logits"), mine(edits, "edit_logits edits");
    run("edit_logits", [this](float* logits, int64_t vocab, const LogitEdit* edits, int64_t n) {
      ReferenceBackend::edit_logits(logits, vocab, edits, n);
    }, logits, vocab, edits, n);
  }
  void top_candidates(const float* logits, int64_t vocab, const CandidateRow* rows, int64_t count,
                      const uint8_t* allowed, int64_t n, Candidate* best, float* tail) override {
    mine(logits, "top_candidates logits"), mine(rows, "top_candidates rows"), mine(allowed, "top_candidates allowed");
    mine(best, "top_candidates best"), mine(tail, "top_candidates tail");
    run("top_candidates", [this](const float* logits, int64_t vocab, const CandidateRow* rows, int64_t count,
                                 const uint8_t* allowed, int64_t n, Candidate* best, float* tail) {
      ReferenceBackend::top_candidates(logits, vocab, rows, count, allowed, n, best, tail);
    }, logits, vocab, rows, count, allowed, n, best, tail);
  }

  void logsumexp_rows(const float* logits, int64_t vocab, const int32_t* rows, int64_t count, double* out) override {
    mine(logits, "logsumexp_rows logits"), mine(rows, "logsumexp_rows rows"), mine(out, "logsumexp_rows out");
    run("logsumexp_rows", [this](const float* logits, int64_t vocab, const int32_t* rows, int64_t count, double* out) {
      ReferenceBackend::logsumexp_rows(logits, vocab, rows, count, out);
    }, logits, vocab, rows, count, out);
  }

  int uploads = 0, downloads = 0, allocations = 0;
  size_t downloaded_bytes = 0;

 private:
  static ReplayQueue::Options replay_options(bool replay) {
    ReplayQueue::Options o;
    o.enabled = replay;
    return o;
  }
  // fn(args...) with the arena open: at once, or queued (replay). A reference op that calls
  // another op (mul_rows calls mul) runs that one inside itself, not queued after it.
  template <typename Fn, typename... Args>
  void run(const char* name, Fn fn, const Args&... args) {
    if (inside_op_ > 0) {
      fn(args...);
      return;
    }
    queue_.enqueue(name, [this, fn](const Args&... a) {
      Open open(*live_);
      struct Inside {
        int& depth;
        explicit Inside(int& d) : depth(d) { ++depth; }
        ~Inside() { --depth; }
      } inside(inside_op_);
      fn(a...);
    }, args...);
  }
  // The step's runs as begin_step uploaded them.
  const int64_t* step_runs() const {
    LFM_CHECK(runs_words_ > 0, "fake-device: a state op before begin_step");
    return runs_buf_.as<const int64_t>();
  }
  // SeqRuns read back from uploaded words (with the arena open).
  struct Runs {
    explicit Runs(const int64_t* w) {
      const int64_t n = *w++;
      blocks.resize(static_cast<size_t>(n));
      ckpts.resize(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) {
        SeqRun r;
        r.row0 = w[0], r.n_rows = w[1], r.pos0 = w[2], r.conv_slot = static_cast<int32_t>(w[3]);
        const int64_t nb = w[4], nc = w[5];
        w += 6;
        for (int64_t b = 0; b < nb; ++b) blocks[i].push_back(static_cast<int32_t>(*w++));
        for (int64_t c = 0; c < nc; ++c, w += 2) ckpts[i].push_back({w[0], static_cast<int32_t>(w[1])});
        runs.push_back(r);
      }
      for (size_t i = 0; i < runs.size(); ++i) runs[i].blocks = blocks[i], runs[i].checkpoints = ckpts[i];
    }
    std::vector<SeqRun> runs;
    std::vector<std::vector<int32_t>> blocks;
    std::vector<std::vector<ConvCheckpoint>> ckpts;
  };

  struct Copies : PreparedWeights {
    std::vector<DeviceBuffer> buffers;
  };
  // The allocations (start → size), in one arena of address space reserved up front and mapped
  // PROT_NONE; `open` counts the ops running (nested ones too) while it is readable. Shared with
  // the allocations, so one outliving the backend (a model's weight copies) still removes itself.
  struct Live {
    static constexpr size_t kArenaBytes = size_t{64} << 30;  // address space only (MAP_NORESERVE)
    Live() {
      void* p = mmap(nullptr, kArenaBytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      LFM_CHECK(p != MAP_FAILED, "fake-device: could not reserve the arena");
      base = static_cast<uint8_t*>(p);
    }
    ~Live() { munmap(base, kArenaBytes); }
    void protect(size_t from, size_t to) {  // the mu holder; [from, to) to the current access
      if (to > from) mprotect(base + from, to - from, open > 0 ? PROT_READ | PROT_WRITE : PROT_NONE);
    }
    std::mutex mu;
    std::map<uintptr_t, size_t> ranges;
    uint8_t* base = nullptr;
    size_t used = 0;  // bump allocation: addresses are never reused, so a stale pointer stays caught
    int open = 0;
  };
  class Tracked final : public DeviceAllocation {
   public:
    Tracked(size_t bytes, std::shared_ptr<Live> live, std::shared_ptr<FreeGate> gate)
        : live_(std::move(live)), gate_(std::move(gate)) {
      const size_t page = 4096, span = (bytes + page - 1) / page * page;
      std::lock_guard lock(live_->mu);
      LFM_CHECK(live_->used + span <= Live::kArenaBytes, "fake-device: arena exhausted");
      data_ = live_->base + live_->used;
      size_ = bytes;
      span_ = span;
      live_->used += span;
      live_->protect(live_->used - span, live_->used);
      live_->ranges[reinterpret_cast<uintptr_t>(data_)] = size_;
    }
    ~Tracked() override {
      gate_->release([live = live_, data = data_, span = span_] {
        std::lock_guard lock(live->mu);
        live->ranges.erase(reinterpret_cast<uintptr_t>(data));
        madvise(data, span, MADV_DONTNEED);  // give the pages back; the addresses stay reserved
      });
    }

   private:
    std::shared_ptr<Live> live_;
    std::shared_ptr<FreeGate> gate_;
    size_t span_ = 0;
  };
  // While an op runs, the arena is readable (mapped memory is zero until written, as allocate promises).
  class Open {
   public:
    explicit Open(Live& live) : live_(live) {
      std::lock_guard lock(live_.mu);
      if (live_.open++ == 0) live_.protect(0, live_.used);
    }
    ~Open() {
      std::lock_guard lock(live_.mu);
      if (--live_.open == 0) live_.protect(0, live_.used);
    }

   private:
    Live& live_;
  };
  // Null is allowed (optional inputs); anything else must point into a live allocation of ours.
  void mine(const void* p, const char* what) {
    if (!p) return;
    const auto a = reinterpret_cast<uintptr_t>(p);
    std::lock_guard lock(live_->mu);
    auto it = live_->ranges.upper_bound(a);
    LFM_CHECK(it != live_->ranges.begin() && a < std::prev(it)->first + std::prev(it)->second, "fake-device: ", what,
              " received a pointer outside the backend's memory");
  }
  std::shared_ptr<Live> live_ = std::make_shared<Live>();
  DeviceBuffer runs_buf_;  // replay: the step's runs (begin_step)
  int64_t runs_words_ = 0;
  int inside_op_ = 0;  // ops running now (see run)
  HostOpGraphs graphs_;
  ReplayQueue queue_;  // after what its ops use; flushed by the destructor
};

}  // namespace lfm::test
