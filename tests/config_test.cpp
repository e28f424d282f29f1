// Config normalisation (LFM2_SPEC.md §1): every rule, on the real released configs and on the
// fixtures' `effective` values recorded from transformers.
#include <gtest/gtest.h>

#include <filesystem>

#include "core/error.h"
#include "model/config.h"
#include "model/model.h"
#include "test_util.h"

namespace lfm {
namespace {

using nlohmann::json;

std::string assets() { return test::data_dir() + "/assets/lfm2"; }

TEST(ConfigTest, FfnAutoAdjustFormula) {
  EXPECT_EQ(lfm2_effective_ffn_dim(6656, true, 1.0, true, 256), 4608);    // 350M
  EXPECT_EQ(lfm2_effective_ffn_dim(10240, true, 1.0, true, 256), 6912);   // 700M
  EXPECT_EQ(lfm2_effective_ffn_dim(12288, true, 1.0, true, 256), 8192);   // 1.2B
  EXPECT_EQ(lfm2_effective_ffn_dim(10752, false, 1.0, true, 256), 10752); // 2.6B (auto-adjust off)
  EXPECT_EQ(lfm2_effective_ffn_dim(10752, true, 1.0, true, 256), 7168);   // what auto-adjust would do
  EXPECT_EQ(lfm2_effective_ffn_dim(256, true, 1.0, true, 32), 192);       // fixture a
  EXPECT_EQ(lfm2_effective_ffn_dim(300, true, 1.0, false, 256), 200);     // multiplier None: no rounding
}

TEST(ConfigTest, RealLfm2_1_2B) {
  const ModelConfig c = load_model_config(assets() + "/LFM2-1.2B/config.json");
  EXPECT_EQ(c.model_type, "lfm2");
  EXPECT_EQ(c.hidden_size, 2048);
  EXPECT_EQ(c.ffn_dim, 8192);
  EXPECT_EQ(c.layer_pattern(), "ccAccAccAcAcAcAc");
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.n_kv_heads, 8);
  EXPECT_TRUE(c.tie_embeddings);
  EXPECT_DOUBLE_EQ(c.rope_theta, 1e6);
  EXPECT_EQ(c.eos_token_ids, std::vector<int32_t>{7});
  EXPECT_EQ(c.bos_token_id, 1);
  EXPECT_EQ(c.pad_token_id, 0);
}

TEST(ConfigTest, RealLfm2_350M) {
  const ModelConfig c = load_model_config(assets() + "/LFM2-350M/config.json");
  EXPECT_EQ(c.hidden_size, 1024);
  EXPECT_EQ(c.ffn_dim, 4608);
  EXPECT_EQ(c.layer_pattern(), "ccAccAccAcAcAcAc");
  EXPECT_EQ(c.n_heads, 16);
}

TEST(ConfigTest, RealLfm25_1_2B_Base_UsesLayerTypes) {
  const ModelConfig c = load_model_config(assets() + "/LFM2.5-1.2B-Base/config.json");
  EXPECT_EQ(c.ffn_dim, 8192);  // block_ff_dim 12288 wins over intermediate_size
  EXPECT_EQ(c.layer_pattern(), "ccAccAccAcAcAcAc");
  EXPECT_TRUE(c.tie_embeddings);
}

TEST(ConfigTest, EveryAssetConfigParses) {
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator(assets())) {
    const auto p = e.path() / "config.json";
    if (!std::filesystem::exists(p)) continue;
    const ModelConfig c = load_model_config(p.string());
    EXPECT_EQ(static_cast<int64_t>(c.layer_kinds.size()), c.n_layers) << p;
    EXPECT_GT(c.n_attention_layers(), 0) << p;
    EXPECT_GT(c.n_conv_layers(), 0) << p;
    ++n;
  }
  EXPECT_GE(n, 3);
}

// The fixtures' `effective` block is what transformers derived from each config.json.
TEST(ConfigTest, FixturesMatchTransformersEffectiveValues) {
  for (const auto& name : test::dense_fixtures()) {
    const json eff = test::reference(name)["effective"];
    const ModelConfig c = load_model_config(test::fixture_dir(name) + "/config.json");
    std::vector<std::string> kinds;
    for (LayerKind k : c.layer_kinds) kinds.push_back(layer_kind_name(k));
    EXPECT_EQ(kinds, eff["layer_types"].get<std::vector<std::string>>()) << name;
    for (const auto& [layer, width] : eff["dense_ffn_width_per_layer"].items())
      EXPECT_EQ(c.ffn_dim, width.get<int64_t>()) << name << " layer " << layer;
    EXPECT_EQ(c.head_dim, eff["head_dim"].get<int64_t>()) << name;
    EXPECT_DOUBLE_EQ(c.rope_theta, eff["rope_parameters"]["rope_theta"].get<double>()) << name;
    EXPECT_EQ(c.tie_embeddings, eff["tie_word_embeddings"].get<bool>()) << name;
    EXPECT_EQ(c.conv_bias, eff["conv_bias"].get<bool>()) << name;
    EXPECT_EQ(c.conv_kernel, eff["conv_L_cache"].get<int64_t>()) << name;
    EXPECT_FLOAT_EQ(c.norm_eps, eff["norm_eps"].get<float>()) << name;
    const auto inv = eff["rope_inv_freq"].begin().value().get<std::vector<float>>();
    EXPECT_EQ(rope_inverse_frequencies(c.rope_theta, c.head_dim), inv) << name;
  }
}

