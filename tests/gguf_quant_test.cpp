// Quantized GGUF output: the per-tensor type mix follows llama.cpp's rules, every stored weight is
// within its format's per-element error bound, and Q8_0 keeps greedy decoding unchanged on a model
// with realistic weight scale (llama.cpp's N(0, 0.02) tiny model).
//
// Per-element bounds (amax = largest |w| of the block; f16 scales add a relative 2^-11):
//   F16 |w|·2^-11   BF16 |w|·2^-8   (plus 2^-24 absolute for f16 subnormals)
//   Q8_0 amax·(1/254 + 2^-11)      (half a step of amax/127, plus the f16 scale's rounding × 127)
//   Q4_0 amax·(1/8 + 2^-11)        (step amax/8; the value at -amax's opposite end clamps to level 15,
//   Q5_0 amax·(1/16 + 2^-11)        a full step; same for Q5_0 with step amax/16)
//   Q4_1 amax·(1/15 + 3·2^-11)     (step (max-min)/15 ≤ 2·amax/15, half of it; the f16 scale's
//   Q5_1 amax·(1/31 + 3·2^-11)      rounding × 15 (31) levels and the f16 min's add 3·amax·2^-11)
//   Q3_K amax256·(3/7)             (3-bit symmetric levels -4..3 of a 16-element sub-block: a half
//                                   step is amax16/8 (amax16/4 where the positive end clamps at
//                                   3), and the 6-bit scale's rounding against the block's largest
//                                   adds ~amax256/16 and a refit scale; measured: 0.66 of it)
//   Q4_K amax256·(2/15)            (4-bit levels spanning at most 2·amax of the 256-block: a half step
//                                   is amax/15; the 6-bit sub-block scales and mins at most double it)
//   Q5_K amax256·(2.5/31)          (5-bit levels, same argument, plus the 6-bit sub-block scale and
//                                   min roundings, up to amax/63 + amax/126 per element, which at 5
//                                   bits no longer hide in the doubling: measured 2.08 half steps)
//   Q6_K amax256·(2/63)            (6-bit levels, same argument)
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <sstream>

#include "core/error.h"
#include "core/thread_pool.h"
#include "convert/gguf_export.h"
#include "model/gguf_model.h"
#include "convert/random_checkpoint.h"
#include "kernels/cpu_backend.h"
#include "kernels/dequant.h"
#include "kernels/weight_pack.h"
#include "model/forward.h"
#include "model/model.h"
#include "model_test_util.h"
#include "test_util.h"

