// The CUDA backend on a GPU (ctest label `cuda`; every test skips on a machine without one), and
// the same tests on the CPU emulator of the CUDA runtime (lfm_cuda_emu_tests, gpu_under_test.h):
// each op against the reference CPU backend on random inputs of awkward sizes, batch invariance of
// the decode matmuls, the state ops over device pools, every transformers fixture through the GPU
// (float32 logits within 1e-4, greedy tokens exact), and greedy tokens alone vs in a mixed batch.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <random>
#include <set>
#include <string>

#include "convert/quant.h"
#include "core/thread_pool.h"
#include "engine/engine.h"
#include "cuda_test_fixture.h"
#include "gpu_under_test.h"
#include "kernels/backend_factory.h"
#include "kernels/dequant.h"
#include "kernels/split_blocks.h"
#include "kernels/reference_backend.h"
#include "model/forward.h"
#include "model_test_util.h"
#include "sampling_ops_check.h"
#include "test_util.h"

namespace lfm {
namespace {

using test::randn;

TEST_F(CudaTest, RowOpsMatchTheReference) {
  const int64_t rows = 7, dim = 333, hd = 64, heads = 3;
  const auto x = randn(rows * dim, 1), w = randn(dim, 2), y0 = randn(rows * dim, 3);
  auto dx = up(x), dw = up(w), dy = up(y0);
  DeviceBuffer dout = gpu_->allocate(rows * dim * sizeof(float));
  std::vector<float> want(rows * dim);
  gpu_->rms_norm(dx.as<float>(), dw.as<float>(), rows, dim, 1e-5f, dout.as<float>());
  ref_->rms_norm(x.data(), w.data(), rows, dim, 1e-5f, want.data());
  EXPECT_LE(rel_err(down<float>(dout, want.size()), want), 1e-6);
  gpu_->swiglu(dx.as<float>(), dy.as<float>(), rows * dim, dout.as<float>());
  ref_->swiglu(x.data(), y0.data(), rows * dim, want.data());
  EXPECT_LE(rel_err(down<float>(dout, want.size()), want), 1e-6);
  gpu_->mul_rows(dx.as<float>(), dim, dy.as<float>(), dim, rows, dim - 5, dout.as<float>(), dim);
  std::vector<float> got = down<float>(dout, want.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < dim - 5; ++c) ASSERT_EQ(got[r * dim + c], x[r * dim + c] * y0[r * dim + c]);
  gpu_->mul_rows(dx.as<float>(), dim, dw.as<float>(), 0, rows, dim, dout.as<float>(), dim);  // one row for all
  got = down<float>(dout, want.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < dim; ++c) ASSERT_EQ(got[r * dim + c], x[r * dim + c] * w[c]);
  std::vector<float> acc = y0;
  gpu_->add_bias(dy.as<float>(), dw.as<float>(), rows, dim);
  ref_->add_bias(acc.data(), w.data(), rows, dim);
  EXPECT_EQ(down<float>(dy, acc.size()), acc);
  const std::vector<int32_t> index = {6, 0, 3, 3};
  auto di = up(index);
  gpu_->gather_rows(dx.as<float>(), dim, di.as<int32_t>(), 4, dout.as<float>());
  ref_->gather_rows(x.data(), dim, index.data(), 4, want.data());
  got = down<float>(dout, 4 * dim);
  EXPECT_TRUE(std::equal(got.begin(), got.end(), want.begin()));
  // RoPE at scattered positions.
  const auto q = randn(rows * heads * hd, 4);
  std::vector<int64_t> pos = {0, 5, 17, 4095, 100000, 3, 9};
  const auto inv = rope_inverse_frequencies(1000000.0, hd);
  auto dq = up(q), dp = up(pos), dinv = up(inv);
  gpu_->rope_neox(dq.as<float>(), rows, heads, hd, dp.as<int64_t>(), dinv.as<float>());
  std::vector<float> qr = q;
  ref_->rope_neox(qr.data(), rows, heads, hd, pos.data(), inv.data());
  EXPECT_LE(rel_err(down<float>(dq, qr.size()), qr), 1e-6);
}

// The text encoder's ops (segment attention with GQA, causal masks and key limits; the stateless
// segment conv, causal and centred) against the reference backend.
TEST_F(CudaTest, SegmentOpsMatchTheReference) {
  const std::vector<int64_t> seg = {0, 1, 7, 40};
  const int64_t T = seg.back(), H = 4, G = 2, hd = 16;
  const auto q = randn(T * H * hd, 31), k = randn(T * G * hd, 32), v = randn(T * G * hd, 33);
  for (const bool causal : {false, true})
    for (const bool limited : {false, true}) {
      const std::vector<int64_t> key_end = limited ? std::vector<int64_t>{1, 5, 30} : std::vector<int64_t>{};
      const SegmentAttention a{seg, key_end, H, G, hd, 0.25f, causal};
      std::vector<float> want(T * H * hd);
      ref_->segment_attention(q.data(), k.data(), v.data(), a, want.data());
      DeviceBuffer dq = up(q), dk = up(k), dv = up(v), dout = gpu_->allocate(want.size() * sizeof(float));
      gpu_->segment_attention(dq.as<float>(), dk.as<float>(), dv.as<float>(), a, dout.as<float>());
      EXPECT_LT(rel_err(down<float>(dout, want.size()), want), 1e-5) << (causal ? "causal" : "bidirectional")
                                                                     << (limited ? ", key limits" : "");
    }
  const int64_t dim = 37;
  const auto u = randn(T * dim, 34), bias = randn(dim, 35);
  for (const int64_t kernel : {3, 4})
    for (const int64_t left : {kernel - 1, kernel / 2}) {
      const auto w = randn(dim * kernel, 36 + kernel);
      std::vector<float> want(T * dim);
      ref_->segment_conv(u.data(), seg, dim, kernel, left, w.data(), bias.data(), want.data());
      DeviceBuffer du = up(u), dw = up(w), db = up(bias), dout = gpu_->allocate(want.size() * sizeof(float));
      gpu_->segment_conv(du.as<float>(), seg, dim, kernel, left, dw.as<float>(), db.as<float>(), dout.as<float>());
      EXPECT_LT(rel_err(down<float>(dout, want.size()), want), 1e-6) << "kernel " << kernel << " left " << left;
    }
}

// The speech encoder's ops (activations, GLU, the subsampling's 2-D convs in both forms, the
// relative-position attention over clips of awkward lengths) against the reference backend.
TEST_F(CudaTest, SpeechEncoderOpsMatchTheReference) {
  const int64_t rows = 6, cols = 37;
  const auto x = randn(rows * 2 * cols, 61, 3.0f);
  DeviceBuffer dx = up(x), dout = gpu_->allocate(x.size() * sizeof(float));
  for (const Activation f : {Activation::kRelu, Activation::kSilu}) {
    std::vector<float> want(x.size());
    ref_->activation(x.data(), static_cast<int64_t>(x.size()), f, want.data());
    gpu_->activation(dx.as<float>(), static_cast<int64_t>(x.size()), f, dout.as<float>());
    EXPECT_LT(rel_err(down<float>(dout, want.size()), want), 1e-6) << (f == Activation::kRelu ? "relu" : "silu");
  }
  std::vector<float> want_glu(rows * cols);
  ref_->glu(x.data(), rows, cols, want_glu.data());
  gpu_->glu(dx.as<float>(), rows, cols, dout.as<float>());
  EXPECT_LT(rel_err(down<float>(dout, want_glu.size()), want_glu), 1e-6) << "glu";

  const std::vector<int64_t> seg = {0, 1, 4, 13};
  const int64_t W = 11, C = 6;
  for (const bool depthwise : {false, true})
    for (const int64_t stride : {1, 2}) {
      const Conv2d c{seg, W, C, depthwise, 3, stride, 1};
      const auto in = randn(seg.back() * W * c.in_channels(), 62), w = randn(C * 9, 63), bias = randn(C, 64);
      const int64_t out_rows = check_conv2d(c, "test");
      std::vector<float> want(out_rows * c.out_width() * C);
      ref_->conv2d(in.data(), c, w.data(), bias.data(), want.data());
      DeviceBuffer din = up(in), dw = up(w), db = up(bias), dconv = gpu_->allocate(want.size() * sizeof(float));
      gpu_->conv2d(din.as<float>(), c, dw.as<float>(), db.as<float>(), dconv.as<float>());
      EXPECT_LT(rel_err(down<float>(dconv, want.size()), want), 1e-6) << (depthwise ? "depthwise" : "one channel")
                                                                     << ", stride " << stride;
    }

  const std::vector<int64_t> aseg = {0, 1, 8, 41};
  const int64_t T = aseg.back(), H = 4, hd = 16, p0 = 33, stride = H * hd;
  const auto q = randn(T * stride, 65), k = randn(T * stride, 66), v = randn(T * stride, 67);
  const auto pos = randn((2 * p0 + 1) * stride, 68), u = randn(stride, 69), vb = randn(stride, 70);
  const RelPosAttention a{aseg, H, hd, p0, 0.25f};
  std::vector<float> want(T * stride);
  ref_->rel_pos_attention(q.data(), k.data(), v.data(), pos.data(), u.data(), vb.data(), a, want.data());
  DeviceBuffer dq = up(q), dk = up(k), dv = up(v), dp = up(pos), du = up(u), dvb = up(vb),
               datt = gpu_->allocate(want.size() * sizeof(float));
  gpu_->rel_pos_attention(dq.as<float>(), dk.as<float>(), dv.as<float>(), dp.as<float>(), du.as<float>(),
                          dvb.as<float>(), a, datt.as<float>());
  EXPECT_LT(rel_err(down<float>(datt, want.size()), want), 1e-5) << "rel_pos_attention";
}



// Logit edits bit for bit; candidates, their order among ties and the tail as the plain loops give.
TEST_F(CudaTest, SamplingOpsMatchPlainLoops) { test::check_sampling_ops(*gpu_); }

TEST_F(CudaTest, MoeOpsMatchTheReference) {
  const int64_t rows = 9, E = 32, k = 4, d = 70;
  const auto logits = randn(rows * E, 5), bias = randn(E, 6, 0.1f);
  auto dl = up(logits), db = up(bias);
  DeviceBuffer de = gpu_->allocate(rows * k * 4), dwt = gpu_->allocate(rows * k * 4);
  gpu_->moe_route(dl.as<float>(), rows, E, k, db.as<float>(), true, 2.5f, de.as<int32_t>(), dwt.as<float>());
  std::vector<int32_t> experts(rows * k);
  std::vector<float> weights(rows * k);
  ref_->moe_route(logits.data(), rows, E, k, bias.data(), true, 2.5f, experts.data(), weights.data());
  EXPECT_EQ(down<int32_t>(de, experts.size()), experts);
  EXPECT_LE(rel_err(down<float>(dwt, weights.size()), weights), 1e-6);
  const auto x = randn(rows * k * d, 7);
  std::vector<int32_t> src(rows * k);
  for (int64_t i = 0; i < rows * k; ++i) src[i] = static_cast<int32_t>((i * 7) % (rows * k));
  auto dx = up(x), ds = up(src);
  DeviceBuffer dout = gpu_->allocate(rows * d * 4);
  gpu_->moe_combine(dx.as<float>(), ds.as<int32_t>(), dwt.as<float>(), rows, k, d, dout.as<float>());
  std::vector<float> want(rows * d);
  ref_->moe_combine(x.data(), src.data(), weights.data(), rows, k, d, want.data());
  EXPECT_LE(rel_err(down<float>(dout, want.size()), want), 1e-6);
}


// Widths that end in a partial 256-column chunk, that leave some of a block's 4 warps without a
// chunk, and (plain types) that only the scalar kernel reads; 37 rows (not a multiple of the
// rows a block takes). Quantized matrices are in the split-block layout on the device;
// quantized decode rows multiply int8 activations (within int8_bound).
TEST_F(CudaTest, MatmulEveryTypeMatchesTheReferenceAndIgnoresTheBatch) {
  struct Case {
    DType type;
    std::vector<int64_t> cols;
  };
  const Case cases[] = {
      {DType::F32, {512, 40, 1000, 36}},  {DType::F16, {512, 40, 1000, 36}}, {DType::BF16, {512, 40, 1000, 36}},
      {DType::Q8_0, {512, 96, 1312}},     {DType::Q4_0, {512, 96, 1312}},    {DType::Q4_K, {512, 768, 2304}},
      {DType::Q5_K, {512, 768}},          {DType::Q6_K, {512, 768, 2304}},
  };
  for (const Case& c : cases) {
    for (int64_t cols : c.cols) {
      const DType type = c.type;
      const int64_t rows = 37;
      GpuMatrix m = make_matrix(*gpu_, type, rows, cols, 11 + cols);
      TensorView host = m.view;  // the reference reads the stored bytes
      host.packed = nullptr;
      host.packed_layout = PackedLayout::kNone;
      for (int64_t n : {1, 3, 9, 20, 70}) {
        const auto x = randn(n * cols, 12 + n);
        auto dx = up(x);
        DeviceBuffer dy = gpu_->allocate(n * rows * 4);
        gpu_->matmul(dx.as<float>(), n, m.view, dy.as<float>());
        std::vector<float> want(n * rows);
        ref_->matmul(x.data(), n, host, want.data());
        const auto got = down<float>(dy, want.size());
        if (split_block(type).valid() && n < 64) {
          // The integer path: within the int8 activations' rounding of the float32 result.
          std::vector<float> wf(rows * cols);
          for (int64_t r = 0; r < rows; ++r)
            dequantize_row(type, m.bytes.data() + r * dtype_row_bytes(type, cols), wf.data() + r * cols, cols);
          for (int64_t t = 0; t < n; ++t)
            for (int64_t r = 0; r < rows; ++r) {
              const size_t i = static_cast<size_t>(t * rows + r);
              EXPECT_LE(std::fabs(static_cast<double>(got[i]) - want[i]),
                        test::int8_bound(x.data() + t * cols, wf.data() + r * cols, cols, want[i]))
                  << dtype_name(type) << " cols " << cols << " n=" << n << " t " << t << " row " << r;
            }
          continue;
        }
        // n = 70 takes the tensor cores with 16-bit activations (and bf16-decoded quantized weights).
        const double tol = n >= 64 ? 2e-2 : 1e-5;
        EXPECT_LE(rel_err(got, want), tol) << dtype_name(type) << " cols " << cols << " n=" << n;
      }
      // Decode rows: a token's outputs are the same bits alone, among 7 (8 tokens a pass) and
      // among 13 (16 a pass: a speculative verification).
      const auto x = randn(13 * cols + 1, 99);
      auto dx = up(x);
      DeviceBuffer d7 = gpu_->allocate(13 * rows * 4), d1 = gpu_->allocate(rows * 4);
      gpu_->matmul(dx.as<float>(), 7, m.view, d7.as<float>());
      gpu_->matmul(dx.as<float>() + 4 * cols, 1, m.view, d1.as<float>());
      const auto all = down<float>(d7, 7 * rows), one = down<float>(d1, rows);
      EXPECT_TRUE(std::equal(one.begin(), one.end(), all.begin() + 4 * rows)) << dtype_name(type) << " cols " << cols;
      gpu_->matmul(dx.as<float>(), 13, m.view, d7.as<float>());
      const auto thirteen = down<float>(d7, 13 * rows);
      EXPECT_TRUE(std::equal(all.begin(), all.end(), thirteen.begin())) << dtype_name(type) << " cols " << cols << " 13 tokens";
      // Input one float off 16-byte alignment: the scalar kernel.
      std::vector<float> want(2 * rows);
      ref_->matmul(x.data() + 1, 2, host, want.data());
      gpu_->matmul(dx.as<float>() + 1, 2, m.view, d7.as<float>());
      EXPECT_LE(rel_err(down<float>(d7, want.size()), want), 1e-5) << dtype_name(type) << " cols " << cols << " unaligned";
    }
  }
}

// Embedding rows of every table type (quantized tables in the split-block layout).
TEST_F(CudaTest, EmbeddingEveryTypeMatchesTheReference) {
  for (DType type : {DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q4_K, DType::Q5_K,
                     DType::Q6_K}) {
    const int64_t vocab = 19, cols = 768;
    GpuMatrix m = make_matrix(*gpu_, type, vocab, cols, 61);
    TensorView host = m.view;
    host.packed = nullptr;
    host.packed_layout = PackedLayout::kNone;
    const std::vector<int32_t> ids = {18, 0, 7, 7, 3};
    auto di = up(ids);
    DeviceBuffer dout = gpu_->allocate(ids.size() * cols * 4);
    gpu_->embedding(m.view, di.as<int32_t>(), static_cast<int64_t>(ids.size()), dout.as<float>());
    std::vector<float> want(ids.size() * cols);
    ref_->embedding(host, ids.data(), static_cast<int64_t>(ids.size()), want.data());
    EXPECT_EQ(down<float>(dout, want.size()), want) << dtype_name(type);
  }
}





// The experts' grouping and grouped matmuls on the device: the reference's grouping, and each
// expert's rows the bits a matmul on them alone gives (one launch for every expert; experts with
// no rows skipped), for decode-sized batches (one grouped launch) and a prefill-sized one (each
// expert's rows a matmul of their own, as the experts average 64+ rows), in two weight types.
TEST_F(CudaTest, GroupedExpertMatmulsMatchOneMatmulPerExpert) {
  const int64_t E = 6, k = 2, cols = 256, out = 40;
  for (DType type : {DType::BF16, DType::Q4_0}) {
    std::vector<GpuMatrix> experts;
    std::vector<const TensorView*> ws;
    for (int64_t e = 0; e < E; ++e) experts.push_back(make_matrix(*gpu_, type, out, cols, 40 + e));
    for (const GpuMatrix& m : experts) ws.push_back(&m.view);
    for (int64_t rows : {3, 40, 200}) {
      std::vector<int32_t> choice(rows * k);  // expert 5 never chosen
      for (int64_t t = 0; t < rows; ++t) {
        choice[t * k] = static_cast<int32_t>(t % 3);
        choice[t * k + 1] = static_cast<int32_t>(3 + (t * 7) % 2);
      }
      std::vector<int32_t> first(E + 1), index(rows * k), src(rows * k);
      ref_->moe_group(choice.data(), rows, k, E, first.data(), index.data(), src.data());
      auto dc = up(choice);
      DeviceBuffer df = gpu_->allocate((E + 1) * 4), di = gpu_->allocate(rows * k * 4), ds = gpu_->allocate(rows * k * 4);
      gpu_->moe_group(dc.as<int32_t>(), rows, k, E, df.as<int32_t>(), di.as<int32_t>(), ds.as<int32_t>());
      EXPECT_EQ(down<int32_t>(df, first.size()), first);
      EXPECT_EQ(down<int32_t>(di, index.size()), index);
      EXPECT_EQ(down<int32_t>(ds, src.size()), src);
      const int64_t R = rows * k;
      const auto x = randn(R * cols, 50 + rows);
      auto dx = up(x);
      DeviceBuffer dy = gpu_->allocate(R * out * 4), dsep = gpu_->allocate(R * out * 4);
      gpu_->moe_matmul(dx.as<float>(), df.as<int32_t>(), ws, R, dy.as<float>());
      for (int64_t e = 0; e < E; ++e)
        if (first[e + 1] > first[e])
          gpu_->matmul(dx.as<float>() + first[e] * cols, first[e + 1] - first[e], *ws[e],
                       dsep.as<float>() + first[e] * out);
      EXPECT_EQ(down<float>(dy, R * out), down<float>(dsep, R * out)) << dtype_name(type) << " rows " << rows;
    }
  }
}

// Every fixture through the GPU, as fixture_test.cpp runs them on the CPU.
TEST_F(CudaTest, FixturesMatchTransformers) {
  for (const std::string& name : test::all_fixtures()) {
    LoadOptions opt;
    opt.backend = gpu_.get();
    auto model = load_model(test::fixture_dir(name), opt);
    const auto ref = test::reference(name);
    const auto ids = ref["full_forward"]["input_ids"].get<std::vector<int32_t>>();
    const auto expect = ref["full_forward"]["logits"].get<std::vector<std::vector<double>>>();
    const auto got = test::prompt_logits(*model, *gpu_, ids);
    for (size_t p = 0; p < ids.size(); ++p)
      EXPECT_LE(test::max_abs_diff(got[p].data(), static_cast<int64_t>(got[p].size()), expect[p]), 1e-4)
          << name << " position " << p;
    for (const auto& run : ref["greedy"]["runs"]) {
      const auto prompt = run["prompt"].get<std::vector<int32_t>>();
      const auto want = run["new_tokens"].get<std::vector<int32_t>>();
      EXPECT_EQ(test::greedy(*model, *gpu_, prompt, static_cast<int64_t>(want.size())), want) << name;
    }
  }
}


// Greedy tokens of each sequence alone and among 16 of mixed lengths, and equal to the CPU's.
TEST_F(CudaTest, GreedyTokensAloneInABatchAndOnTheCpuAgree) {
  const std::string name = "lfm2moe_f_tied_expertbias_f32";
  LoadOptions opt;
  opt.backend = gpu_.get();
  auto model = load_model(test::fixture_dir(name), opt);
  auto cpu_model = load_model(test::fixture_dir(name));
  std::mt19937 rng(3);
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 16; ++i) {
    std::vector<int32_t> p(static_cast<size_t>(1 + (i * 13) % 40));
    for (auto& t : p) t = static_cast<int32_t>(rng() % 200);
    prompts.push_back(p);
  }
  EngineOptions eo;
  eo.state = test::f32_plan(128);
  eo.state.parallel = 16;
  Engine batch(*model, *gpu_, nullptr, eo);
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (const auto& p : prompts) streams.push_back(batch.submit(test::greedy_request(p, 12)));
  // All of the batch first: a backend serves one step at a time, and the engine's thread is
  // stepping until every stream is done.
  std::vector<std::vector<int32_t>> together;
  for (auto& s : streams) together.push_back(test::generated_ids(*s));
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(together[i], test::greedy(*model, *gpu_, prompts[i], 12)) << "prompt " << i;
    EXPECT_EQ(together[i], test::greedy(*cpu_model, *ref_, prompts[i], 12)) << "prompt " << i << " vs the CPU";
  }
}

