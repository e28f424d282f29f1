// The SIMD backends against the portable reference: matmul for every weight type on awkward
// sizes (stated tolerance: float32 reassociation, 2e-5·√K relative; for the int8 kernels also
// the activation rounding bound Σ_blocks amax/254 · Σ|w|), the SIMD row decoders
// bit-exact (a matmul with unit vectors reads back each decoded weight), and bitwise batch /
// thread / sub-batch invariance for every type. Each test runs on every SIMD level the CPU has.
#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <cstring>
#include <random>

#include "convert/quant.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "kernels/cpu/bf16_pairs.h"
#include "kernels/cpu_backend.h"
#include "kernels/cpu_features.h"
#include "kernels/dequant.h"
#include "kernels/quant_blocks.h"
#include "kernels/reference_backend.h"
#include "kernels/weight_pack.h"
#include "test_util.h"

namespace lfm {
namespace {

using test::randn;

const DType kTypes[] = {DType::F32,  DType::F16,  DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q4_1,
                        DType::Q5_0, DType::Q5_1, DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K,
                        DType::Q8_K};

struct Weight {
  std::vector<uint8_t> bytes;
  TensorView view;
  AlignedBuffer packed;  // packed copy (kernels/weight_pack.h) when the test asks for one
};

Weight make_weight(DType dt, int64_t out, int64_t in, uint64_t seed) {
  const auto f = randn(out * in, seed);
  Weight w;
  const size_t row = dtype_row_bytes(dt, in);
  w.bytes.resize(row * out);
  if (dt == DType::Q3_K) {  // random blocks (every bit pattern is one; llama.cpp's files hold
    // more than our encoder writes, e.g. any scale beside the -32 of the largest) with d in
    // [0.005, 0.015)
    std::mt19937 rng(static_cast<uint32_t>(seed));
    for (auto& b : w.bytes) b = static_cast<uint8_t>(rng());
    for (size_t at = 0; at < w.bytes.size(); at += sizeof(quant::BlockQ3_K)) {
      const uint16_t d = f32_to_f16(0.005f + 0.01f * static_cast<float>(rng() % 1000) / 1000.0f);
      std::memcpy(w.bytes.data() + at + offsetof(quant::BlockQ3_K, d), &d, 2);
    }
  } else {
    for (int64_t r = 0; r < out; ++r) quantize_row(dt, f.data() + r * in, w.bytes.data() + r * row, in);
  }
  w.view = TensorView{dt, {out, in}, w.bytes.data(), w.bytes.size()};
  return w;
}

// The same weight with a packed copy attached, as the model prepares it at load: 16-row panels
// for the integer kernels, column pairs for BF16.
// F16 in column pairs too (the AMX kernel splits each value into bf16 hi + lo).
PackedLayout test_layout(DType dt) {
  return dt == DType::BF16 || dt == DType::F16 ? PackedLayout::kPairs16 : PackedLayout::kRows16;
}
bool test_packable(DType dt) { return dt == DType::BF16 || dt == DType::F16 || rows16_packable(dt); }
Weight make_packed_weight(DType dt, int64_t out, int64_t in, uint64_t seed) {
  Weight w = make_weight(dt, out, in, seed);
  w.packed = pack_weight(test_layout(dt), w.view);
  w.view.packed = w.packed.data();
  w.view.packed_layout = test_layout(dt);
  return w;
}

// A weight type, whether it has its packed copy, and what the matmul rounds its input to
// (TensorView::act_type).
struct Case {
  DType dt;
  bool packed;
  DType act = DType::F32;
};
// Every type, each packable type once more with its packed copy, and BF16 with bf16
// activations both ways (packed: VDPBF16PS or AMX with one term where the CPU has them).
std::vector<Case> type_cases() {
  std::vector<Case> v;
  for (DType dt : kTypes) v.push_back({dt, false});
  for (DType dt : kTypes)
    if (test_packable(dt)) v.push_back({dt, true});
  v.push_back({DType::BF16, false, DType::BF16});
  v.push_back({DType::BF16, true, DType::BF16});
  return v;
}
std::string case_name(DType dt, bool packed, DType act = DType::F32) {
  return std::string(dtype_name(dt)) + (packed ? " (packed)" : "") + (act == DType::BF16 ? " bf16 activations" : "");
}
Weight make_case_weight(const Case& c, int64_t out, int64_t in, uint64_t seed) {
  Weight w = c.packed ? make_packed_weight(c.dt, out, in, seed) : make_weight(c.dt, out, in, seed);
  w.view.act_type = c.act;
  return w;
}


// Types a backend multiplies with int8-quantized activations (the AVX-512 VNNI kernels).
bool integer_path(const std::string& isa, DType dt, bool packed = false) {
  if (isa == "avx2") return packed && rows16_packable(dt);  // simd_packed_avx2.inc
  return isa == "avx512" && (dt == DType::Q4_0 || dt == DType::Q8_0 || (packed && rows16_packable(dt)));
}

// The most the int8 activation rounding can move y[t, j]: Σ over 32-blocks of
// (amax_block / 254) · Σ_block |w|, plus float32 reassociation (2e-5·√K relative).
double int8_bound(const float* x, const float* w, int64_t K, double ref) {
  double b = 0;
  for (int64_t k0 = 0; k0 < K; k0 += 32) {
    double amax = 0, wsum = 0;
    for (int64_t k = k0; k < k0 + 32; ++k) {
      amax = std::max(amax, std::abs(double(x[k])));
      wsum += std::abs(double(w[k]));
    }
    b += amax / 254.0 * wsum;
  }
  return 1.01 * b + 2e-5 * std::sqrt(double(K)) * (1 + std::abs(ref));
}

class SimdKernelsTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (!isa_supported(parse_isa(GetParam()))) GTEST_SKIP() << "CPU lacks " << GetParam();
    simd_ = make_backend_for(parse_isa(GetParam()), pool_);
  }
  ThreadPool pool_{3};
  ReferenceBackend ref_{pool_};
  std::unique_ptr<Backend> simd_;
};