namespace lfm {
namespace {

namespace fs = std::filesystem;

// Model::read_ranges: the packed copies plus every mapped byte that no copy stands for, each
// once (what `lfm bench` measures its read ceiling over): no range touches a packed matrix's
// released original, and the bytes add up.
void expect_read_ranges_skip_packed_originals(const Model& m, const std::string& what) {
  std::vector<const TensorView*> packed;
  const ModelWeights& w = m.weights();
  const auto add = [&](const TensorView& t) {
    if (t.packed) packed.push_back(&t);
  };
  add(w.lm_head);
  for (const LayerWeights& l : w.layers) {
    for (const TensorView* t : {&l.conv.in_proj, &l.conv.out_proj, &l.attn.q, &l.attn.k, &l.attn.v, &l.attn.out,
                                &l.ffn.w1, &l.ffn.w3, &l.ffn.w2, &l.moe.router})
      add(*t);
    for (const FfnWeights& e : l.moe.experts)
      for (const TensorView* t : {&e.w1, &e.w3, &e.w2}) add(*t);
  }
  size_t read = 0, replaced = 0;
  for (const auto& [p, n] : m.read_ranges()) {
    read += n;
    const auto* b = static_cast<const uint8_t*>(p);
    for (const TensorView* t : packed) {
      const auto* d = static_cast<const uint8_t*>(t->data);
      EXPECT_TRUE(b + n <= d || b >= d + t->nbytes) << what << ": a read range overlaps a packed matrix's original";
    }
  }
  for (const TensorView* t : packed) replaced += t->nbytes;
  EXPECT_EQ(read, m.weight_bytes() - replaced + m.packed_bytes()) << what;
  EXPECT_EQ(m.read_bytes(), read) << what;  // what `lfm bench` counts a decode step streaming
  // The routed experts as the kernels read them: their packed copies where they have them.
  size_t experts = 0;
  for (const LayerWeights& l : w.layers)
    for (const FfnWeights& e : l.moe.experts)
      for (const TensorView* t : {&e.w1, &e.w3, &e.w2}) experts += t->packed ? packed_size(t->packed_layout, *t) : t->nbytes;
  EXPECT_EQ(m.expert_bytes(), experts) << what;
}

double bound(DType t, float w, float amax_block, float amax_256) {
  const double f16 = std::ldexp(1.0, -11);
  switch (t) {
    case DType::F32: return 0;
    case DType::F16: return std::abs(w) * f16 + std::ldexp(1.0, -24);
    case DType::BF16: return std::abs(w) * std::ldexp(1.0, -8);
    case DType::Q8_0: return amax_block * (1.0 / 254 + f16);
    case DType::Q4_0: return amax_block * (1.0 / 8 + f16);
    case DType::Q5_0: return amax_block * (1.0 / 16 + f16);
    case DType::Q4_1: return amax_block * (1.0 / 15 + 3 * f16);
    case DType::Q5_1: return amax_block * (1.0 / 31 + 3 * f16);
    case DType::Q3_K: return amax_256 * (3.0 / 7);
    case DType::Q4_K: return amax_256 * (2.0 / 15);
    case DType::Q5_K: return amax_256 * (2.5 / 31);
    case DType::Q6_K: return amax_256 * (2.0 / 63);
    default: return -1;
  }
}

class GgufQuantized : public ::testing::Test {
 protected:
  test::TempDir dir_{"lfm_gguf_quant"};
};

TEST_F(GgufQuantized, EveryWeightWithinItsFormatBound) {
  for (const char* shape : {"tiny", "tiny-moe"}) {
    for (gguf::FileType ft : gguf::all_file_types()) {
      if (ft == gguf::FileType::F32) continue;
      gguf::RandomCheckpointOptions opt;
      opt.shape = shape;
      opt.seed = 11;
      opt.gguf_type = ft;
      const std::string path = (dir_ / "m.gguf").string();
      gguf::write_random_gguf(path, opt);
      auto model = load_model(path);
      gguf::RandomRowProducer gen(opt.seed);
      double worst_ratio = 0;
      for (const ExpectedTensor& t : expected_tensors(model->config(), false)) {
        const TensorView* v = model->source().find(t.name);
        ASSERT_TRUE(v) << t.name;
        const int64_t cols = t.shape.back(), rows = t.matrix || t.shape.size() > 1 ? v->numel() / cols : 1;
        std::vector<float> want(static_cast<size_t>(v->numel())), got(want.size());
        gen.rows(t, 0, rows, want.data());
        dequantize_row(v->dtype, v->data, got.data(), v->numel());
        const int64_t blk = dtype_traits(v->dtype).block_elems;
        std::vector<float> amax256(static_cast<size_t>((v->numel() + 255) / 256), 0.0f);
        for (int64_t k = 0; k < v->numel(); ++k) amax256[k / 256] = std::max(amax256[k / 256], std::abs(want[k]));
        for (int64_t i = 0; i < v->numel(); i += blk) {
          float amax_b = 0;
          for (int64_t k = i; k < i + blk; ++k) amax_b = std::max(amax_b, std::abs(want[k]));
          const float amax_256 = amax256[i / 256];
          for (int64_t k = i; k < i + blk; ++k) {
            const double b = bound(v->dtype, want[k], amax_b, amax_256);
            ASSERT_GE(b, 0) << "no bound for " << dtype_name(v->dtype);
            const double e = std::abs(double(got[k]) - double(want[k]));
            ASSERT_LE(e, b) << shape << " " << gguf::file_type_label(ft) << " " << t.name << " [" << k << "] "
                            << dtype_name(v->dtype);
            if (b > 0) worst_ratio = std::max(worst_ratio, e / b);
          }
        }
      }
      std::printf("[ %-8s %-6s ] worst error / bound = %.3f\n", shape, gguf::file_type_label(ft), worst_ratio);
    }
  }
}

TEST_F(GgufQuantized, Q4KMTypeMixFollowsLlamaCpp) {
  gguf::RandomCheckpointOptions opt;
  opt.shape = "tiny-moe";  // cAcA, 1 dense layer then 3 MoE layers, rows of 256
  opt.gguf_type = gguf::FileType::Q4_K_M;
  const std::string path = (dir_ / "m.gguf").string();
  gguf::write_random_gguf(path, opt);
  gguf::GgufFile f(path);
  auto type = [&](const std::string& n) {
    const gguf::TensorInfo* t = f.find_tensor(n);
    return t ? std::string(gguf::ggml_type_name(t->ggml_type)) : std::string("missing");
  };
  EXPECT_EQ(type("token_embd.weight"), "Q6_K");  // tied: it is the output matrix
  EXPECT_EQ(type("token_embd_norm.weight"), "F32");
  EXPECT_EQ(type("blk.0.shortconv.conv.weight"), "F32");
  EXPECT_EQ(type("blk.0.shortconv.in_proj.weight"), "Q4_K");
  // use_more_bits(i, 4) holds for i = 2, 3 (ffn_down over all 4 layers).
  EXPECT_EQ(type("blk.0.ffn_down.weight"), "Q4_K");
  EXPECT_EQ(type("blk.1.ffn_down_exps.weight"), "Q4_K");
  EXPECT_EQ(type("blk.2.ffn_down_exps.weight"), "Q6_K");
  EXPECT_EQ(type("blk.3.ffn_down_exps.weight"), "Q6_K");
  EXPECT_EQ(type("blk.3.ffn_gate_exps.weight"), "Q4_K");
  EXPECT_EQ(type("blk.3.ffn_gate_inp.weight"), "F32");
  EXPECT_EQ(type("blk.3.exp_probs_b.bias"), "F32");
  // attn_v counted over the 2 attention layers: use_more_bits(1, 2) holds, (0, 2) does not.
  EXPECT_EQ(type("blk.1.attn_v.weight"), "Q4_K");
  EXPECT_EQ(type("blk.3.attn_v.weight"), "Q6_K");
  const gguf::TensorInfo* e = f.find_tensor("blk.3.ffn_up_exps.weight");
  ASSERT_TRUE(e);
  EXPECT_EQ(e->ne, (std::vector<int64_t>{256, 256, 4}));  // {d, Fm, E}
  // Row length 64 (the HF fixtures): K-quants fall back as llama.cpp does.
  gguf::QuantPolicy p(gguf::FileType::Q4_K_M, parse_model_config(gguf::random_shape_config("tiny")));
  EXPECT_EQ(p.choose("blk.0.ffn_up.weight", {64, 192}), DType::Q5_0);
  EXPECT_EQ(p.choose("blk.3.ffn_down.weight", {192, 64}), DType::Q8_0);  // Q6_K → Q8_0
  EXPECT_EQ(p.choose("blk.0.ffn_up.weight", {48, 64}), DType::F16);     // not even Q5_0 fits
  EXPECT_EQ(p.choose("token_embd.weight", {64, 512}), DType::Q8_0);
  EXPECT_TRUE(gguf::use_more_bits(0, 16) && gguf::use_more_bits(1, 16) && !gguf::use_more_bits(2, 16) &&
              gguf::use_more_bits(4, 16) && gguf::use_more_bits(15, 16) && !gguf::use_more_bits(5, 16));
}

// The other mixes on the 1.2B shape (16 layers, attention at 2, 5, 8, 10, 12, 14), as
// llama-quantize chooses them at llama.cpp 84f7129 (checked there by quantizing the same F16 file).
TEST_F(GgufQuantized, BlockAndKQuantMixesFollowLlamaCpp) {
  const ModelConfig cfg = parse_model_config(gguf::random_shape_config("1.2B"));
  auto types = [&](gguf::FileType ft, const char* tensor) {
    gguf::QuantPolicy p(ft, cfg);
    std::string out;
    for (int64_t l = 0; l < cfg.n_layers; ++l) {
      const bool attn = cfg.layer_kinds[static_cast<size_t>(l)] == LayerKind::Attention;
      if (std::string(tensor).starts_with("attn") && !attn) continue;
      const std::string name = "blk." + std::to_string(l) + "." + tensor + ".weight";
      out += (out.empty() ? "" : " ") + std::to_string(l) + ":" + dtype_name(p.choose(name, {2048, 2048}));
    }
    return out;
  };
  // use_more_bits over 16 layers: 0, 1, 4, 7, 10, 13, 14, 15; over the 6 attention layers: the
  // 3rd and 6th (layers 8 and 14).
  const std::string more_bits_down =
      "0:Q6_K 1:Q6_K 2:Q5_K 3:Q5_K 4:Q6_K 5:Q5_K 6:Q5_K 7:Q6_K 8:Q5_K 9:Q5_K 10:Q6_K 11:Q5_K 12:Q5_K 13:Q6_K "
      "14:Q6_K 15:Q6_K";
  EXPECT_EQ(types(gguf::FileType::Q5_K_M, "ffn_down"), more_bits_down);
  EXPECT_EQ(types(gguf::FileType::Q5_K_M, "attn_v"), "2:Q5_K 5:Q5_K 8:Q6_K 10:Q5_K 12:Q5_K 14:Q6_K");
  EXPECT_EQ(types(gguf::FileType::Q5_K_M, "attn_output"), "2:Q5_K 5:Q5_K 8:Q5_K 10:Q5_K 12:Q5_K 14:Q5_K");
  // Q4_K_S: Q5_K for the first 4 attn_v and the first 16/8 ffn_down.
  EXPECT_EQ(types(gguf::FileType::Q4_K_S, "attn_v"), "2:Q5_K 5:Q5_K 8:Q5_K 10:Q5_K 12:Q4_K 14:Q4_K");
  EXPECT_EQ(types(gguf::FileType::Q4_K_S, "ffn_down").substr(0, 30), "0:Q5_K 1:Q5_K 2:Q4_K 3:Q4_K 4:");
  EXPECT_EQ(types(gguf::FileType::Q4_K_S, "ffn_down").find("Q5_K", 20), std::string::npos);
  // Q3_K_M: attn_v Q5_K in the first 2 attention layers then Q4_K; ffn_down Q5_K below 16/16 = 1
  // then Q4_K; attn_output Q4_K. Q3_K_L: Q5_K for the three. Q3_K_S: Q3_K throughout.
  EXPECT_EQ(types(gguf::FileType::Q3_K_M, "attn_v"), "2:Q5_K 5:Q5_K 8:Q4_K 10:Q4_K 12:Q4_K 14:Q4_K");
  EXPECT_EQ(types(gguf::FileType::Q3_K_M, "ffn_down").substr(0, 21), "0:Q5_K 1:Q4_K 2:Q4_K ");
  EXPECT_EQ(types(gguf::FileType::Q3_K_M, "ffn_down").find("Q5_K", 7), std::string::npos);
  EXPECT_EQ(types(gguf::FileType::Q3_K_M, "attn_output"), "2:Q4_K 5:Q4_K 8:Q4_K 10:Q4_K 12:Q4_K 14:Q4_K");
  EXPECT_EQ(types(gguf::FileType::Q3_K_M, "ffn_up").find("Q4_K"), std::string::npos);
  EXPECT_EQ(types(gguf::FileType::Q3_K_L, "attn_output"), "2:Q5_K 5:Q5_K 8:Q5_K 10:Q5_K 12:Q5_K 14:Q5_K");
  EXPECT_EQ(types(gguf::FileType::Q3_K_L, "ffn_down").find("Q4_K"), std::string::npos);
  EXPECT_EQ(types(gguf::FileType::Q3_K_L, "ffn_down").find("Q3_K"), std::string::npos);
  // Q3_K_S, Q5_K_S, Q6_K and the block formats: one type for every layer.
  for (auto [ft, want] : {std::pair{gguf::FileType::Q3_K_S, "Q3_K"}, {gguf::FileType::Q5_K_S, "Q5_K"},
                          {gguf::FileType::Q6_K, "Q6_K"},
                          {gguf::FileType::Q4_1, "Q4_1"}, {gguf::FileType::Q5_0, "Q5_0"},
                          {gguf::FileType::Q5_1, "Q5_1"}}) {
    for (const char* t : {"ffn_down", "ffn_up", "attn_v", "attn_q", "shortconv.in_proj"}) {
      std::istringstream got(types(ft, t));
      for (std::string item; got >> item;)
        EXPECT_EQ(item.substr(item.find(':') + 1), want) << gguf::file_type_label(ft) << " " << t << " " << item;
    }
    gguf::QuantPolicy p(ft, cfg);
    EXPECT_EQ(p.choose("token_embd.weight", {2048, 65536}), DType::Q6_K) << gguf::file_type_label(ft);
    EXPECT_EQ(p.choose("blk.0.shortconv.conv.weight", {3, 2048}), DType::F32);
  }
  // K-quant fallbacks on short rows: Q5_K → Q5_1, and the 8-expert rule for attn_k / attn_v.
  const ModelConfig small = parse_model_config(gguf::random_shape_config("tiny"));
  EXPECT_EQ(gguf::QuantPolicy(gguf::FileType::Q5_K_M, small).choose("blk.0.ffn_up.weight", {64, 192}), DType::Q5_1);
  EXPECT_EQ(gguf::QuantPolicy(gguf::FileType::Q6_K, small).choose("blk.0.ffn_up.weight", {64, 192}), DType::Q8_0);
  EXPECT_EQ(gguf::QuantPolicy(gguf::FileType::Q3_K_S, small).choose("blk.0.ffn_up.weight", {64, 192}), DType::Q4_0);
  ModelConfig eight = cfg;
  eight.n_experts = 8;
  EXPECT_EQ(gguf::QuantPolicy(gguf::FileType::Q5_K_M, eight).choose("blk.2.attn_k.weight", {2048, 512}), DType::Q8_0);
  EXPECT_EQ(gguf::QuantPolicy(gguf::FileType::Q4_K_S, eight).choose("blk.2.attn_output.weight", {2048, 2048}),
            DType::Q5_K);
  EXPECT_EQ(gguf::QuantPolicy(gguf::FileType::Q4_0, eight).choose("blk.2.attn_output.weight", {2048, 2048}),
            DType::Q4_0);
  EXPECT_EQ(gguf::QuantPolicy(gguf::FileType::Q3_K_M, eight).choose("blk.2.attn_output.weight", {2048, 2048}),
            DType::Q5_K);
  EXPECT_EQ(gguf::QuantPolicy(gguf::FileType::Q3_K_L, eight).choose("blk.2.attn_output.weight", {2048, 2048}),
            DType::Q3_K);
  // Names round-trip, any case; unknown names are refused with the list.
  for (gguf::FileType ft : gguf::all_file_types())
    EXPECT_EQ(gguf::parse_file_type(gguf::file_type_label(ft)), ft);
  EXPECT_EQ(gguf::parse_file_type("q5_k_m"), gguf::FileType::Q5_K_M);
  try {
    gguf::parse_file_type("q2_k");
    ADD_FAILURE() << "q2_k accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("q2_k"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("q5_k_s"), std::string::npos);
  }
}

TEST_F(GgufQuantized, Q8_0KeepsGreedyTokensOnLlamaCppTinyModel) {
  const std::string src = test::data_dir() + "/gguf_llamacpp/lfm2-tiny-random-f32.gguf";
  auto f32 = load_model(src);
  const std::string q8 = (dir_ / "q8.gguf").string();
  {
    gguf::SourceRowProducer rows(f32->source());
    gguf::ExportOptions opt;
    opt.type = gguf::FileType::Q8_0;
    gguf::write_gguf_model(q8, f32->config(), rows, opt);
  }
  auto q = load_model(q8);
  ThreadPool pool(2);
  auto be = make_reference_backend(pool);
  for (const std::vector<int32_t>& prompt : {std::vector<int32_t>{1, 484, 326, 355, 461, 302},
                                             std::vector<int32_t>{1, 43, 164, 157}, std::vector<int32_t>{1, 18, 263}}) {
    const auto want = test::greedy(*f32, *be, prompt, 24, nullptr, test::f32_plan(64));
    const auto got = test::greedy(*q, *be, prompt, 24, nullptr, test::f32_plan(64));
    ASSERT_EQ(want.size(), 24u);
    EXPECT_EQ(got, want);
  }
}

// The model packs its quantized matrices for the CPU kernels at load (kernels/weight_pack.h) when
// the selected backend reads that layout; the packed model's logits agree with the unpacked one's
// within 3% of the largest logit, dense and MoE. (Q4_0/Q8_0 take
// int8 activations either way: measured ≤ 0.7%; unpacked K-quants multiply float activations, so
// their difference is the int8 activation rounding through every layer: measured ≤ 1.8%.)
TEST_F(GgufQuantized, PackedModelMatchesUnpacked) {
  ThreadPool pool(2);
  auto be = make_cpu_backend(pool);
  for (const char* shape : {"tiny", "tiny-moe"}) {
    for (auto [ft, main] : {std::pair{gguf::FileType::Q8_0, DType::Q8_0}, {gguf::FileType::Q4_0, DType::Q4_0},
                            {gguf::FileType::Q4_1, DType::Q4_1}, {gguf::FileType::Q5_0, DType::Q5_0},
                            {gguf::FileType::Q5_1, DType::Q5_1}, {gguf::FileType::Q3_K_S, DType::Q3_K},
                            {gguf::FileType::Q4_K_M, DType::Q4_K},
                            {gguf::FileType::Q5_K_M, DType::Q5_K}, {gguf::FileType::Q6_K, DType::Q6_K},
                            {gguf::FileType::BF16, DType::BF16}}) {
      // MoE with 3- to 6-bit weights: float vs int8 activations can flip a near-tie in expert
      // selection, which changes a token's output wholesale (not a kernel error; the kernels are
      // compared with the reference in simd_kernels_test). Seen with the K-quants, and on an
      // AVX2-only Zen 2 with Q4_1 (position 6 of this prompt); Q8_0 and BF16 stay clear of it.
      if (std::string(shape) == "tiny-moe" && main != DType::Q8_0 && main != DType::BF16) continue;
      gguf::RandomCheckpointOptions opt;
      opt.shape = shape;
      opt.seed = 5;
      opt.gguf_type = ft;
      const std::string path = (dir_ / "p.gguf").string();
      gguf::write_random_gguf(path, opt);
      auto packed = load_model(path);
      auto plain = load_model(path, LoadOptions{.pack = false});
      const bool expect_packing = cpu_packed_layout(main) != PackedLayout::kNone;
      EXPECT_EQ(packed->packed_bytes() > 0, expect_packing) << shape << " " << gguf::file_type_label(ft);
      EXPECT_EQ(plain->packed_bytes(), 0u);
      const std::string what = std::string(shape) + " " + gguf::file_type_label(ft);
      expect_read_ranges_skip_packed_originals(*packed, what);
      expect_read_ranges_skip_packed_originals(*plain, what + " unpacked");
      const std::vector<int32_t> ids = {1, 7, 300, 12, 99, 5, 500, 42, 8};
      const auto a = test::prompt_logits(*packed, *be, ids);
      const auto b = test::prompt_logits(*plain, *be, ids);
      ASSERT_EQ(a.size(), b.size());
      for (size_t t = 0; t < a.size(); ++t) {
        float scale = 0;
        for (float v : b[t]) scale = std::max(scale, std::abs(v));
        EXPECT_LE(test::max_abs_diff(a[t], b[t]), 0.03 * scale + 1e-4)
            << shape << " " << gguf::file_type_label(ft) << " position " << t;
      }
    }
  }
}

}  // namespace
}  // namespace lfm