// `steps` decode steps of every sequence together, each taking its greedy token (next: each
// one's token to feed); every step's logits rows are appended to `seen`.
void decode_greedily(Forward& fwd, const std::vector<Sequence*>& seqs, std::vector<int32_t>& next, int steps,
                     std::vector<float>& seen) {
  StepOutput out;
  for (int step = 0; step < steps; ++step) {
    std::vector<BatchItem> items;
    for (size_t i = 0; i < seqs.size(); ++i) items.push_back({seqs[i], std::span<const int32_t>(&next[i], 1), false});
    fwd.step(items, out);
    for (size_t i = 0; i < seqs.size(); ++i) {
      seen.insert(seen.end(), out.row(i), out.row(i) + out.vocab);
      next[i] = static_cast<int32_t>(std::max_element(out.row(i), out.row(i) + out.vocab) - out.row(i));
    }
  }
}

// What run(graphs) saw with CUDA graphs (LFM_CUDA_GRAPHS=stats) and without, and how many runs
// of ops the graphs' backend replayed (from the line it prints when it closes).
struct GraphRuns {
  std::vector<float> replayed, launched;
  long long n_replayed = 0;
  std::string said;
};
template <typename Run>
GraphRuns with_and_without_graphs(Run run) {
  GraphRuns g;
  {
    test::ScopedEnv env("LFM_CUDA_GRAPHS", "stats");
    testing::internal::CaptureStderr();
    g.replayed = run(true);
    g.said = testing::internal::GetCapturedStderr();
  }
  {
    test::ScopedEnv env("LFM_CUDA_GRAPHS", "0");
    g.launched = run(false);
  }
  const size_t at = g.said.find(" replayed");
  if (at != std::string::npos) g.n_replayed = std::atoll(g.said.c_str() + g.said.rfind(' ', at - 1) + 1);
  return g;
}