TEST_P(SimdKernelsTest, MatmulMatchesReferenceForEveryType) {
  for (const Case& c : type_cases()) {
    const auto [dt, packed, act] = c;
    const int64_t blk = dtype_traits(dt).block_elems;
    for (auto [n, out, in] : {std::tuple<int64_t, int64_t, int64_t>{1, 3, 1}, {5, 7, 9}, {6, 33, 41}, {9, 130, 77},
                              {4, 5, 300}, {17, 9, 520}, {8, 16, 64}, {23, 47, 96}, {40, 100, 128},
                              {1, 100, 96}, {1, 61, 256}, {3, 100, 64}, {7, 61, 64}}) {  // few tokens over 7 and 4 panels, the last partial
      const int64_t K = (in + blk - 1) / blk * blk;  // quantized rows need whole blocks
      const Weight w = make_case_weight(c, out, K, 100 + out);
      const auto x = randn(n * K, 200 + n);
      std::vector<float> a(n * out), b(n * out);
      ref_.matmul(x.data(), n, w.view, a.data());
      simd_->matmul(x.data(), n, w.view, b.data());
      std::vector<float> wrow(K);
      for (int64_t i = 0; i < n * out; ++i) {
        double tol = 2e-5 * std::sqrt(double(K)) * (1 + std::abs(a[i]));
        if (integer_path(GetParam(), dt, packed)) {
          dequantize_row(dt, w.view.row(i % out), wrow.data(), K);
          tol = int8_bound(x.data() + (i / out) * K, wrow.data(), K, a[i]);
        }  // packed BF16 (the AMX path where the CPU has it): float tolerance, see bf16_pairs.h;
           // bf16 activations: the reference rounds them too, so the same float tolerance
        ASSERT_NEAR(a[i], b[i], tol) << case_name(dt, packed, act) << " n=" << n << " out=" << out << " in=" << K << " at " << i;
      }
    }
  }
}

// matmul_shared (one input preparation, one parallel pass) gives bit for bit what separate
// matmul calls give: matrices of one packed type and different heights (q/k/v), mixed types
// (a Q4_K_M file's w1/w3 may differ), unpacked ones, and batches of 1 and 19 tokens.
TEST_P(SimdKernelsTest, SharedInputMatmulsEqualSeparateOnes) {
  const int64_t K = 256;
  for (auto [types, packed, act] : std::vector<std::tuple<std::vector<DType>, bool, DType>>{
           {{DType::Q4_0, DType::Q4_0, DType::Q4_0}, true, DType::F32},
           {{DType::Q4_K, DType::Q6_K}, true, DType::F32},
           {{DType::BF16, DType::BF16}, true, DType::F32},
           {{DType::F16, DType::F16, DType::BF16}, true, DType::F32},
           {{DType::BF16, DType::BF16, DType::BF16}, true, DType::BF16},
           {{DType::Q8_0, DType::Q8_0}, true, DType::F32},
           {{DType::F32, DType::F16}, false, DType::F32}}) {
    std::vector<Weight> ws;
    const int64_t heights[] = {67, 16, 33};
    for (size_t i = 0; i < types.size(); ++i) ws.push_back(make_case_weight({types[i], packed, act}, heights[i], K, 50 + i));
    for (int64_t n : {1, 19}) {
      const auto x = randn(n * K, 60 + n);
      std::vector<const TensorView*> views;
      std::vector<std::vector<float>> shared(ws.size()), alone(ws.size());
      std::vector<float*> outs;
      for (size_t i = 0; i < ws.size(); ++i) {
        views.push_back(&ws[i].view);
        shared[i].assign(n * heights[i], -1.0f);
        alone[i].resize(n * heights[i]);
        outs.push_back(shared[i].data());
        simd_->matmul(x.data(), n, ws[i].view, alone[i].data());
      }
      simd_->matmul_shared(x.data(), n, views, outs);
      for (size_t i = 0; i < ws.size(); ++i)
        ASSERT_EQ(std::memcmp(shared[i].data(), alone[i].data(), alone[i].size() * 4), 0)
            << case_name(types[i], packed, act) << " matrix " << i << " n=" << n;
    }
  }
}

