#include "kernels/cuda/cuda_weights.h"

#include <vector>

#include "core/error.h"
#include "kernels/split_blocks.h"

namespace lfm::cuda {

size_t device_weight_bytes(const TensorView& t) {
  if (!split_block(t.dtype).valid()) return t.nbytes;
  LFM_CHECK(!t.shape.empty() && t.shape.back() > 0, "cuda: a ", dtype_name(t.dtype), " weight of shape ",
            shape_str(t.shape), " has no rows to upload");
  const int64_t cols = t.shape.back();
  LFM_CHECK(t.nbytes == static_cast<size_t>(t.rows()) * dtype_row_bytes(t.dtype, cols), "cuda: a ",
            dtype_name(t.dtype), " weight of shape ", shape_str(t.shape), " holds ", t.nbytes, " bytes");
  return static_cast<size_t>(t.rows()) * split_row_bytes(t.dtype, cols);
}

WeightArena plan_weight_arena(const WeightSet& set) {
  WeightArena a;
  std::unordered_map<const void*, size_t> size_of;
  auto place = [&](const void* p, size_t n) {
    if (a.offset_of.emplace(p, a.bytes).second) {
      size_of[p] = n;
      a.bytes += (n + 255) / 256 * 256;
    }
    LFM_CHECK(size_of.at(p) == n, "cuda: one weight buffer is read as two tensors of different sizes");
  };
  for (const TensorView* t : set.matrices) place(t->data, device_weight_bytes(*t));
  for (const TensorView* t : set.tables) place(t->data, device_weight_bytes(*t));
  for (const WeightVector* v : set.vectors) place(v->host.data(), v->size() * sizeof(float));
  return a;
}

void fill_weight_arena(WeightSet& set, const WeightArena& arena, uint8_t* base,
                       const std::function<void(void*, const void*, size_t)>& upload, const std::function<void()>& sync) {
  std::unordered_map<const void*, bool> sent;
  std::vector<uint8_t> split;
  auto send = [&](const void* p, size_t n, DType type = DType::F32, int64_t rows = 0, int64_t cols = 0) {
    uint8_t* dst = base + arena.offset_of.at(p);
    if (sent[p]) return dst;
    sent[p] = true;
    if (!split_block(type).valid()) {
      upload(dst, p, n);
      return dst;
    }
    split.resize(static_cast<size_t>(rows) * split_row_bytes(type, cols));
    split_rows(type, p, rows, cols, split.data());
    upload(dst, split.data(), split.size());
    sync();  // `split` is refilled for the next tensor
    return dst;
  };
  for (auto* list : {&set.matrices, &set.tables})
    for (TensorView* t : *list) {
      t->packed = send(t->data, t->nbytes, t->dtype, t->rows(), t->shape.back());
      t->packed_layout = PackedLayout::kDevice;
    }
  for (WeightVector* v : set.vectors)
    v->device = reinterpret_cast<const float*>(send(v->host.data(), v->size() * sizeof(float)));
}

}  // namespace lfm::cuda
