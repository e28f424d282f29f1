// lfm gen-random --audio with speech output (convert/random_audio_output.h): the folder of the tiny
// shape holds the depthformer under transformers' names and an audio_detokenizer/ sub-folder with
// the shapes the configs imply; the configs read back (lfm's parsers, the `depthformer` dict);
// the real lfm2.5-audio shapes are the ones llama.cpp's liquid-audio runner hard-codes
// (docs/design/speech_output_research.md); bytes depend on the seed alone; lfm2-audio stays
// speech-input only; weights are finite with the scales that keep a forward pass in range.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>

#include <nlohmann/json.hpp>

#include "convert/random_audio.h"
#include "convert/random_audio_output.h"
#include "convert/random_checkpoint.h"
#include "core/error.h"
#include "formats/safetensors.h"
#include "kernels/dequant.h"
#include "model/audio_config.h"
#include "model/config.h"
#include "test_util.h"

namespace lfm {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using Shape = std::vector<int64_t>;

json read_json(const fs::path& p) {
  std::ifstream f(p);
  return json::parse(f);
}

std::vector<float> values(const TensorView& t) {
  std::vector<float> v(static_cast<size_t>(t.numel()));
  dequantize_row(t.dtype, t.data, v.data(), t.numel());
  return v;
}

std::map<std::string, Shape> shapes_of(const std::vector<ExpectedTensor>& ts) {
  std::map<std::string, Shape> m;
  for (const ExpectedTensor& t : ts) m[t.name] = t.shape;
  return m;
}

class GenRandomAudioOutput : public ::testing::Test {
 protected:
  // The tiny backbone (d 256) with the tiny audio shape, float32 so values read back exactly.
  static void SetUpTestSuite() {
    dir_ = new test::TempDir("lfm_gen_audio_out");
    gguf::RandomCheckpointOptions opt;
    opt.shape = "tiny";
    opt.audio = "tiny";
    opt.seed = 5;
    opt.hf_dtype = DType::F32;
    gguf::write_random_hf(folder(), opt);
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  static std::string folder() { return (*dir_ / "tiny").string(); }
  static test::TempDir* dir_;
};
test::TempDir* GenRandomAudioOutput::dir_ = nullptr;

TEST_F(GenRandomAudioOutput, TinyFolderHasTheDepthformerUnderTransformersNames) {
  const SafetensorsCheckpoint ck(folder());
  // tiny: D 256; depth dim 32, 4 heads, 2 kv heads (head_dim 8), FFN 64, 2 layers; 2 codebooks of 16.
  const std::map<std::string, Shape> want = {
      {"model.depthformer.layers.0.operator.qkv_proj.weight", {32 + 2 * 2 * 8, 32}},
      {"model.depthformer.layers.1.operator.out_proj.weight", {32, 32}},
      {"model.depthformer.layers.1.operator.bounded_attention.q_layernorm.weight", {8}},
      {"model.depthformer.layers.0.operator.bounded_attention.k_layernorm.weight", {8}},
      {"model.depthformer.layers.0.feed_forward.w1.weight", {64, 32}},
      {"model.depthformer.layers.1.feed_forward.w2.weight", {32, 64}},
      {"model.depthformer.layers.1.feed_forward.w3.weight", {64, 32}},
      {"model.depthformer.layers.0.operator_norm.weight", {32}},
      {"model.depthformer.layers.1.ffn_norm.weight", {32}},
      {"model.depth_linear.weight", {2 * 32, 256}},
      {"model.depth_linear.bias", {2 * 32}},
      {"model.depth_embeddings.0.embedding.weight", {16, 32}},
      {"model.depth_embeddings.1.embedding.weight", {16, 32}},
      {"model.depth_embeddings.1.embedding_norm.weight", {32}},
      {"model.audio_embedding.embedding.weight", {2 * 16, 256}},
      {"model.audio_embedding.to_logits.weight", {2 * 16, 256}},
  };
  for (const auto& [name, shape] : want) {
    const TensorView* t = ck.find(name);
    ASSERT_NE(t, nullptr) << name;
    EXPECT_EQ(t->shape, shape) << name;
  }
  size_t depth = 0;
  for (const std::string& n : ck.names()) {
    if (n.starts_with("model.depth_embeddings.")) {
      EXPECT_EQ(n.find("to_logits"), std::string::npos) << n << ": the depth heads are tied, so transformers stores none";
    }
    EXPECT_EQ(n.find("depthformer.layers.2."), std::string::npos) << n;
    depth += n.starts_with("model.depthformer.") || n.starts_with("model.depth_");
  }
  EXPECT_EQ(depth, 2 * 9 + 2 + 2 * 2);
  EXPECT_EQ(shapes_of(gguf::random_audio_output_tensors("tiny", 256)).size(), depth);
}

TEST_F(GenRandomAudioOutput, TinyDetokenizerFolderMatchesItsConfig) {
  const fs::path sub = fs::path(folder()) / "audio_detokenizer";
  const json c = read_json(sub / "config.json");
  EXPECT_EQ(c.at("architectures"), json::array({"Lfm25AudioTokenizer"}));
  EXPECT_EQ(c.at("model_type"), "lfm2");
  EXPECT_EQ(c.at("layer_types"), json::array({"conv", "sliding_attention", "conv", "sliding_attention"}));
  EXPECT_EQ(c.at("sliding_window"), 12);
  EXPECT_EQ(c.at("output_size"), 1282);
  EXPECT_EQ(c.at("torch_dtype"), "float32");
  const SafetensorsCheckpoint ck(sub.string());
  const std::map<std::string, Shape> want = {
      {"emb.emb.weight", {2 * 15, 32}},  // codebooks × codes (the end-of-audio code has no row)
      {"lfm.embed_tokens.weight", {16, 32}},
      {"lfm.embedding_norm.weight", {32}},
      {"lfm.layers.0.conv.in_proj.weight", {3 * 32, 32}},
      {"lfm.layers.0.conv.conv.weight", {32, 1, 3}},
      {"lfm.layers.2.conv.out_proj.weight", {32, 32}},
      {"lfm.layers.1.self_attn.q_proj.weight", {32, 32}},
      {"lfm.layers.3.self_attn.k_proj.weight", {2 * 8, 32}},
      {"lfm.layers.3.self_attn.v_proj.weight", {2 * 8, 32}},
      {"lfm.layers.1.self_attn.out_proj.weight", {32, 32}},
      {"lfm.layers.1.self_attn.q_layernorm.weight", {8}},
      {"lfm.layers.0.feed_forward.w1.weight", {64, 32}},
      {"lfm.layers.3.feed_forward.w2.weight", {32, 64}},
      {"lfm.layers.3.ffn_norm.weight", {32}},
      {"lin.weight", {1282, 32}},
      {"lin.bias", {1282}},
      {"istft.window", {1280}},
  };
  for (const auto& [name, shape] : want) {
    const TensorView* t = ck.find(name);
    ASSERT_NE(t, nullptr) << name;
    EXPECT_EQ(t->shape, shape) << name;
  }
  EXPECT_EQ(ck.find("lfm.layers.1.conv.in_proj.weight"), nullptr) << "layer 1 is a sliding-window attention layer";
  EXPECT_EQ(ck.names().size(), gguf::random_detokenizer_tensors("tiny").size());
  // The iSTFT window: torch.hann_window(1280), periodic, stored F32.
  const TensorView* w = ck.find("istft.window");
  EXPECT_EQ(w->dtype, DType::F32);
  const std::vector<float> h = values(*w);
  EXPECT_EQ(h[0], 0.0f);
  EXPECT_NEAR(h[640], 1.0f, 1e-7);
  EXPECT_NEAR(h[320], 0.5f, 1e-6);
  for (size_t n = 1; n < 1280; ++n) EXPECT_NEAR(h[n], h[1280 - n], 1e-6) << n;
}

TEST_F(GenRandomAudioOutput, ConfigsReadBack) {
  const json j = read_json(fs::path(folder()) / "config.json");
  EXPECT_TRUE(is_audio_config(j));
  EXPECT_EQ(parse_audio_config(j).hidden_size, 64);  // the encoder still parses
  EXPECT_EQ(parse_model_config(audio_text_config_of(j)).hidden_size, 256);
  EXPECT_EQ(j.at("depthformer"), gguf::random_depthformer_config("tiny"));
  const json& d = j.at("depthformer");
  EXPECT_EQ(d.at("layers"), 2);
  EXPECT_EQ(d.at("dim"), 32);
  EXPECT_EQ(d.at("num_attention_heads"), 4);
  EXPECT_EQ(d.at("num_key_value_heads"), 2);
  EXPECT_EQ(d.at("intermediate_size"), 64);
  EXPECT_EQ(d.at("tie"), true);
  EXPECT_EQ(j.at("codebooks"), 2);
  EXPECT_EQ(j.at("audio_vocab_size"), 16);
  EXPECT_EQ(j.at("audio_eos_token_id"), 15);
  EXPECT_EQ(j.at("audio_start_token_id"), 128);
  EXPECT_EQ(j.at("text_end_token_id"), 130);
  EXPECT_EQ(j.at("interleaved_n_text"), 6);
  EXPECT_EQ(j.at("interleaved_n_audio"), 12);
  // The detokenizer's config as an LFM2 (sliding layers read as attention): sizes of its tensors.
  json dc = read_json(fs::path(folder()) / "audio_detokenizer" / "config.json");
  for (json& t : dc["layer_types"])
    if (t == "sliding_attention") t = "full_attention";
  dc["architectures"] = {"Lfm2Model"};  // lfm's parser knows the bare model, not the tokenizer's name
  const ModelConfig m = parse_model_config(dc);
  EXPECT_EQ(m.hidden_size, 32);
  EXPECT_EQ(m.n_layers, 4);
  EXPECT_EQ(m.n_heads, 4);
  EXPECT_EQ(m.n_kv_heads, 2);
  EXPECT_EQ(m.ffn_dim, 64);
  EXPECT_EQ(m.layer_kinds[1], LayerKind::Attention);
  EXPECT_EQ(m.layer_kinds[2], LayerKind::Conv);
}

// The real shapes, from the functions (writing the 1.2B folder is a benchmark's job, not a test's).
TEST_F(GenRandomAudioOutput, Lfm25AudioHasTheRunnersShapes) {
  const json j = gguf::random_audio_config(gguf::random_shape_config("1.2B"), "lfm2.5-audio");
  EXPECT_EQ(j.at("depthformer").at("layers"), 6);
  EXPECT_EQ(j.at("depthformer").at("dim"), 1024);
  EXPECT_EQ(j.at("audio_eos_token_id"), 2048);
  EXPECT_EQ(parse_audio_config(j).hidden_size, 512);
  const auto depth = shapes_of(gguf::random_audio_output_tensors("lfm2.5-audio", 2048));
  EXPECT_EQ(depth.size(), 6u * 9 + 2 + 8 * 2);
  EXPECT_EQ(depth.at("model.depthformer.layers.5.operator.qkv_proj.weight"), (Shape{1024 + 2 * 8 * 32, 1024}));
  EXPECT_EQ(depth.at("model.depthformer.layers.0.operator.bounded_attention.q_layernorm.weight"), Shape{32});
  EXPECT_EQ(depth.at("model.depthformer.layers.0.feed_forward.w1.weight"), (Shape{2816, 1024}));
  EXPECT_EQ(depth.at("model.depth_linear.weight"), (Shape{8 * 1024, 2048}));
  EXPECT_EQ(depth.at("model.depth_embeddings.7.embedding.weight"), (Shape{2049, 1024}));
  const json dc = gguf::random_detokenizer_config("lfm2.5-audio");
  EXPECT_EQ(dc.at("layer_types"), json::array({"conv", "conv", "sliding_attention", "conv", "sliding_attention",
                                               "conv", "sliding_attention", "conv"}));
  EXPECT_EQ(dc.at("sliding_window"), 30);
  EXPECT_EQ(dc.at("num_attention_heads"), 16);
  EXPECT_EQ(dc.at("num_key_value_heads"), 8);
  const auto detok = shapes_of(gguf::random_detokenizer_tensors("lfm2.5-audio"));
  EXPECT_EQ(detok.at("emb.emb.weight"), (Shape{8 * 2048, 512}));
  EXPECT_EQ(detok.at("lfm.embed_tokens.weight"), (Shape{65536, 512}));
  EXPECT_EQ(detok.at("lfm.layers.7.feed_forward.w1.weight"), (Shape{2304, 512}));  // 3328 auto-adjusted
  EXPECT_EQ(detok.at("lfm.layers.6.self_attn.k_proj.weight"), (Shape{8 * 32, 512}));
  EXPECT_EQ(detok.at("lfm.layers.5.conv.in_proj.weight"), (Shape{3 * 512, 512}));
  EXPECT_EQ(detok.at("lin.weight"), (Shape{1282, 512}));
  EXPECT_EQ(detok.count("lfm.layers.2.conv.in_proj.weight"), 0u);
  // LFM2-Audio (Mimi output, not generated) keeps the speech-input-only layout.
  EXPECT_FALSE(gguf::random_audio_has_output("lfm2-audio"));
  EXPECT_TRUE(gguf::random_audio_output_tensors("lfm2-audio", 2048).empty());
  EXPECT_FALSE(gguf::random_audio_config(gguf::random_shape_config("1.2B"), "lfm2-audio").contains("depthformer"));
  EXPECT_THROW(gguf::random_detokenizer_config("lfm2-audio"), Error);
}

TEST_F(GenRandomAudioOutput, SameSeedSameBytesOtherSeedOtherBytes) {
  gguf::RandomCheckpointOptions opt;
  opt.shape = "tiny";
  opt.audio = "tiny";
  opt.seed = 5;
  opt.hf_dtype = DType::F32;
  const std::string same = (*dir_ / "same").string(), other = (*dir_ / "other").string();
  gguf::write_random_hf(same, opt);
  opt.seed = 6;
  gguf::write_random_hf(other, opt);
  for (const std::string f : {"config.json", "model.safetensors", "audio_detokenizer/config.json",
                              "audio_detokenizer/model.safetensors"})
    EXPECT_EQ(test::read_file(fs::path(folder()) / f), test::read_file(fs::path(same) / f)) << f;
  const SafetensorsCheckpoint a(folder() + "/audio_detokenizer"), b(other + "/audio_detokenizer");
  EXPECT_NE(values(*a.find("emb.emb.weight")), values(*b.find("emb.emb.weight")));
  EXPECT_NE(values(*a.find("lin.weight")), values(*b.find("lin.weight")));
  EXPECT_EQ(values(*a.find("istft.window")), values(*b.find("istft.window")));  // not random
  const SafetensorsCheckpoint m(folder()), n(other);
  for (const char* t : {"model.depthformer.layers.0.operator.qkv_proj.weight", "model.depth_linear.weight",
                        "model.depth_embeddings.1.embedding.weight"})
    EXPECT_NE(values(*m.find(t)), values(*n.find(t))) << t;
}

// Matrices ~ U(−0.0346, 0.0346) (std 0.02), norm gains 1, biases 0: with these the detokenizer's
// log-magnitudes (lin of an RMS-normalised state) have std ≈ 0.02·√hidden ≤ 0.45 and the depth
// logits ≈ 0.02·√dim ≤ 0.64, far from exp() overflow or a one-hot softmax.
TEST_F(GenRandomAudioOutput, ValuesAreFiniteAndScaled) {
  for (const std::string& dir : {folder(), folder() + "/audio_detokenizer"}) {
    const SafetensorsCheckpoint ck(dir);
    for (const std::string& n : ck.names()) {
      if (n.find("conformer") != std::string::npos || n.find("audio_adapter") != std::string::npos) continue;
      const std::vector<float> v = values(*ck.find(n));
      float lo = v[0], hi = v[0];
      for (float x : v) {
        ASSERT_TRUE(std::isfinite(x)) << n;
        lo = std::min(lo, x);
        hi = std::max(hi, x);
      }
      if (n == "istft.window") continue;
      if (n.ends_with("norm.weight")) {
        EXPECT_EQ(lo, 1.0f) << n;
        EXPECT_EQ(hi, 1.0f) << n;
      } else if (n.ends_with(".bias")) {
        EXPECT_EQ(lo, 0.0f) << n;
        EXPECT_EQ(hi, 0.0f) << n;
      } else {
        EXPECT_GE(lo, -0.0347f) << n;
        EXPECT_LE(hi, 0.0347f) << n;
        EXPECT_GT(hi - lo, 0.02f) << n << ": not random";
      }
    }
  }
}

}  // namespace
}  // namespace lfm