// matmul_jobs (each job's input prepared apart, one parallel pass over all their matrices)
// gives bit for bit what separate matmul calls give: an MoE layer's experts, each on its own
// tokens (1 in decode, a few in a batch), of one packed type or mixed, of different widths, with
// a job of no rows, and with jobs 0 and 1 reading one input (an expert's w1 and w3; the input is
// prepared once where their types agree).
TEST_P(SimdKernelsTest, MatmulJobsEqualSeparateMatmuls) {
  for (auto [types, packed, act] : std::vector<std::tuple<std::vector<DType>, bool, DType>>{
           {{DType::Q4_0, DType::Q4_0, DType::Q4_0, DType::Q4_0}, true, DType::F32},
           {{DType::Q4_K, DType::Q6_K, DType::Q4_K}, true, DType::F32},
           {{DType::Q5_K, DType::Q5_K}, true, DType::F32},
           {{DType::BF16, DType::BF16, DType::BF16}, true, DType::F32},
           {{DType::F16, DType::BF16, DType::F16}, true, DType::F32},
           {{DType::BF16, DType::BF16}, true, DType::BF16},
           {{DType::Q8_0, DType::Q8_0, DType::Q8_0}, true, DType::F32},
           {{DType::F32, DType::F16}, false, DType::F32}}) {
    const int64_t heights[] = {67, 16, 33, 1}, widths[] = {256, 256, 512, 256};
    for (const std::vector<int64_t>& rows :
         std::vector<std::vector<int64_t>>{{1, 1, 1, 1}, {3, 1, 19, 2}, {2, 0, 5, 1}, {4, 4, 2, 3}}) {
      const bool share01 = rows[0] == rows[1];  // job 1 reads job 0's input (the same pointer)
      std::vector<Weight> ws;
      std::vector<std::vector<float>> xs, jobs_out, alone;
      std::vector<Backend::MatmulJob> jobs;
      for (size_t i = 0; i < types.size(); ++i) {
        ws.push_back(make_case_weight({types[i], packed, act}, heights[i], widths[i], 70 + i));
        xs.push_back(randn(rows[i] * widths[i], 80 + i));
        jobs_out.emplace_back(rows[i] * heights[i], -1.0f);
        alone.emplace_back(rows[i] * heights[i], -2.0f);
      }
      for (size_t i = 0; i < types.size(); ++i) {
        const float* x = (share01 && i == 1 ? xs[0] : xs[i]).data();
        jobs.push_back({x, rows[i], &ws[i].view, jobs_out[i].data()});
        simd_->matmul(x, rows[i], ws[i].view, alone[i].data());
      }
      simd_->matmul_jobs(jobs);
      for (size_t i = 0; i < types.size(); ++i) {
        if (alone[i].empty()) continue;  // a job of no rows has no output (and memcmp no null pointers)
        ASSERT_EQ(std::memcmp(jobs_out[i].data(), alone[i].data(), alone[i].size() * 4), 0)
            << case_name(types[i], packed, act) << " job " << i << " rows=" << rows[i];
      }
    }
  }
}