// CUDA graphs (LFM_CUDA_GRAPHS=1) change how a step is launched, not what it computes: a batch's
// decode steps give the same logits, bit for bit, recorded and replayed as launched op by op,
// dense and MoE. The backend's graph statistics (LFM_CUDA_GRAPHS=stats, printed when it closes)
// show the steps were replayed.
TEST_F(CudaTest, GraphReplayGivesTheSameBitsAsLaunchingOpByOp) {
  for (const std::string& name : {std::string("lfm2_c_layertypes_untied_convbias_f32"), std::string("lfm2moe_f_tied_expertbias_f32")}) {
    auto run = [&](bool graphs) {
      std::vector<float> seen;
      auto be = test::make_gpu_backend(pool_);
      EXPECT_EQ(std::string(be->name()).find("graphs") != std::string::npos, graphs) << be->name();
      LoadOptions opt;
      opt.backend = be.get();
      auto model = load_model(test::fixture_dir(name), opt);
      StatePlanOptions plan = test::f32_plan();
      plan.parallel = 3;
      auto cache = make_state_cache(*model, plan, *be);
      Forward fwd(*model, *be, *cache);
      std::vector<Sequence*> seqs;
      StepOutput out;
      for (const std::vector<int32_t>& p : {std::vector<int32_t>{1, 5, 9, 2}, {7, 3}, {4, 4, 4, 8, 9, 10, 11}}) {
        seqs.push_back(cache->open(64));
        BatchItem item{seqs.back(), p, false};
        fwd.step(std::span<const BatchItem>(&item, 1), out);
        seen.insert(seen.end(), out.logits.begin(), out.logits.end());
      }
      std::vector<int32_t> next = {2, 3, 4};
      // A steady batch's graph is recorded at its second step and replayed from the third on.
      decode_greedily(fwd, seqs, next, test::kGpuIsEmulated ? 8 : 20, seen);
      return seen;
    };
    const GraphRuns g = with_and_without_graphs(run);
    EXPECT_EQ(g.replayed, g.launched) << name;
    EXPECT_GT(g.n_replayed, 0) << name << ": no step was replayed; the backend said: " << g.said;
  }
}

