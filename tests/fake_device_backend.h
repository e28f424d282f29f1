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

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "core/error.h"
#include "kernels/reference_backend.h"

namespace lfm::test {

class FakeDeviceBackend final : public ReferenceBackend {
 public:
  using ReferenceBackend::ReferenceBackend;
  const char* name() const override { return "fake-device"; }
  bool host_memory() const override { return false; }

  DeviceBuffer allocate(size_t bytes) override {
    if (bytes == 0) return DeviceBuffer();
    ++allocations;
    return DeviceBuffer(std::make_unique<Tracked>(bytes, live_));
  }
  void upload(void* dst, const void* src, size_t bytes) override {
    Open open(*live_);
    ++uploads;
    mine(dst, "upload");
    ReferenceBackend::upload(dst, src, bytes);
  }
  void download(void* dst, const void* src, size_t bytes) override {
    Open open(*live_);
    ++downloads;
    mine(src, "download");
    ReferenceBackend::download(dst, src, bytes);
  }
  void copy(void* dst, const void* src, size_t bytes) override {
    Open open(*live_);
    mine(dst, "copy");
    mine(src, "copy");
    ReferenceBackend::copy(dst, src, bytes);
  }
  void fill_zero(void* dst, size_t bytes) override {
    Open open(*live_);
    mine(dst, "fill_zero");
    ReferenceBackend::fill_zero(dst, bytes);
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

  void matmul(const float* x, int64_t n, const TensorView& w, float* y) override {
    Open open(*live_);
    mine(x, "matmul x"), mine(y, "matmul y");
    ReferenceBackend::matmul(x, n, w, y);
  }
  void matmul_shared(const float* x, int64_t n, std::span<const TensorView* const> ws,
                     std::span<float* const> ys) override {
                       Open open(*live_);
    mine(x, "matmul_shared x");
    for (float* y : ys) mine(y, "matmul_shared y");
    ReferenceBackend::matmul_shared(x, n, ws, ys);
  }
  void matmul_jobs(std::span<const MatmulJob> jobs) override {
    Open open(*live_);
    for (const MatmulJob& j : jobs) mine(j.x, "matmul_jobs x"), mine(j.y, "matmul_jobs y");
    ReferenceBackend::matmul_jobs(jobs);
  }
  void embedding(const TensorView& table, const int32_t* ids, int64_t n, float* out) override {
    Open open(*live_);
    mine(ids, "embedding ids"), mine(out, "embedding out");
    ReferenceBackend::embedding(table, ids, n, out);
  }
  void rms_norm(const float* x, const float* w, int64_t rows, int64_t dim, float eps, float* out) override {
    Open open(*live_);
    mine(x, "rms_norm x"), mine(w, "rms_norm weight"), mine(out, "rms_norm out");
    ReferenceBackend::rms_norm(x, w, rows, dim, eps, out);
  }
  void rope_neox(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim, const int64_t* positions,
                 const float* inv_freq) override {
                   Open open(*live_);
    mine(x, "rope x"), mine(positions, "rope positions"), mine(inv_freq, "rope inv_freq");
    ReferenceBackend::rope_neox(x, n_tokens, n_heads, head_dim, positions, inv_freq);
  }
  void kv_write(const KvPool& pool, std::span<const SeqRun> runs, const float* k, const float* v) override {
    Open open(*live_);
    mine(pool.k, "kv_write pool"), mine(pool.v, "kv_write pool"), mine(k, "kv_write k"), mine(v, "kv_write v");
    ReferenceBackend::kv_write(pool, runs, k, v);
  }
  void attention(const float* q, const KvPool& pool, std::span<const SeqRun> runs, int64_t n_heads, float scale,
                 float* out) override {
                   Open open(*live_);
    mine(q, "attention q"), mine(pool.k, "attention pool"), mine(out, "attention out");
    ReferenceBackend::attention(q, pool, runs, n_heads, scale, out);
  }
  void short_conv(const float* u, const ConvPool& pool, std::span<const SeqRun> runs, int64_t kernel, const float* w,
                  const float* bias, float* out) override {
                    Open open(*live_);
    mine(u, "short_conv u"), mine(pool.state, "short_conv state"), mine(w, "short_conv taps"),
        mine(bias, "short_conv bias"), mine(out, "short_conv out");
    if (pool.snapshots) mine(pool.snapshots, "short_conv snapshots");
    ReferenceBackend::short_conv(u, pool, runs, kernel, w, bias, out);
  }
  void swiglu(const float* gate, const float* up, int64_t n, float* out) override {
    Open open(*live_);
    mine(gate, "swiglu"), mine(up, "swiglu"), mine(out, "swiglu");
    ReferenceBackend::swiglu(gate, up, n, out);
  }
  void mul(const float* a, const float* b, int64_t n, float* out) override {
    Open open(*live_);
    mine(a, "mul"), mine(b, "mul"), mine(out, "mul");
    ReferenceBackend::mul(a, b, n, out);
  }
  void softmax(float* x, int64_t n) override {
    Open open(*live_);
    mine(x, "softmax");
    ReferenceBackend::softmax(x, n);
  }
  void add(float* y, const float* x, int64_t n) override {
    Open open(*live_);
    mine(y, "add"), mine(x, "add");
    ReferenceBackend::add(y, x, n);
  }
  void mul_rows(const float* a, int64_t lda, const float* b, int64_t ldb, int64_t rows, int64_t cols, float* out,
                int64_t ldo) override {
                  Open open(*live_);
    mine(a, "mul_rows"), mine(b, "mul_rows"), mine(out, "mul_rows");
    ReferenceBackend::mul_rows(a, lda, b, ldb, rows, cols, out, ldo);
  }
  void add_bias(float* y, const float* bias, int64_t rows, int64_t cols) override {
    Open open(*live_);
    mine(y, "add_bias"), mine(bias, "add_bias bias");
    ReferenceBackend::add_bias(y, bias, rows, cols);
  }
  void gather_rows(const float* x, int64_t cols, const int32_t* index, int64_t n, float* out) override {
    Open open(*live_);
    mine(x, "gather_rows"), mine(index, "gather_rows index"), mine(out, "gather_rows");
    ReferenceBackend::gather_rows(x, cols, index, n, out);
  }
  void layer_norm(const float* x, const float* w, const float* b, int64_t rows, int64_t dim, float eps,
                  float* out) override {
    Open open(*live_);
    mine(x, "layer_norm"), mine(w, "layer_norm weight"), mine(out, "layer_norm");
    if (b) mine(b, "layer_norm bias");
    ReferenceBackend::layer_norm(x, w, b, rows, dim, eps, out);
  }
  void gelu(const float* x, int64_t n, bool tanh_approximation, float* out) override {
    Open open(*live_);
    mine(x, "gelu"), mine(out, "gelu");
    ReferenceBackend::gelu(x, n, tanh_approximation, out);
  }
  void segment_attention(const float* q, const float* k, const float* v, std::span<const int64_t> seg,
                         int64_t n_heads, int64_t head_dim, float scale, float* out) override {
    Open open(*live_);
    mine(q, "segment_attention"), mine(k, "segment_attention"), mine(v, "segment_attention"),
        mine(out, "segment_attention");
    ReferenceBackend::segment_attention(q, k, v, seg, n_heads, head_dim, scale, out);
  }
  void moe_route(const float* logits, int64_t rows, int64_t n_experts, int64_t k, const float* selection_bias,
                 bool normalize, float scale, int32_t* experts, float* weights) override {
                   Open open(*live_);
    mine(logits, "moe_route"), mine(selection_bias, "moe_route bias"), mine(experts, "moe_route"),
        mine(weights, "moe_route");
    ReferenceBackend::moe_route(logits, rows, n_experts, k, selection_bias, normalize, scale, experts, weights);
  }
  void moe_combine(const float* x, const int32_t* src, const float* weights, int64_t rows, int64_t k, int64_t cols,
                   float* out) override {
                     Open open(*live_);
    mine(x, "moe_combine"), mine(src, "moe_combine"), mine(weights, "moe_combine"), mine(out, "moe_combine");
    ReferenceBackend::moe_combine(x, src, weights, rows, k, cols, out);
  }

  void argmax_rows(const float* logits, int64_t rows, int64_t vocab, const uint8_t* allowed, int32_t* ids) override {
    Open open(*live_);
    mine(logits, "argmax_rows logits"), mine(allowed, "argmax_rows allowed"), mine(ids, "argmax_rows ids");
    ReferenceBackend::argmax_rows(logits, rows, vocab, allowed, ids);
  }

  int uploads = 0, downloads = 0, allocations = 0;

 private:
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
    Tracked(size_t bytes, std::shared_ptr<Live> live) : live_(std::move(live)) {
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
      std::lock_guard lock(live_->mu);
      live_->ranges.erase(reinterpret_cast<uintptr_t>(data_));
      madvise(data_, span_, MADV_DONTNEED);  // give the pages back; the addresses stay reserved
    }

   private:
    std::shared_ptr<Live> live_;
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
};

}  // namespace lfm::test