TEST_P(SimdKernelsTest, DecodersAreBitExact) {
  // x = the identity: y[t, j] = w[j, t] exactly (one non-zero lane, the rest sum zeros). Also
  // for the column-pair copies of F16 and BF16 (on AMX, F16's hi + lo split must give w back).
  for (const bool packed : {false, true})
  for (DType dt : kTypes) {
    if (integer_path(GetParam(), dt)) continue;  // multiplies quantized activations: no decode step
    if (packed && dt != DType::F16 && dt != DType::BF16) continue;
    const int64_t K = dtype_traits(dt).block_elems == 1 ? (packed ? 96 : 72) : 256, out = packed ? 21 : 5;
    Weight w = make_weight(dt, out, K, 31);
    if (packed && dt == DType::F16) {  // the values a split could get wrong: subnormals, ±0, the codes' extremes (|w| < 128)
      const uint16_t special[] = {0x0001, 0x03FF, 0x0200, 0x8000, 0x0000, 0x57FF, 0xD7FF, 0x0400, 0x3C01, 0x8007, 0x07FF};
      for (size_t i = 0; i < std::size(special); ++i) std::memcpy(w.bytes.data() + 2 * (i * 37 % (out * K)), &special[i], 2);
    }
    if (packed) {
      w.packed = pack_weight(test_layout(dt), w.view);
      w.view.packed = w.packed.data();
      w.view.packed_layout = test_layout(dt);
    }
    std::vector<float> eye(K * K, 0.0f), y(K * out), dec(K);
    for (int64_t t = 0; t < K; ++t) eye[t * K + t] = 1.0f;
    simd_->matmul(eye.data(), K, w.view, y.data());
    for (int64_t j = 0; j < out; ++j) {
      dequantize_row(dt, w.view.row(j), dec.data(), K);
      for (int64_t t = 0; t < K; ++t)
        ASSERT_EQ(y[t * out + j], dec[t]) << dtype_name(dt) << " row " << j << " element " << t;
    }
  }
}

TEST_P(SimdKernelsTest, RowsBitwiseIndependentOfBatchAndThreads) {
  // 203 columns, and 224 (whole 32-column blocks: the AMX tile path for packed BF16).
  for (int64_t cols : {203, 224})
  for (const Case& c : type_cases()) {
    const auto [dt, packed, act] = c;
    const int64_t blk = dtype_traits(dt).block_elems;
    const int64_t out = 67, in = (cols + blk - 1) / blk * blk, n = 19;
    const Weight w = make_case_weight(c, out, in, 7);
    const auto x = randn(n * in, 8);
    std::vector<float> all(n * out), one(out);
    simd_->matmul(x.data(), n, w.view, all.data());
    ThreadPool single(1);
    auto simd1 = make_backend_for(parse_isa(GetParam()), single);
    for (int64_t i = 0; i < n; ++i) {
      simd1->matmul(x.data() + i * in, 1, w.view, one.data());
      ASSERT_EQ(std::memcmp(one.data(), all.data() + i * out, out * 4), 0) << case_name(dt, packed, act) << " row " << i;
    }
    // Sub-batches of every size in the middle equal the same rows of the full batch (fused and
    // panel paths meet here: few tokens read the weights directly, many through panels).
    for (int64_t len : {2, 3, 4, 5, 6, 7, 8, 9, 13}) {
      std::vector<float> mid(len * out);
      simd_->matmul(x.data() + 2 * in, len, w.view, mid.data());
      ASSERT_EQ(std::memcmp(mid.data(), all.data() + 2 * out, mid.size() * 4), 0) << case_name(dt, packed, act) << " len " << len;
    }
  }
}

TEST_P(SimdKernelsTest, ElementwiseOpsMatchReference) {
  const auto g = randn(1003, 14, 6.0f), u = randn(1003, 15);
  std::vector<float> a(1003), b(1003);
  ref_.swiglu(g.data(), u.data(), 1003, a.data());
  simd_->swiglu(g.data(), u.data(), 1003, b.data());
  for (int i = 0; i < 1003; ++i) ASSERT_NEAR(a[i], b[i], 2e-6 * (1 + std::abs(a[i]))) << i;
  // Extreme gates: silu saturates without NaN.
  const std::vector<float> ext = {-200.f, -90.f, -88.5f, -87.f, 0.f, 30.f, 88.5f, 200.f, -1e30f};
  const std::vector<float> one(ext.size(), 1.0f);
  std::vector<float> e(ext.size());
  simd_->swiglu(ext.data(), one.data(), static_cast<int64_t>(ext.size()), e.data());
  for (size_t i = 0; i < ext.size(); ++i) {
    EXPECT_FALSE(std::isnan(e[i])) << ext[i];
    EXPECT_NEAR(e[i], ext[i] > 0 ? ext[i] : 0.0f, 1e-3 * std::abs(ext[i]) + 1e-6) << ext[i];
  }
  for (int dim : {1, 7, 64, 129, 2048}) {
    const auto x = randn(3 * dim, 5, 3.0f), w = randn(dim, 6);
    std::vector<float> ra(3 * dim), rb(3 * dim);
    ref_.rms_norm(x.data(), w.data(), 3, dim, 1e-5f, ra.data());
    simd_->rms_norm(x.data(), w.data(), 3, dim, 1e-5f, rb.data());
    for (int i = 0; i < 3 * dim; ++i) ASSERT_NEAR(ra[i], rb[i], 2e-6 * (1 + std::abs(ra[i]))) << dim << " " << i;
  }
}