// With graphs, decode steps are padded to a few batch sizes; no padding may move a step to
// another kernel: one token stays one token, 4 or fewer rows keep the fused residual add + norm,
// fewer than 64 stay off cuBLAS. Without graphs (or with LFM_CUDA_BUCKETS=0) nothing is padded.
TEST_F(CudaTest, DecodeBucketsKeepEveryStepOnItsKernels) {
  {
    test::ScopedEnv env("LFM_CUDA_GRAPHS", "1");
    auto be = test::make_gpu_backend(pool_);
    std::set<int64_t> buckets;
    int64_t most_pad = 0;
    for (int64_t n = 1; n <= 700; ++n) {
      const int64_t b = be->decode_step_rows(n);
      ASSERT_GE(b, n);
      most_pad = std::max(most_pad, b - n);
      EXPECT_EQ(n == 1, b == 1) << n;
      EXPECT_EQ(n <= 4, b <= 4) << n;
      EXPECT_EQ(n < 64, b < 64) << n;
      EXPECT_EQ(be->decode_step_rows(b), b) << n;
      if (n <= 512) buckets.insert(b);
    }
    EXPECT_EQ(most_pad, be->decode_step_max_pad());
    EXPECT_LE(buckets.size(), 40u) << "more graphs than ReplayQueue keeps with their heads";
  }
  for (const char* graphs : {"0", "1"}) {  // no graphs; graphs without buckets
    test::ScopedEnv env("LFM_CUDA_GRAPHS", graphs), no_buckets("LFM_CUDA_BUCKETS", "0");
    auto be = test::make_gpu_backend(pool_);
    EXPECT_EQ(be->decode_step_max_pad(), 0);
    for (int64_t n : {3, 5, 63, 65}) EXPECT_EQ(be->decode_step_rows(n), n);
  }
}

