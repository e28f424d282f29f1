// The CUDA backend's weight arena (kernels/cuda/cuda_weights.h), host side: one copy of each
// buffer (a tied table and lm_head share it), 256-byte aligned places, quantized tensors in the
// split-block layout, plain ones and vectors as stored, every view pointed at its copy. Runs
// without a GPU (the uploads are memcpys into a host arena here).
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "core/error.h"
#include "kernels/cuda/cuda_weights.h"
#include "kernels/split_blocks.h"

namespace lfm {
namespace {

TensorView view(DType t, std::vector<int64_t> shape, const std::vector<uint8_t>& bytes) {
  TensorView v;
  v.dtype = t;
  v.shape = std::move(shape);
  v.data = bytes.data();
  v.nbytes = bytes.size();
  return v;
}

std::vector<uint8_t> pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(seed + i * 7);
  return v;
}

TEST(CudaWeightArena, EachBufferOnceAlignedSplitWhereQuantized) {
  const auto q4 = pattern(5 * 3 * 18, 1), bf = pattern(3 * 40 * 2, 2), emb = pattern(7 * 2 * 34, 3);
  TensorView w_q4 = view(DType::Q4_0, {5, 96}, q4), w_bf = view(DType::BF16, {3, 40}, bf);
  TensorView table = view(DType::Q8_0, {7, 64}, emb), lm_head = view(DType::Q8_0, {7, 64}, emb);  // tied
  WeightVector norm;
  norm.host = {1.0f, 2.0f, 3.0f};
  WeightSet set;
  set.matrices = {&w_q4, &w_bf, &lm_head};
  set.tables = {&table};
  set.vectors = {&norm};

  const cuda::WeightArena plan = cuda::plan_weight_arena(set);
  EXPECT_EQ(plan.offset_of.size(), 4u);  // q4, bf16, the tied Q8_0 bytes once, the vector
  EXPECT_EQ(cuda::device_weight_bytes(w_q4), 5 * split_row_bytes(DType::Q4_0, 96));
  EXPECT_EQ(cuda::device_weight_bytes(w_bf), bf.size());
  for (const auto& [p, off] : plan.offset_of) EXPECT_EQ(off % 256, 0u);

  std::vector<uint8_t> arena(plan.bytes, 0xEE);
  int syncs = 0;
  cuda::fill_weight_arena(
      set, plan, arena.data(), [](void* dst, const void* src, size_t n) { std::memcpy(dst, src, n); }, [&] { ++syncs; });
  EXPECT_EQ(syncs, 2);  // after each split tensor (the Q4_0 matrix, the Q8_0 bytes)
  EXPECT_EQ(lm_head.packed, table.packed);
  EXPECT_EQ(w_q4.packed_layout, PackedLayout::kDevice);
  EXPECT_EQ(table.packed_layout, PackedLayout::kDevice);

  std::vector<uint8_t> want(cuda::device_weight_bytes(w_q4));
  split_rows(DType::Q4_0, q4.data(), 5, 96, want.data());
  EXPECT_EQ(0, std::memcmp(w_q4.packed, want.data(), want.size()));
  want.resize(cuda::device_weight_bytes(table));
  split_rows(DType::Q8_0, emb.data(), 7, 64, want.data());
  EXPECT_EQ(0, std::memcmp(table.packed, want.data(), want.size()));
  EXPECT_EQ(0, std::memcmp(w_bf.packed, bf.data(), bf.size()));
  EXPECT_EQ(0, std::memcmp(norm.device, norm.host.data(), 3 * sizeof(float)));
}

TEST(CudaWeightArena, RefusesMismatchedViewsOfOneBuffer) {
  const auto bytes = pattern(4 * 34, 9);
  TensorView a = view(DType::Q8_0, {4, 32}, bytes), b = view(DType::Q8_0, {2, 64}, bytes);
  WeightSet two_views;
  two_views.matrices = {&a, &b};  // 4 rows of 32 and 2 of 64: different split sizes
  try {
    cuda::plan_weight_arena(two_views);
    FAIL() << "planned";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("two tensors of different sizes"), std::string::npos) << e.what();
  }
  TensorView short_view = view(DType::Q4_0, {4, 64}, bytes);  // 4 x 64 Q4_0 needs 144 bytes, has 136
  try {
    cuda::device_weight_bytes(short_view);
    FAIL() << "sized";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("holds 136 bytes"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace lfm