// RoPE: the reference's bits for head sizes with and without a vector tail, one token and many
// (split over the threads), positions far apart.
TEST_P(SimdKernelsTest, RopeMatchesReferenceBitwise) {
  for (int64_t hd : {64, 6, 130})
    for (int64_t n : {1, 37}) {
      const int64_t heads = 3;
      std::vector<float> inv(static_cast<size_t>(hd / 2));
      for (int64_t j = 0; j < hd / 2; ++j) inv[static_cast<size_t>(j)] = std::pow(1e6f, -2.0f * j / hd);
      std::vector<int64_t> pos(static_cast<size_t>(n));
      for (int64_t t = 0; t < n; ++t) pos[static_cast<size_t>(t)] = (t * 7919) % 40000;
      auto a = randn(static_cast<size_t>(n * heads * hd), 21, 2.0f), b = a;
      ref_.rope_neox(a.data(), n, heads, hd, pos.data(), inv.data());
      simd_->rope_neox(b.data(), n, heads, hd, pos.data(), inv.data());
      ASSERT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0) << "head_dim " << hd << " tokens " << n;
    }
}

// kChunks16: the plain types' rows copied into owned memory in 16-row panels interleaved every
// 32 columns. The kernels read the copy (the original is poisoned with NaN bytes after copying)
// and give bitwise the unpacked results on every path (one token: whole panels at a time, and
// fused rows for a partial panel; 2-16 tokens (AVX-512: 5-16): the few-token blocks; many: panels), for heights that leave a partial panel and
// widths that leave a partial chunk and a vector tail (211: a last chunk of one AVX-512 vector).
TEST_P(SimdKernelsTest, PlainCopiesAreReadInPlaceOfTheStoredRows) {
  for (DType dt : {DType::F32, DType::F16, DType::BF16})
    for (auto [n, out, in] : {std::tuple<int64_t, int64_t, int64_t>{1, 5, 64}, {1, 48, 203}, {2, 33, 203}, {1, 35, 211},
                              {3, 67, 224}, {4, 40, 2048}, {9, 67, 224}, {40, 20, 96}, {1, 16, 7},
                              // few tokens (simd_matmul_few.inc): token groups of every size, widths
                              // of several 128-column blocks with a partial last one
                              {5, 33, 520}, {6, 17, 300}, {7, 16, 129}, {12, 35, 211}, {16, 67, 1000}, {13, 20, 2048}}) {
      Weight w = make_weight(dt, out, in, 11 + out);
      const auto x = randn(n * in, 12 + n);
      std::vector<float> want(n * out), got(n * out);
      simd_->matmul(x.data(), n, w.view, want.data());
      const AlignedBuffer copy = pack_weight(PackedLayout::kChunks16, w.view);
      ASSERT_EQ(copy.size(), static_cast<size_t>((out + 15) / 16) * chunks16_panel_bytes(dt, in));
      TensorView v = w.view;
      v.packed = copy.data();
      v.packed_layout = PackedLayout::kChunks16;
      std::fill(w.bytes.begin(), w.bytes.end(), uint8_t{0xFF});
      simd_->matmul(x.data(), n, v, got.data());
      ASSERT_EQ(std::memcmp(got.data(), want.data(), got.size() * 4), 0)
          << dtype_name(dt) << " n " << n << " out " << out << " in " << in;
    }
  const Weight q = make_weight(DType::Q4_0, 4, 64, 1);
  EXPECT_THROW(pack_weight(PackedLayout::kChunks16, q.view), Error);
  // The SIMD backends copy every plain matrix that has no faster layout into 32-column chunks.
  if (selected_isa() != Isa::kGeneric) {
    constexpr PackedLayout plain = PackedLayout::kChunks16;
    // F16 in column pairs where the AMX tile unit is usable (its hi + lo split, bf16_pairs.h).
    EXPECT_EQ(cpu_packed_layout(DType::F16), pairs16_selected(DType::F16, DType::F32) ? PackedLayout::kPairs16 : plain);
    EXPECT_EQ(cpu_packed_layout(DType::F32), plain);
    const Weight odd = make_weight(DType::BF16, 4, 203, 1);  // no whole column pairs for AMX
    EXPECT_EQ(cpu_packed_layout(odd.view), plain);
  }
}

