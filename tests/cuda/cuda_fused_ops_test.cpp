// The CUDA backend's fused ops against the separate ops they replace, bit for bit: the residual
// add with the next norm, q/k norm with RoPE (and the K/V store), the shared-input and gated
// matmuls, a decode GEMV with the residual add and norm after it, the MoE combine with them, and
// a whole step's fused ops against those Forward runs when an activation observer watches. On a
// GPU (lfm_cuda_tests) and on the emulator (lfm_cuda_emu_tests).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.h"
#include "cuda_test_fixture.h"
#include "model/forward.h"
#include "model_test_util.h"

namespace lfm {
namespace {

using test::randn;

// The fused residual add + RMSNorm gives the bits of add then rms_norm, sum and norm alike.
TEST_F(CudaTest, AddRmsNormIsAddThenRmsNorm) {
  const int64_t rows = 5, dim = 2048 + 37;
  const auto h0 = randn(rows * dim, 21), x = randn(rows * dim, 22), w = randn(dim, 23);
  auto dh1 = up(h0), dh2 = up(h0), dx = up(x), dw = up(w);
  DeviceBuffer o1 = gpu_->allocate(rows * dim * 4), o2 = gpu_->allocate(rows * dim * 4);
  gpu_->add_rms_norm(dh1.as<float>(), dx.as<float>(), dw.as<float>(), rows, dim, 1e-5f, o1.as<float>());
  gpu_->add(dh2.as<float>(), dx.as<float>(), rows * dim);
  gpu_->rms_norm(dh2.as<float>(), dw.as<float>(), rows, dim, 1e-5f, o2.as<float>());
  EXPECT_EQ(down<float>(dh1, rows * dim), down<float>(dh2, rows * dim));
  EXPECT_EQ(down<float>(o1, rows * dim), down<float>(o2, rows * dim));
}

// Query/key norm and RoPE in one launch: the bits of the four ops it replaces.
TEST_F(CudaTest, QkNormRopeIsNormsThenRopes) {
  const int64_t T = 5, H = 4, G = 2, hd = 64;
  const auto q = randn(T * H * hd, 31), k = randn(T * G * hd, 32), qw = randn(hd, 33), kw = randn(hd, 34);
  std::vector<float> f(hd / 2);
  for (int64_t j = 0; j < hd / 2; ++j) f[j] = std::pow(10000.0f, -2.0f * j / hd);
  const std::vector<int64_t> pos = {0, 7, 300, 4095, 70000};
  auto q1 = up(q), q2 = up(q), k1 = up(k), k2 = up(k), dqw = up(qw), dkw = up(kw), df = up(f), dp = up(pos);
  gpu_->qk_norm_rope(q1.as<float>(), k1.as<float>(), dqw.as<float>(), dkw.as<float>(), T, H, G, hd, 1e-5f,
                     dp.as<int64_t>(), df.as<float>());
  gpu_->rms_norm(q2.as<float>(), dqw.as<float>(), T * H, hd, 1e-5f, q2.as<float>());
  gpu_->rms_norm(k2.as<float>(), dkw.as<float>(), T * G, hd, 1e-5f, k2.as<float>());
  gpu_->rope_neox(q2.as<float>(), T, H, hd, dp.as<int64_t>(), df.as<float>());
  gpu_->rope_neox(k2.as<float>(), T, G, hd, dp.as<int64_t>(), df.as<float>());
  EXPECT_EQ(down<float>(q1, q.size()), down<float>(q2, q.size()));
  EXPECT_EQ(down<float>(k1, k.size()), down<float>(k2, k.size()));
}

// Matrices on one input (q/k/v of different heights) in one launch, or (70 tokens) cuBLAS GEMMs
// from one conversion of the input: the bits of separate matmuls.
TEST_F(CudaTest, SharedInputMatmulsInOneLaunchMatchSeparateOnes) {
  const int64_t cols = 256;
  for (DType type : {DType::BF16, DType::F16, DType::F32, DType::Q8_0, DType::Q6_K}) {
    GpuMatrix q = make_matrix(*gpu_, type, 40, cols, 81), k = make_matrix(*gpu_, type, 12, cols, 82),
              v = make_matrix(*gpu_, type, 13, cols, 83);
    const TensorView* ws[] = {&q.view, &k.view, &v.view};
    for (int64_t n : {1, 5, 70}) {
      const auto x = randn(n * cols, 84 + n);
      auto dx = up(x);
      std::vector<DeviceBuffer> one, sep;
      std::vector<float*> ys;
      for (const TensorView* w : ws) {
        one.push_back(gpu_->allocate(n * w->shape[0] * 4));
        sep.push_back(gpu_->allocate(n * w->shape[0] * 4));
        ys.push_back(one.back().as<float>());
      }
      gpu_->matmul_shared(dx.as<float>(), n, ws, ys);
      for (size_t i = 0; i < 3; ++i) {
        gpu_->matmul(dx.as<float>(), n, *ws[i], sep[i].as<float>());
        const size_t count = static_cast<size_t>(n * ws[i]->shape[0]);
        EXPECT_EQ(down<float>(one[i], count), down<float>(sep[i], count)) << dtype_name(type) << " n=" << n << " matrix " << i;
      }
    }
  }
}

// The FFN's gate and up products with SwiGLU in one launch: the bits of two matmuls and swiglu.
TEST_F(CudaTest, MatmulSwigluIsTwoMatmulsThenSwiglu) {
  const int64_t cols = 512, rows = 72;
  for (DType type : {DType::BF16, DType::Q4_0, DType::Q4_K}) {
    GpuMatrix w1 = make_matrix(*gpu_, type, rows, cols, 91), w3 = make_matrix(*gpu_, type, rows, cols, 92);
    for (int64_t n : {1, 3, 9, 70}) {
      const auto x = randn(n * cols, 93 + n);
      auto dx = up(x);
      DeviceBuffer g1 = gpu_->allocate(n * rows * 4), u1 = gpu_->allocate(n * rows * 4);
      DeviceBuffer g2 = gpu_->allocate(n * rows * 4), u2 = gpu_->allocate(n * rows * 4);
      gpu_->matmul_swiglu(dx.as<float>(), n, w1.view, w3.view, g1.as<float>(), u1.as<float>());
      gpu_->matmul(dx.as<float>(), n, w1.view, g2.as<float>());
      gpu_->matmul(dx.as<float>(), n, w3.view, u2.as<float>());
      gpu_->swiglu(g2.as<float>(), u2.as<float>(), n * rows, g2.as<float>());
      EXPECT_EQ(down<float>(g1, n * rows), down<float>(g2, n * rows)) << dtype_name(type) << " n=" << n;
    }
  }
}

// A branch's last projection with the residual add and the next norm: for up to 4 tokens one
// launch whose last block takes the norms (one row: 128 threads standing in for add_rms_norm's
// 256; 3 or 4 rows: a warp a row standing in for them), for 5 the two launches; either way the
// bits of matmul then add_rms_norm (or add without a norm). Norm widths (the matrix's rows) below
// one block's 256, past 8 of them and not a multiple of the rows a block takes; cases of 1 and 4
// tokens run twice, so a counter left set would show.
TEST_F(CudaTest, MatmulAddRmsNormIsMatmulThenAddRmsNorm) {
  for (DType type : {DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q4_K, DType::Q5_K,
                     DType::Q6_K}) {
    for (int64_t rows : {333, 2085}) {
      const int64_t cols = 768;
      GpuMatrix w = make_matrix(*gpu_, type, rows, cols, 120 + rows);
      const auto norm = randn(rows, 121);
      auto dnorm = up(norm);
      for (int64_t n : {1, 1, 3, 4, 4, 5}) {
        for (bool with_norm : {true, false}) {
          const uint64_t seed = 122 + 7 * n + (with_norm ? 1 : 0);
          const auto x = randn(n * cols, seed), h0 = randn(n * rows, seed + 1);
          auto dx = up(x), dh1 = up(h0), dh2 = up(h0);
          DeviceBuffer y = gpu_->allocate(n * rows * 4), o1 = gpu_->allocate(n * rows * 4),
                       o2 = gpu_->allocate(n * rows * 4);
          const float* nw = with_norm ? dnorm.as<float>() : nullptr;
          gpu_->matmul_add_rms_norm(dx.as<float>(), n, w.view, y.as<float>(), dh1.as<float>(), nw, 1e-5f,
                                    o1.as<float>());
          gpu_->matmul(dx.as<float>(), n, w.view, y.as<float>());
          if (with_norm) gpu_->add_rms_norm(dh2.as<float>(), y.as<float>(), nw, n, rows, 1e-5f, o2.as<float>());
          else gpu_->add(dh2.as<float>(), y.as<float>(), n * rows);
          const std::string where = cat(dtype_name(type), " rows=", rows, " n=", n, with_norm ? " with" : " without",
                                        " norm");
          EXPECT_EQ(down<float>(dh1, n * rows), down<float>(dh2, n * rows)) << where;
          if (with_norm) {
            EXPECT_EQ(down<float>(o1, n * rows), down<float>(o2, n * rows)) << where;
          }
        }
      }
    }
  }
}

// An MoE layer's weighted sum of its experts' outputs with the residual add and the next norm in
// one launch: the bits of moe_combine then add_rms_norm (or add), for one token and a batch.
TEST_F(CudaTest, MoeCombineAddRmsNormIsCombineThenAddRmsNorm) {
  const int64_t k = 3, cols = 2085;
  const auto norm = randn(cols, 131);
  auto dnorm = up(norm);
  for (int64_t rows : {1, 5}) {
    for (bool with_norm : {true, false}) {
      const int64_t R = rows * k;
      const auto x = randn(R * cols, 132 + rows), h0 = randn(rows * cols, 133 + rows), wt = randn(rows * k, 134);
      std::vector<int32_t> src(rows * k);
      for (int64_t i = 0; i < R; ++i) src[i] = static_cast<int32_t>((i * 7 + 2) % R);  // every row once, shuffled
      auto dx = up(x), dsrc = up(src), dwt = up(wt), dh1 = up(h0), dh2 = up(h0);
      DeviceBuffer y = gpu_->allocate(rows * cols * 4), o1 = gpu_->allocate(rows * cols * 4),
                   o2 = gpu_->allocate(rows * cols * 4);
      const float* nw = with_norm ? dnorm.as<float>() : nullptr;
      gpu_->moe_combine_add_rms_norm(dx.as<float>(), dsrc.as<int32_t>(), dwt.as<float>(), rows, k, cols,
                                     y.as<float>(), dh1.as<float>(), nw, 1e-5f, o1.as<float>());
      gpu_->moe_combine(dx.as<float>(), dsrc.as<int32_t>(), dwt.as<float>(), rows, k, cols, y.as<float>());
      if (with_norm) gpu_->add_rms_norm(dh2.as<float>(), y.as<float>(), nw, rows, cols, 1e-5f, o2.as<float>());
      else gpu_->add(dh2.as<float>(), y.as<float>(), rows * cols);
      const std::string where = cat("rows=", rows, with_norm ? " with" : " without", " norm");
      EXPECT_EQ(down<float>(dh1, rows * cols), down<float>(dh2, rows * cols)) << where;
      if (with_norm) {
        EXPECT_EQ(down<float>(o1, rows * cols), down<float>(o2, rows * cols)) << where;
      }
    }
  }
}

// The fused ops a step runs (the branch's last projection with the residual add and norm, an MoE
// layer's combine with them, q/k norm + RoPE with the K/V store, the gated conv) give the bits of
// the separate ops Forward runs when an activation observer watches: a prompt, then decode steps
// of one token (where the one-launch kernels run), of two sequences and of twenty, dense and MoE,
// each step's logits equal with and without the observer.
TEST_F(CudaTest, FusedOpsGiveTheSeparateOpsBits) {
  for (const std::string name : {"lfm2_b_layertypes_tied_f32", "lfm2moe_g_untied_nobias_scaled_f32"}) {
    LoadOptions opt;
    opt.backend = gpu_.get();
    auto model = load_model(test::fixture_dir(name), opt);
    auto run = [&](bool observed) {
      StatePlanOptions plan = test::f32_plan(64);
      plan.parallel = 20;
      auto cache = make_state_cache(*model, plan, *gpu_);
      Forward fwd(*model, *gpu_, *cache);
      int observations = 0;
      if (observed) fwd.set_observer([&](const std::string&, const float*, int64_t, int64_t) { ++observations; });
      Sequence* a = cache->open(64);
      Sequence* b = cache->open(64);
      const std::vector<int32_t> prompt_a = {1, 5, 9, 2, 7}, prompt_b = {3, 8, 4};
      std::vector<std::vector<float>> logits;
      StepOutput out;
      auto step = [&](std::vector<BatchItem> items) {
        fwd.step(items, out);
        logits.push_back(out.logits);
      };
      step({BatchItem{a, prompt_a, true}});
      step({BatchItem{b, prompt_b, true}});
      const std::vector<int32_t> next[] = {{11}, {12}, {13}, {14}};
      for (int i = 0; i < 3; ++i) step({BatchItem{a, next[i]}});
      for (int i = 0; i < 2; ++i) step({BatchItem{a, next[i + 1]}, BatchItem{b, next[i]}});
      // 20 sequences a token each (a pass of 16 tokens and one of 4), twice: 18 of them new.
      std::vector<Sequence*> more;
      for (int i = 0; i < 18; ++i) more.push_back(cache->open(64));
      for (int i = 0; i < 2; ++i) {
        std::vector<BatchItem> items = {BatchItem{a, next[3 - i]}, BatchItem{b, next[2 + i]}};
        for (size_t j = 0; j < more.size(); ++j) items.push_back(BatchItem{more[j], next[(j + i) % 4]});
        step(items);
      }
      EXPECT_EQ(observations > 0, observed);
      return logits;
    };
    const auto separate = run(true), fused = run(false);
    ASSERT_EQ(separate.size(), fused.size());
    for (size_t s = 0; s < fused.size(); ++s) EXPECT_EQ(fused[s], separate[s]) << name << " step " << s;
  }
}

}  // namespace
}  // namespace lfm