// Padded decode steps (a cache with pad state, as the engine makes one for this backend): a
// batch that grows from 3 to 4 sequences (one bucket) and to 5 (the next, 3 pad rows) keeps the
// bits of unpadded steps launched op by op, and its steps replay their layers' graph across the
// batch sizes of a bucket.
TEST_F(CudaTest, PaddedDecodeStepsReplayTheirLayersAcrossABucket) {
  for (const std::string& name : {std::string("lfm2_c_layertypes_untied_convbias_f32"), std::string("lfm2moe_f_tied_expertbias_f32")}) {
    auto run = [&](bool graphs) {
      std::vector<float> seen;
      auto be = test::make_gpu_backend(pool_);
      LoadOptions opt;
      opt.backend = be.get();
      auto model = load_model(test::fixture_dir(name), opt);
      StatePlanOptions plan = test::f32_plan();
      plan.parallel = 5;
      plan.pad_rows = be->decode_step_max_pad();
      EXPECT_EQ(plan.pad_rows > 0, graphs);
      auto cache = make_state_cache(*model, plan, *be);
      Forward fwd(*model, *be, *cache);
      std::vector<Sequence*> seqs;
      std::vector<int32_t> next;
      StepOutput out;
      auto open = [&](const std::vector<int32_t>& prompt) {
        seqs.push_back(cache->open(64));
        BatchItem item{seqs.back(), prompt, false};
        fwd.step(std::span<const BatchItem>(&item, 1), out);
        seen.insert(seen.end(), out.logits.begin(), out.logits.end());
        next.push_back(static_cast<int32_t>(std::max_element(out.logits.begin(), out.logits.end()) - out.logits.begin()));
      };
      auto decode = [&](int steps) { decode_greedily(fwd, seqs, next, steps, seen); };
      for (const std::vector<int32_t>& p : {std::vector<int32_t>{1, 5, 9, 2}, {7, 3}, {4, 4, 4, 8, 9, 10, 11}}) open(p);
      decode(3);  // 3 sequences, padded to 4: the layers recorded at the second step
      open({6, 2, 13});
      decode(2);  // 4: replayed
      open({3, 9});
      decode(3);  // 5, padded to 8
      return seen;
    };
    const GraphRuns g = with_and_without_graphs(run);
    EXPECT_EQ(g.replayed, g.launched) << name;
    // Layers: the third step of 3, both of 4, the third of 5; the head of 3 at its third step.
    EXPECT_GE(g.n_replayed, 5) << name << ": the backend said: " << g.said;
  }
}