// kChunks16 holds every stored value where weight_pack.h says: row r's columns 32c..32c+31 at
// run r % 16 of chunk c of panel r / 16; zeros past the last row and column.
// act_type BF16 on the reference: the input rounded once (nearest even), then the exact matmul
// (bit for bit what the pre-rounded input gives, and not what the unrounded one gives); other
// weight types refuse it on every backend.
TEST(Bf16Activations, ReferenceRoundsTheInputOnce) {
  ThreadPool pool(2);
  ReferenceBackend ref(pool);
  Weight w = make_weight(DType::BF16, 41, 96, 9);
  const auto x = randn(3 * 96, 10);
  std::vector<float> xr(x.size()), rounded(3 * 41), exact(3 * 41), got(3 * 41);
  for (size_t i = 0; i < x.size(); ++i) xr[i] = bf16_to_f32(f32_to_bf16(x[i]));
  ref.matmul(xr.data(), 3, w.view, rounded.data());
  ref.matmul(x.data(), 3, w.view, exact.data());
  w.view.act_type = DType::BF16;
  ref.matmul(x.data(), 3, w.view, got.data());
  EXPECT_EQ(got, rounded);
  EXPECT_NE(got, exact);
  Weight q = make_weight(DType::Q4_0, 16, 64, 11);
  q.view.act_type = DType::BF16;
  std::vector<float> y(16 * 3);
  EXPECT_THROW(ref.matmul(x.data(), 1, q.view, y.data()), Error);
  for (const char* isa : {"avx2", "avx512"}) {
    if (!isa_supported(parse_isa(isa))) continue;
    EXPECT_THROW(make_backend_for(parse_isa(isa), pool)->matmul(x.data(), 1, q.view, y.data()), Error) << isa;
  }
}

TEST(WeightPack, ChunksLayoutPlacesEveryValue) {
  for (DType dt : {DType::F16, DType::F32}) {
    const int64_t out = 19, in = 45, elem = dt == DType::F32 ? 4 : 2;
    const Weight w = make_weight(dt, out, in, 3);
    const AlignedBuffer packed = pack_weight(PackedLayout::kChunks16, w.view);
    const size_t panel = chunks16_panel_bytes(dt, in);
    ASSERT_EQ(panel, static_cast<size_t>(2 * 16 * 32 * elem));
    ASSERT_EQ(packed.size(), 2 * panel);
    const auto* p = static_cast<const uint8_t*>(packed.data());
    for (int64_t r = 0; r < 32; ++r)
      for (int64_t k = 0; k < 64; ++k) {
        uint32_t got = 0, want = 0;
        std::memcpy(&got, p + (r / 16) * panel + ((k / 32) * 16 + r % 16) * 32 * elem + (k % 32) * elem, static_cast<size_t>(elem));
        if (r < out && k < in) std::memcpy(&want, w.view.row(r) + k * elem, static_cast<size_t>(elem));
        ASSERT_EQ(got, want) << dtype_name(dt) << " row " << r << " column " << k;
      }
  }
}

// The column-pair layout holds every stored BF16 value where weight_pack.h says: row r in lane
// r % 16 of panel r / 16, columns 2c and 2c+1 in pair c; zeros past the last row and column.
TEST(WeightPack, PairsLayoutPlacesEveryValue) {
  const int64_t out = 19, in = 7;
  const Weight w = make_packed_weight(DType::BF16, out, in, 3);
  const auto* p = static_cast<const uint8_t*>(w.view.packed);
  const size_t panel = pairs16_panel_bytes(in);
  ASSERT_EQ(panel, 4u * 64);
  ASSERT_EQ(w.packed.size(), 2 * panel);
  for (int64_t r = 0; r < 32; ++r)
    for (int64_t k = 0; k < 8; ++k) {
      uint16_t got, want = 0;
      std::memcpy(&got, p + (r / 16) * panel + (k / 2) * 64 + 4 * (r % 16) + 2 * (k % 2), 2);
      if (r < out && k < in) std::memcpy(&want, w.view.row(r) + 2 * k, 2);
      ASSERT_EQ(got, want) << "row " << r << " column " << k;
    }
  const Weight f32 = make_weight(DType::F32, 4, 64, 1);
  EXPECT_THROW(pack_pairs16(f32.view), Error);
}

