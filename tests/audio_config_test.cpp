// LFM2-Audio's config.json: the FastConformer encoder dict in transformers' Parakeet form and in
// NeMo's original form read as the same AudioConfig, the front end from `preprocessor`, and the
// errors (each naming its key and value) for what lfm does not run.
#include "model/audio_config.h"

#include <gtest/gtest.h>

#include <string>

#include "core/error.h"
#include "test_util.h"

namespace lfm {
namespace {

using nlohmann::json;

std::string audio_dir(const std::string& name) { return test::data_dir() + "/audio/" + name; }

json fixture_config() { return test::read_json(audio_dir("lfm2audio_tiny_a") + "/config.json"); }

std::string parse_error(const json& j) {
  try {
    parse_audio_config(j);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(AudioConfig, ReadsTheParakeetForm) {
  const json j = fixture_config();
  EXPECT_TRUE(is_audio_config(j));
  EXPECT_FALSE(is_audio_config(json{{"model_type", "lfm2"}}));
  const AudioConfig c = parse_audio_config(j);
  EXPECT_EQ(c.hidden_size, 32);
  EXPECT_EQ(c.n_layers, 2);
  EXPECT_EQ(c.n_heads, 4);
  EXPECT_EQ(c.intermediate_size, 64);
  EXPECT_EQ(c.num_mel_bins, 128);
  EXPECT_EQ(c.conv_kernel_size, 9);
  EXPECT_EQ(c.subsampling_channels, 4);
  EXPECT_EQ(c.max_position_embeddings, 5000);
  EXPECT_FALSE(c.scale_input);
  EXPECT_EQ(c.text_hidden_size, 64);
  EXPECT_EQ(c.audio_token_id, 133);
  EXPECT_EQ(c.front_end.win_length, 400);
  EXPECT_EQ(c.front_end.hop_length, 160);
  EXPECT_EQ(c.front_end.n_fft, 512);
  EXPECT_EQ(c.front_end.num_mel_bins, 128);
  EXPECT_EQ(c.tokens_for_frames(3), 1);
  EXPECT_EQ(c.tokens_for_frames(9), 2);
  EXPECT_EQ(c.tokens_for_frames(101), 13);
  EXPECT_EQ(audio_text_config_of(j)["hidden_size"], 64);
}

json nemo_encoder() {
  return json{{"feat_in", 128},
              {"feat_out", -1},
              {"n_layers", 2},
              {"d_model", 32},
              {"subsampling", "dw_striding"},
              {"subsampling_factor", 8},
              {"subsampling_conv_channels", 4},
              {"causal_downsampling", false},
              {"reduction", nullptr},
              {"ff_expansion_factor", 2},
              {"self_attention_model", "rel_pos"},
              {"n_heads", 4},
              {"att_context_size", {-1, -1}},
              {"xscaling", false},
              {"untie_biases", true},
              {"pos_emb_max_len", 5000},
              {"conv_kernel_size", 9},
              {"conv_norm_type", "batch_norm"},
              {"dropout", 0.1}};
}

TEST(AudioConfig, ReadsTheNemoFormAsTheSame) {
  json j = fixture_config();
  const AudioConfig parakeet = parse_audio_config(j);
  j["encoder"] = nemo_encoder();
  const AudioConfig nemo = parse_audio_config(j);
  EXPECT_EQ(nemo.hidden_size, parakeet.hidden_size);
  EXPECT_EQ(nemo.n_layers, parakeet.n_layers);
  EXPECT_EQ(nemo.n_heads, parakeet.n_heads);
  EXPECT_EQ(nemo.intermediate_size, parakeet.intermediate_size);
  EXPECT_EQ(nemo.num_mel_bins, parakeet.num_mel_bins);
  EXPECT_EQ(nemo.conv_kernel_size, parakeet.conv_kernel_size);
  EXPECT_EQ(nemo.subsampling_channels, parakeet.subsampling_channels);
  EXPECT_EQ(nemo.max_position_embeddings, parakeet.max_position_embeddings);
  EXPECT_EQ(nemo.scale_input, parakeet.scale_input);
  j["encoder"]["subsampling_conv_channels"] = -1;  // NeMo: d_model channels
  EXPECT_EQ(parse_audio_config(j).subsampling_channels, 32);
}

TEST(AudioConfig, ErrorsNameTheKeyAndValue) {
  json j = fixture_config();
  j["encoder"] = nemo_encoder();
  j["encoder"]["self_attention_model"] = "abs_pos";
  EXPECT_NE(parse_error(j).find("encoder.self_attention_model = \"abs_pos\" is not supported"), std::string::npos)
      << parse_error(j);
  j["encoder"] = nemo_encoder();
  j["encoder"]["subsampling"] = "striding";
  EXPECT_NE(parse_error(j).find("encoder.subsampling = \"striding\""), std::string::npos) << parse_error(j);
  j["encoder"] = nemo_encoder();
  j["encoder"]["conv_norm_type"] = "layer_norm";
  EXPECT_NE(parse_error(j).find("encoder.conv_norm_type"), std::string::npos) << parse_error(j);
  j["encoder"] = nemo_encoder();
  j["encoder"]["att_context_size"] = {70, 1};
  EXPECT_NE(parse_error(j).find("encoder.att_context_size = [70,1] is not supported"), std::string::npos)
      << parse_error(j);
  j["encoder"] = nemo_encoder();
  j["encoder"]["conv_context_size"] = "causal";
  EXPECT_NE(parse_error(j).find("encoder.conv_context_size = \"causal\""), std::string::npos) << parse_error(j);
  j["encoder"]["conv_context_size"] = {4, 4};
  EXPECT_EQ(parse_error(j), "(no error)");
  j["encoder"] = nemo_encoder();
  j["encoder"]["untie_biases"] = false;
  EXPECT_NE(parse_error(j).find("encoder.untie_biases = false"), std::string::npos) << parse_error(j);
  j["encoder"] = nemo_encoder();
  j["encoder"].erase("d_model");  // then it reads as the Parakeet form, which lacks hidden_size
  EXPECT_NE(parse_error(j).find("encoder.hidden_size is required"), std::string::npos) << parse_error(j);

  j = fixture_config();
  j["encoder"].erase("num_hidden_layers");
  EXPECT_NE(parse_error(j).find("encoder.num_hidden_layers is required"), std::string::npos) << parse_error(j);
  j = fixture_config();
  j["encoder"]["num_mel_bins"] = 100;
  EXPECT_NE(parse_error(j).find("mel bins 100 are not a multiple of the subsampling factor 8"), std::string::npos)
      << parse_error(j);
  j = fixture_config();
  j["encoder"]["num_attention_heads"] = 5;
  j["encoder"]["num_key_value_heads"] = 5;
  EXPECT_NE(parse_error(j).find("hidden size 32 is not divisible by its 5 heads"), std::string::npos) << parse_error(j);
  j = fixture_config();
  j["preprocessor"]["window"] = "hamming";
  EXPECT_NE(parse_error(j).find("preprocessor.window = \"hamming\""), std::string::npos) << parse_error(j);
  j = fixture_config();
  j["preprocessor"]["normalize"] = "all_features";
  EXPECT_NE(parse_error(j).find("preprocessor.normalize"), std::string::npos) << parse_error(j);
  j = fixture_config();
  j["preprocessor"]["features"] = 80;
  EXPECT_NE(parse_error(j).find("preprocessor.features = 80 differs from the encoder's 128"), std::string::npos)
      << parse_error(j);
  j = fixture_config();
  j["encoder"]["hidden_act"] = "relu";
  EXPECT_NE(parse_error(j).find("encoder.hidden_act"), std::string::npos) << parse_error(j);
  j = fixture_config();
  j.erase("lfm");
  EXPECT_NE(parse_error(j).find("'lfm'"), std::string::npos) << parse_error(j);
}

}  // namespace
}  // namespace lfm
