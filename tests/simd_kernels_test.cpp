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
#include "kernel_test_weights.h"
#include "test_util.h"

namespace lfm {
namespace {

using test::kTypes;
using test::make_packed_weight;
using test::make_weight;
using test::randn;
using test::test_layout;
using test::test_packable;
using test::Weight;

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
          tol = test::int8_bound(x.data() + (i / out) * K, wrow.data(), K, a[i]);
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

// The CPU-model tuning (kernels/cpu_features.h) never changes a bit: the few-token kernel with
// its weights widened into the L1 buffer or in registers, the one-token GEMV with and without its
// software prefetch, the prefill GEMM widening per tile or per panel, over plain matrices of every
// width class (a partial last chunk and panel).
TEST_P(SimdKernelsTest, CpuTuningChangesNoResult) {
  const CpuTuning saved = cpu_tuning();
  for (DType dt : {DType::BF16, DType::F16, DType::F32})
    for (auto [n, out, in] : {std::tuple<int64_t, int64_t, int64_t>{1, 40, 96}, {4, 33, 200}, {5, 61, 256}, {9, 70, 520},
                              {16, 17, 64}, {20, 70, 520}, {37, 100, 200}, {9, 20, 152}}) {
      const Weight w = make_weight(dt, out, in, 500 + n);
      const AlignedBuffer chunks = pack_weight(PackedLayout::kChunks16, w.view);
      TensorView v = w.view;
      v.packed = chunks.data();
      v.packed_layout = PackedLayout::kChunks16;
      const auto x = randn(n * in, 600 + n);
      std::vector<float> a(n * out), b(n * out);
      set_cpu_tuning(CpuTuning{.chunk_gemv_prefetch = true, .few_widen_in_registers = false, .gemm_widen_f16_panels = false});
      simd_->matmul(x.data(), n, v, a.data());
      set_cpu_tuning(CpuTuning{.chunk_gemv_prefetch = false, .few_widen_in_registers = true, .gemm_widen_f16_panels = true});
      simd_->matmul(x.data(), n, v, b.data());
      set_cpu_tuning(saved);
      ASSERT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0) << dtype_name(dt) << " n=" << n << " out=" << out << " in=" << in;
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
                              {5, 33, 520}, {6, 17, 300}, {7, 16, 129}, {12, 35, 211}, {16, 67, 1000}, {13, 20, 2048},
                              // last chunks of 24 columns (three AVX2 vectors, one BF16 pair's low
                              // and high halves): one token, few tokens, the GEMM
                              {1, 35, 88}, {2, 33, 120}, {6, 20, 152}, {24, 17, 88}}) {
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