// An F16 value in the column-pair layout is a code (weight_pack.h) that the AMX kernel splits into
// bf16 hi + lo with integer operations: for every one of the 65,536 f16 bit patterns, the code
// exists exactly when |w| < 128 (finite), and its split is the float one: hi = w's float32 bits
// cut to 16, lo = w − hi (exact, as bf16).
TEST(WeightPack, F16CodesSplitEveryValueAsTheFloatSplitDoes) {
  const bool simd = cpu_features().avx512f && cpu_features().avx512bw;
  std::vector<uint16_t> codes, want_hi, want_lo;
  for (uint32_t h = 0; h < 65536; ++h) {
    const float w = f16_to_f32(static_cast<uint16_t>(h));
    const int32_t code = pairs16_f16_code(static_cast<uint16_t>(h));
    ASSERT_EQ(code >= 0, std::isfinite(w) && std::fabs(w) < 128.0f) << "f16 bits " << h;
    if (code < 0) continue;
    uint32_t bits;
    std::memcpy(&bits, &w, 4);
    const uint32_t hi_bits = bits & 0xFFFF0000u;
    float hi;
    std::memcpy(&hi, &hi_bits, 4);
    const float lo = w - hi;
    uint32_t lo_bits;
    std::memcpy(&lo_bits, &lo, 4);
    ASSERT_EQ(lo_bits & 0xFFFFu, 0u) << "lo of f16 bits " << h << " is not a bf16 value";
    codes.push_back(static_cast<uint16_t>(code));
    want_hi.push_back(static_cast<uint16_t>(hi_bits >> 16));
    want_lo.push_back(static_cast<uint16_t>(lo_bits >> 16));
  }
  ASSERT_EQ(codes.size(), 2u * 0x5800);  // every magnitude below 0x5800 (128.0), both signs
  if (!simd) GTEST_SKIP() << "the split needs AVX-512 BW";
  while (codes.size() % 32) codes.push_back(0), want_hi.push_back(0), want_lo.push_back(0);
  std::vector<uint16_t> hi(codes.size()), lo(codes.size());
  bf16_pairs::split_f16_codes(codes.data(), static_cast<int64_t>(codes.size()), hi.data(), lo.data());
  for (size_t i = 0; i < codes.size(); ++i) {
    ASSERT_EQ(hi[i], want_hi[i]) << "hi of code " << codes[i];
    ASSERT_EQ(lo[i], want_lo[i]) << "lo of code " << codes[i];
  }
}

// An F16 matrix holding a value without a code is packed in kChunks16 (its exact float kernels)
// by the model's weight preparation, and the column-pair packer alone refuses it naming the value.
TEST(WeightPack, F16MatrixBeyondTheCodesTakesTheChunkLayout) {
  Weight w = make_weight(DType::F16, 16, 64, 7);
  AlignedBuffer got(packed_size(PackedLayout::kPairs16, w.view));
  EXPECT_EQ(pack_pairs16_or_chunks16_into(w.view, got.data()), PackedLayout::kPairs16);
  AlignedBuffer want = pack_pairs16(w.view);
  EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size()), 0);
  const uint16_t big = 0x7BFF;  // 65504
  std::memcpy(w.bytes.data() + 2 * 100, &big, 2);
  EXPECT_EQ(pack_pairs16_or_chunks16_into(w.view, got.data()), PackedLayout::kChunks16);
  want = pack_weight(PackedLayout::kChunks16, w.view);
  ASSERT_EQ(want.size(), got.size());
  EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size()), 0);
  try {
    pack_pairs16(w.view);
    FAIL() << "packed 65504 into column pairs";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("65504"), std::string::npos) << e.what();
  }
}

// The 16-row layout holds every stored byte where weight_pack.h says (Q8_0 biased by 128),
// zero rows past the end, and refuses what it cannot pack.
TEST(WeightPack, LayoutPlacesEveryStoredByte) {
  for (DType dt : {DType::Q4_0, DType::Q8_0}) {
    const int64_t out = 21, in = 96, blocks = 3, G = rows16_group_count(dt);
    const Weight w = make_packed_weight(dt, out, in, 5);
    const auto* p = static_cast<const uint8_t*>(w.view.packed);
    const size_t sb = dt == DType::Q4_0 ? 18 : 34, unit = rows16_unit_bytes(dt), panel = rows16_panel_bytes(dt, in);
    ASSERT_EQ(panel, 2 * unit);
    ASSERT_EQ(w.packed.size(), 2 * panel);
    for (int64_t r = 0; r < 32; ++r)
      for (int64_t b = 0; b < blocks; ++b) {
        const uint8_t* u = p + (r / 16) * panel + (b / 2) * unit;
        const uint8_t* src = r < out ? w.view.row(r) + b * sb : nullptr;
        for (int k = 0; k < 2; ++k)
          ASSERT_EQ(u[2 * G * 64 + (b % 2) * 32 + 2 * (r % 16) + k], src ? src[k] : 0) << r << " " << b;
        for (int64_t g = 0; g < G; ++g)
          for (int j = 0; j < 4; ++j) {
            const uint8_t got = u[(b % 2) * G * 64 + g * 64 + 4 * (r % 16) + j];
            const uint8_t want = !src ? 0 : dt == DType::Q8_0 ? src[2 + 4 * g + j] ^ 0x80 : src[2 + 4 * g + j];
            ASSERT_EQ(got, want) << dtype_name(dt) << " row " << r << " block " << b << " group " << g;
          }
      }
  }
  const Weight f16 = make_weight(DType::F16, 4, 64, 1);
  EXPECT_THROW(pack_rows16(f16.view), Error);
  const Weight bad = make_weight(DType::Q4_0, 4, 64, 1);
  TensorView v = bad.view;
  v.shape = {2, 4, 32};
  EXPECT_THROW(pack_rows16(v), Error);
}