// Served: eight requests that finish one after another shrink the engine's batch from 8 to 1.
// With graphs, its decode steps replay their layers across the sizes of a bucket (8 → 5 one
// graph, 4 → 3 another), where without buckets each new size is seen, recorded and only then
// replayed; the tokens are the same either way, and the same as op by op.
TEST_F(CudaTest, AServedBatchThatShrinksKeepsReplayingItsLayers) {
  const std::string name = "lfm2_c_layertypes_untied_convbias_f32";
  auto serve = [&](bool) {
    auto be = test::make_gpu_backend(pool_);
    LoadOptions opt;
    opt.backend = be.get();
    auto model = load_model(test::fixture_dir(name), opt);
    EngineOptions eo;
    eo.state = test::f32_plan(128);
    eo.state.parallel = 8;
    std::vector<float> tokens;
    {
      Engine engine(*model, *be, nullptr, eo);
      std::vector<std::shared_ptr<RequestStream>> streams;
      for (int i = 0; i < 8; ++i)
        streams.push_back(engine.submit(test::greedy_request({static_cast<int32_t>(3 + i), 7, 1}, 3 + 3 * i)));
      for (auto& s : streams)
        for (int32_t t : test::generated_ids(*s)) tokens.push_back(static_cast<float>(t));
    }
    return tokens;
  };
  const GraphRuns buckets = with_and_without_graphs(serve);
  GraphRuns plain;
  {
    test::ScopedEnv no_buckets("LFM_CUDA_BUCKETS", "0");
    plain = with_and_without_graphs(serve);
  }
  EXPECT_EQ(buckets.replayed, buckets.launched);
  EXPECT_EQ(plain.replayed, buckets.replayed);
  // 24 steps: the prompts' and 23 decode steps of 8, 7, … 1 sequences, 3 each (2 of 8). With
  // buckets the layers of 9 steps of 8 → 5 sequences and 4 of 4 → 3 replay (the first two of each
  // bucket are seen and recorded; the cache's slot zeroing after a request ends is a run of its
  // own), and each size's head from its third step; without, a size's third step at best.
  EXPECT_GE(buckets.n_replayed, 15) << buckets.said;
  EXPECT_GT(buckets.n_replayed, plain.n_replayed + 10) << "with buckets: " << buckets.said << "without: " << plain.said;
}

}  // namespace
}  // namespace lfm