json base() {
  return json{{"model_type", "lfm2"}, {"hidden_size", 64}, {"num_hidden_layers", 4}, {"num_attention_heads", 4},
              {"num_key_value_heads", 2}, {"vocab_size", 100}};
}

TEST(ConfigTest, PrecedenceRules) {
  json j = base();
  j["layer_types"] = {"conv", "full_attention", "conv", "conv"};
  j["full_attn_idxs"] = {0, 1, 2, 3};
  EXPECT_EQ(parse_model_config(j).layer_pattern(), "cAcc");  // layer_types wins
  j.erase("layer_types");
  EXPECT_EQ(parse_model_config(j).layer_pattern(), "AAAA");
  j.erase("full_attn_idxs");
  EXPECT_EQ(parse_model_config(j).layer_pattern(), "AAAA");  // transformers' default

  j = base();
  j["tie_embedding"] = false;
  j["tie_word_embeddings"] = true;
  EXPECT_FALSE(parse_model_config(j).tie_embeddings);  // legacy key wins
  j.erase("tie_embedding");
  EXPECT_TRUE(parse_model_config(j).tie_embeddings);
  j.erase("tie_word_embeddings");
  EXPECT_TRUE(parse_model_config(j).tie_embeddings);  // default true

  j = base();
  j["theta"] = 5e5;
  j["rope_theta"] = 1e4;
  EXPECT_DOUBLE_EQ(parse_model_config(j).rope_theta, 5e5);
  j.erase("theta");
  EXPECT_DOUBLE_EQ(parse_model_config(j).rope_theta, 1e4);
  j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 1e7}};
  EXPECT_DOUBLE_EQ(parse_model_config(j).rope_theta, 1e7);
  j.erase("rope_parameters");
  j.erase("rope_theta");
  EXPECT_DOUBLE_EQ(parse_model_config(j).rope_theta, 1e6);

  j = base();
  j["head_dim"] = 32;
  EXPECT_EQ(parse_model_config(j).head_dim, 32);
  j.erase("head_dim");
  EXPECT_EQ(parse_model_config(j).head_dim, 16);

  j = base();
  j["block_ff_dim"] = 12288;
  j["intermediate_size"] = 8192;
  EXPECT_EQ(parse_model_config(j).ffn_dim, 8192);  // from block_ff_dim 12288, not 8192 → 5632
  j["norm_eps"] = 1e-6;
  EXPECT_FLOAT_EQ(parse_model_config(j).norm_eps, 1e-6f);
  j["eos_token_id"] = {7, 2};
  EXPECT_EQ(parse_model_config(j).eos_token_ids, (std::vector<int32_t>{7, 2}));
  j.erase("eos_token_id");
  EXPECT_EQ(parse_model_config(j).eos_token_ids, std::vector<int32_t>{2});  // class default
}

void expect_error(const json& j, const std::string& needle) {
  try {
    parse_model_config(j);
    ADD_FAILURE() << "no error for " << j.dump();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(ConfigTest, ClearErrors) {
  json j = base();
  j["model_type"] = "llama";
  expect_error(j, "unsupported model_type 'llama'");
  j = base();
  j["architectures"] = {"LlamaForCausalLM"};
  expect_error(j, "unsupported architecture 'LlamaForCausalLM'");
  j = base();
  j.erase("hidden_size");
  expect_error(j, "missing required key 'hidden_size'");
  j = base();
  j["num_key_value_heads"] = 3;
  expect_error(j, "not a multiple of num_key_value_heads 3");
  j = base();
  j["layer_types"] = {"conv"};
  expect_error(j, "'layer_types' has 1 entries but num_hidden_layers is 4");
  j = base();
  j["full_attn_idxs"] = {9};
  expect_error(j, "full_attn_idxs entry 9");
  j = base();
  j["hidden_size"] = "big";
  expect_error(j, "'hidden_size' must be an integer");
  j = base();
  j["rope_parameters"] = {{"rope_type", "yarn"}, {"factor", 4}};
  expect_error(j, "unsupported rope_type 'yarn'");
  j = base();
  j["conv_dim"] = 128;
  expect_error(j, "'conv_dim'");
  EXPECT_THROW(load_model_config(test::data_dir() + "/no/such/config.json"), Error);
}

TEST(ConfigTest, MoeFields) {
  const ModelConfig c = load_model_config(test::fixture_dir("lfm2moe_g_untied_nobias_scaled_f32") + "/config.json");
  EXPECT_TRUE(c.is_moe());
  EXPECT_EQ(c.n_experts, 6);
  EXPECT_EQ(c.n_experts_used, 3);
  EXPECT_FALSE(c.use_expert_bias);
  EXPECT_FLOAT_EQ(c.routed_scaling_factor, 2.5f);
}

}  // namespace
}  // namespace lfm
