#include "model/model.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <exception>
#include <mutex>
#include <system_error>
#include <thread>
#include <filesystem>

#include "core/error.h"
#include "formats/safetensors.h"
#include "kernels/weight_pack.h"
#include "model/gguf_model.h"

namespace lfm {

std::vector<float> rope_inverse_frequencies(double theta, int64_t head_dim) {
  // torch: 1.0 / (base ** (arange(0, dim, 2).float() / dim)), all in float32.
  std::vector<float> inv(static_cast<size_t>(head_dim / 2));
  for (int64_t j = 0; j < head_dim / 2; ++j) {
    const float expo = static_cast<float>(2 * j) / static_cast<float>(head_dim);
    const float p =
        static_cast<float>(std::pow(static_cast<double>(static_cast<float>(theta)), static_cast<double>(expo)));
    inv[j] = 1.0f / p;
  }
  return inv;
}

Model::Model(ModelConfig cfg, std::unique_ptr<TensorSource> source, const LoadOptions& options)
    : cfg_(std::move(cfg)), source_(std::move(source)) {
  weights_ = bind_weights(cfg_, *source_);
  if (options.bf16_activations) set_bf16_activations();
  if (options.pack) pack_matrices();
  int64_t n_conv = 0, n_attn = 0;
  for (LayerKind k : cfg_.layer_kinds) slot_.push_back(k == LayerKind::Conv ? n_conv++ : n_attn++);
  inv_freq_ = rope_inverse_frequencies(cfg_.rope_theta, cfg_.head_dim);
}

namespace {

// Every matrix that matmul reads. The embedding table is not among them (rows are looked up as
// stored); a tied lm_head is its own view of the same bytes and is.
template <typename F>
void for_each_matmul_weight(ModelWeights& w, F&& f) {
  f(w.lm_head);
  for (LayerWeights& l : w.layers) {
    for (TensorView* t : {&l.conv.in_proj, &l.conv.out_proj, &l.attn.q, &l.attn.k, &l.attn.v, &l.attn.out, &l.ffn.w1,
                          &l.ffn.w3, &l.ffn.w2, &l.moe.router})
      f(*t);
    for (FfnWeights& e : l.moe.experts)
      for (TensorView* t : {&e.w1, &e.w3, &e.w2}) f(*t);
  }
}

}  // namespace

// Copies the matrices the CPU kernels read faster in another layout (kernels/weight_pack.h) and
// lets the source drop the originals' pages, so resident memory stays about one model's worth.
// The copies share one buffer: it is large enough to be all huge pages (core/aligned_buffer.h),
// and no copy leaves a partly used page behind.
void Model::pack_matrices() {
  std::vector<TensorView*> todo;
  std::vector<PackedLayout> layouts;
  for_each_matmul_weight(weights_, [&](TensorView& t) {
    const PackedLayout layout = t.data ? cpu_packed_layout(t) : PackedLayout::kNone;
    if (layout == PackedLayout::kNone) return;
    todo.push_back(&t);
    layouts.push_back(layout);
  });
  std::vector<size_t> offsets(todo.size() + 1, 0);
  for (size_t i = 0; i < todo.size(); ++i)
    offsets[i + 1] = offsets[i] + (packed_size(layouts[i], *todo[i]) + 63) / 64 * 64;
  packed_ = AlignedBuffer(offsets.back());
  auto* arena = static_cast<uint8_t*>(packed_.data());
  const void* embed = weights_.embed.data;
  // Tensors are independent: one worker per core takes the next one, and hands the original's
  // pages back as soon as its copy exists (resident memory stays near one model's worth).
  std::atomic<size_t> next{0};
  std::exception_ptr error;
  std::mutex error_mu;
  auto worker = [&] {
    for (size_t i; (i = next++) < todo.size();) {
      try {
        pack_weight_into(layouts[i], *todo[i], arena + offsets[i]);
        if (todo[i]->data != embed) source_->drop_pages(*todo[i]);  // embedding lookups read a tied table
      } catch (...) {
        std::lock_guard lock(error_mu);
        error = std::current_exception();
      }
    }
  };
  std::vector<std::thread> threads;
  const unsigned n_threads = std::max(1u, std::thread::hardware_concurrency());
  threads.reserve(n_threads - 1);
  try {
    for (unsigned k = 1; k < n_threads; ++k) threads.emplace_back(worker);
  } catch (const std::system_error&) {
    // The OS refused a thread: the ones started (and this one) share the work.
  }
  worker();
  for (auto& th : threads) th.join();
  if (error) std::rethrow_exception(error);
  for (size_t i = 0; i < todo.size(); ++i) {
    todo[i]->packed = arena + offsets[i];
    todo[i]->packed_layout = layouts[i];
    packed_ranges_.push_back({arena + offsets[i], offsets[i + 1] - offsets[i]});
    packed_sources_.push_back({todo[i]->data, todo[i]->nbytes});
  }
}

// Before packing: the layout a matrix gets depends on its act_type (weight_pack.h).
void Model::set_bf16_activations() {
  for_each_matmul_weight(weights_, [&](TensorView& t) {
    if (t.dtype != DType::BF16) return;
    t.act_type = DType::BF16;
    bf16_activations_ = true;
  });
}

size_t Model::packed_bytes() const { return packed_.size(); }

std::vector<std::pair<const void*, size_t>> Model::read_ranges() const {
  using Span = std::pair<uintptr_t, uintptr_t>;  // [begin, end) addresses
  std::vector<Span> replaced;
  for (const auto& [p, n] : packed_sources_) replaced.push_back({reinterpret_cast<uintptr_t>(p), reinterpret_cast<uintptr_t>(p) + n});
  std::sort(replaced.begin(), replaced.end());
  std::vector<std::pair<const void*, size_t>> out = packed_ranges_;
  for (const auto& name : source_->names()) {
    const TensorView* t = source_->find(name);
    uintptr_t at = reinterpret_cast<uintptr_t>(t->data);
    const uintptr_t end = at + t->nbytes;
    for (const Span& r : replaced) {  // in address order: keep the pieces between replaced spans
      if (r.first >= end) break;
      if (r.second <= at) continue;
      if (r.first > at) out.push_back({reinterpret_cast<const void*>(at), r.first - at});
      at = std::max(at, r.second);
    }
    if (end > at) out.push_back({reinterpret_cast<const void*>(at), end - at});
  }
  return out;
}

int64_t Model::parameter_count() const {
  int64_t n = 0;
  for (const auto& name : source_->names()) n += source_->find(name)->numel();
  return n;
}

size_t Model::weight_bytes() const {
  size_t n = 0;
  for (const auto& name : source_->names()) n += source_->find(name)->nbytes;
  return n;
}

size_t Model::expert_bytes() const {
  size_t n = 0;
  for (const LayerWeights& l : weights_.layers)
    for (const FfnWeights& e : l.moe.experts)
      for (const TensorView* t : {&e.w1, &e.w3, &e.w2}) n += t->packed ? packed_size(t->packed_layout, *t) : t->nbytes;
  return n;
}

size_t Model::read_bytes() const {
  size_t n = 0;
  for (const auto& range : read_ranges()) n += range.second;
  return n;
}

std::unique_ptr<Model> load_model(const std::string& path, const LoadOptions& options) {
  namespace fs = std::filesystem;
  LFM_CHECK(fs::exists(path), "model: '", path, "' does not exist");
  if (fs::is_regular_file(path)) {
    LFM_CHECK(is_gguf_path(path), "model: '", path,
              "' is a file but not a .gguf; pass a checkpoint folder or a GGUF file");
    return load_gguf_model(path, options);
  }
  ModelConfig cfg = load_model_config((fs::path(path) / "config.json").string());
  auto src = std::make_unique<SafetensorsCheckpoint>(path);
  return std::make_unique<Model>(std::move(cfg), std::move(src), options);
}

}  // namespace lfm