// Q4_1, Q5_0 and Q5_1 in the 16-row layout: every element's quant, rebuilt from its nibble (and
// its bit in the fifth-bit plane) with the block's d (and m) from the unit, gives exactly what
// the reference decoder gives from the stored block; rows past the end are zero.
TEST(WeightPack, LayoutHoldsEveryValueOfTheFormatsWithMinsAndFifthBits) {
  for (DType dt : {DType::Q4_1, DType::Q5_0, DType::Q5_1}) {
    const int64_t out = 21, in = 96, blocks = 3;
    const Weight w = make_packed_weight(dt, out, in, 6);
    const auto* p = static_cast<const uint8_t*>(w.view.packed);
    const bool five = dt != DType::Q4_1, mins = dt != DType::Q5_0;
    const size_t kb = five ? 320 : 256, unit = rows16_unit_bytes(dt), panel = rows16_panel_bytes(dt, in);
    ASSERT_EQ(unit, 2 * kb + (mins ? 128 : 64));
    ASSERT_EQ(unit, 32 * static_cast<size_t>(dtype_traits(dt).block_bytes));  // exactly the stored blocks
    ASSERT_EQ(w.packed.size(), 2 * panel);
    std::vector<float> want(in);
    for (int64_t r = 0; r < 32; ++r) {
      if (r < out) dequantize_row(dt, w.view.row(r), want.data(), in);
      for (int64_t b = 0; b < blocks; ++b) {
        const uint8_t* u = p + (r / 16) * panel + (b / 2) * unit;
        const uint8_t* blk = u + (b % 2) * kb;
        const int64_t lane = r % 16;
        uint16_t dbits, mbits = 0;
        std::memcpy(&dbits, u + 2 * kb + (b % 2) * 32 + 2 * lane, 2);
        if (mins) std::memcpy(&mbits, u + 2 * kb + 64 + (b % 2) * 32 + 2 * lane, 2);
        const float d = f16_to_f32(dbits), m = f16_to_f32(mbits);
        for (int g = 0; g < 4; ++g)
          for (int j = 0; j < 4; ++j) {
            const uint8_t nib = blk[64 * g + 4 * lane + j], high = five ? blk[256 + 4 * lane + j] : 0;
            const int qlo = (nib & 0x0F) | (((high >> (2 * g)) & 1) << 4);
            const int qhi = (nib >> 4) | (((high >> (2 * g + 1)) & 1) << 4);
            for (auto [k, q] : {std::pair{4 * g + j, qlo}, std::pair{16 + 4 * g + j, qhi}}) {
              const float got = dt == DType::Q5_0 ? static_cast<float>(q - 16) * d : static_cast<float>(q) * d + m;
              if (r >= out) {
                ASSERT_EQ(nib | high | dbits | mbits, 0) << dtype_name(dt) << " padding row " << r;
              } else {
                ASSERT_EQ(got, want[b * 32 + k]) << dtype_name(dt) << " row " << r << " element " << b * 32 + k;
              }
            }
          }
      }
    }
  }
}

// The AVX2 kernels claim the AVX-512 kernels' arithmetic (simd_packed_avx2.inc): on a CPU with
// both, every packed type gives the same bits on both, for decode (1-4 tokens, two panels in
// lockstep, a short last panel) and prefill tiles.
TEST(SimdKernels, PackedAvx2AndAvx512GiveTheSameBits) {
  if (!isa_supported(Isa::kAvx512)) GTEST_SKIP() << "CPU lacks avx512";
  ThreadPool pool(2);
  const auto avx2 = make_backend_for(Isa::kAvx2, pool), avx512 = make_backend_for(Isa::kAvx512, pool);
  for (DType dt : kTypes) {
    if (!rows16_packable(dt)) continue;
    const int64_t blk = dtype_traits(dt).block_elems;
    for (auto [n, out, in] : {std::tuple<int64_t, int64_t, int64_t>{1, 40, 96}, {2, 57, 512}, {4, 33, 256}, {9, 70, 256}, {17, 16, 768}}) {
      const int64_t K = (in + blk - 1) / blk * blk;
      const Weight w = make_packed_weight(dt, out, K, 300 + n);
      const auto x = randn(n * K, 400 + n);
      std::vector<float> a(n * out), b(n * out);
      avx2->matmul(x.data(), n, w.view, a.data());
      avx512->matmul(x.data(), n, w.view, b.data());
      ASSERT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0) << dtype_name(dt) << " n=" << n << " out=" << out << " in=" << K;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Isa, SimdKernelsTest, ::testing::Values("avx2", "avx512"));

}  // namespace
}  // namespace lfm
