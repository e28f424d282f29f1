// Interoperability with llama.cpp: a GGUF written by llama.cpp's own gguf-py (tests/data/gguf_llamacpp)
// must load through our reader and reproduce the logits llama.cpp computed on it, within 1e-4,
// through both the prefill path (all 32 tokens in one step) and the decode path (one at a time).
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "core/thread_pool.h"
#include "model/gguf_model.h"
#include "formats/gguf_reader.h"
#include "model/forward.h"
#include "model_test_util.h"
#include "test_util.h"

namespace lfm {
namespace {

constexpr double kTol = 1e-4;

std::string tiny_path() { return test::data_dir() + "/gguf_llamacpp/lfm2-tiny-random-f32.gguf"; }

struct LlamaLogits {
  std::vector<int32_t> ids;
  std::vector<std::vector<double>> rows;
};

// One line per position: "pos token logit_0 ... logit_{V-1}".
LlamaLogits read_logits() {
  std::ifstream in(test::data_dir() + "/gguf_llamacpp/lfm2-tiny-random-f32.logits.txt");
  LlamaLogits out;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    int64_t pos = 0;
    int32_t tok = 0;
    ls >> pos >> tok;
    out.ids.push_back(tok);
    std::vector<double> row;
    double v = 0;
    while (ls >> v) row.push_back(v);
    out.rows.push_back(std::move(row));
  }
  return out;
}

TEST(GgufLlamaCpp, ReadsMetadataAndTensors) {
  gguf::GgufFile f(tiny_path());
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.alignment(), 32u);
  EXPECT_EQ(f.tensors().size(), 40u);
  EXPECT_EQ(f.find("general.architecture")->as_string("arch"), "lfm2");
  const gguf::Value* kv = f.find("lfm2.attention.head_count_kv");
  ASSERT_TRUE(kv);
  ASSERT_EQ(kv->arr.size(), 4u);
  EXPECT_EQ(kv->arr[0].as_int("kv"), 0);
  EXPECT_EQ(kv->arr[1].as_int("kv"), 2);
  EXPECT_EQ(f.find("tokenizer.ggml.tokens")->arr.size(), 512u);
  EXPECT_EQ(f.find("tokenizer.ggml.tokens")->arr[1].str, "<|startoftext|>");
  const gguf::TensorInfo* conv = f.find_tensor("blk.0.shortconv.conv.weight");
  ASSERT_TRUE(conv);
  EXPECT_EQ(conv->ne, (std::vector<int64_t>{3, 64}));
}

TEST(GgufLlamaCpp, ConfigMatchesTheFile) {
  gguf::GgufFile f(tiny_path());
  const ModelConfig c = gguf::config_from_gguf(f);
  EXPECT_EQ(c.model_type, "lfm2");
  EXPECT_EQ(c.layer_pattern(), "cAcA");
  EXPECT_EQ(c.hidden_size, 64);
  EXPECT_EQ(c.n_heads, 4);
  EXPECT_EQ(c.n_kv_heads, 2);
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_EQ(c.ffn_dim, 256);
  EXPECT_EQ(c.vocab_size, 512);
  EXPECT_EQ(c.conv_kernel, 3);
  EXPECT_TRUE(c.tie_embeddings);
  EXPECT_FALSE(c.conv_bias);
  EXPECT_EQ(c.max_position, 4096);
  EXPECT_DOUBLE_EQ(c.rope_theta, 1e6);
  EXPECT_FLOAT_EQ(c.norm_eps, 1e-5f);
  EXPECT_EQ(c.bos_token_id, 1);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int32_t>{7}));
}

TEST(GgufLlamaCpp, TensorsArePresentedUnderHfNamesAsViews) {
  auto file = std::make_shared<const gguf::GgufFile>(tiny_path());
  gguf::GgufTensorSource src(file);
  const TensorView* conv = src.find("model.layers.0.conv.conv.weight");
  ASSERT_TRUE(conv);
  EXPECT_EQ(conv->shape, (std::vector<int64_t>{64, 3}));  // ggml {3, 64} reversed
  EXPECT_EQ(conv->data, file->find_tensor("blk.0.shortconv.conv.weight")->data);  // a view, not a copy
  const TensorView* inp = src.find("model.layers.0.conv.in_proj.weight");
  ASSERT_TRUE(inp);
  EXPECT_EQ(inp->shape, (std::vector<int64_t>{192, 64}));
  ASSERT_TRUE(src.find("model.embedding_norm.weight"));
  EXPECT_FALSE(src.find("lm_head.weight"));
}

class GgufLlamaCppLogits : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = load_model(tiny_path());
    backend_ = make_reference_backend(pool_);
    ref_ = read_logits();
    ASSERT_EQ(ref_.ids.size(), 32u);
  }
  ThreadPool pool_{2};
  std::unique_ptr<Model> model_;
  std::unique_ptr<Backend> backend_;
  LlamaLogits ref_;
};

TEST_F(GgufLlamaCppLogits, PrefillMatchesLlamaCpp) {
  auto cache = make_state_cache(*model_, test::f32_plan(64));
  Forward fwd(*model_, *backend_, *cache);
  StepOutput out;
  BatchItem item{cache->open(64), ref_.ids, true};
  fwd.step(std::span<const BatchItem>(&item, 1), out);
  ASSERT_EQ(out.n_rows[0], 32);
  ASSERT_EQ(out.vocab, 512);
  double worst = 0;
  for (size_t p = 0; p < ref_.ids.size(); ++p) {
    ASSERT_EQ(ref_.rows[p].size(), 512u);
    const double d = test::max_abs_diff(out.row(0, static_cast<int64_t>(p)), out.vocab, ref_.rows[p]);
    worst = std::max(worst, d);
    EXPECT_LE(d, kTol) << "position " << p;
  }
  RecordProperty("max_abs_diff", std::to_string(worst));
}

TEST_F(GgufLlamaCppLogits, DecodeOneTokenAtATimeMatchesLlamaCpp) {
  auto cache = make_state_cache(*model_, test::f32_plan(64));
  Forward fwd(*model_, *backend_, *cache);
  Sequence* seq = cache->open(64);
  StepOutput out;
  for (size_t p = 0; p < ref_.ids.size(); ++p) {
    BatchItem one{seq, std::span<const int32_t>(ref_.ids.data() + p, 1), true};
    fwd.step(std::span<const BatchItem>(&one, 1), out);
    EXPECT_LE(test::max_abs_diff(out.row(0, 0), out.vocab, ref_.rows[p]), kTol) << "decode position " << p;
  }
  EXPECT_EQ(seq->n_past(), 32);
}

}  // namespace
}  // namespace lfm
