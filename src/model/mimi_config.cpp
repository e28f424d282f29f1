// MimiConfig from transformers' config.json (model_type "mimi"): the decoder's fields, refusing
// what MimiDecoder does not compute (model/mimi.h).
#include <cmath>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json_guard.h"
#include "model/mimi.h"

namespace lfm {

int64_t MimiConfig::hop() const {
  int64_t h = 1;
  for (int64_t r : upsampling_ratios) h *= r;
  return h;
}

// transformers' MimiModel: the upsample is a ConvTranspose1d of stride 2 whenever frame_rate
// differs from the encoder's rate ⌈sampling_rate / hop⌉.
int64_t MimiConfig::upsample_stride() const { return 2; }

MimiConfig parse_mimi_config(const std::string& path) {
  const nlohmann::json j = parse_json(read_text_file(path, "mimi:"), cat("mimi: '", path, "'"));
  MimiConfig c;
  try {
    LFM_CHECK(j.is_object() && j.value("model_type", std::string()) == "mimi", "mimi: model_type '",
              j.is_object() ? j.value("model_type", std::string("?")) : std::string("?"), "' (expected 'mimi')");
    auto int_field = [&](const char* name, int64_t& v, int64_t lo) {
      if (!j.contains(name) || j[name].is_null()) return;
      LFM_CHECK(j[name].is_number_integer() && j[name].get<int64_t>() >= lo && j[name].get<int64_t>() <= (int64_t{1} << 24),
                "mimi: ", name, " ", json_excerpt(j[name]), " (expected an integer in [", lo, ", 2^24])");
      v = j[name].get<int64_t>();
    };
    auto num_field = [&](const char* name, double& v) {
      if (!j.contains(name) || j[name].is_null()) return;
      LFM_CHECK(j[name].is_number() && std::isfinite(j[name].get<double>()) && j[name].get<double>() > 0, "mimi: ", name,
                " ", json_excerpt(j[name]), " (expected a positive number)");
      v = j[name].get<double>();
    };
    auto must = [&](const char* name, const nlohmann::json& want) {
      if (!j.contains(name) || j[name].is_null()) return;
      LFM_CHECK(j[name] == want, "mimi: ", name, " ", json_excerpt(j[name]), " is not supported (the decoder computes ",
                want.dump(), ")");
    };
    int_field("sampling_rate", c.sampling_rate, 1);
    int_field("hidden_size", c.hidden_size, 1);
    int_field("num_filters", c.num_filters, 1);
    int_field("num_residual_layers", c.num_residual_layers, 0);
    int_field("kernel_size", c.kernel_size, 1);
    int_field("last_kernel_size", c.last_kernel_size, 1);
    int_field("residual_kernel_size", c.residual_kernel_size, 1);
    int_field("dilation_growth_rate", c.dilation_growth_rate, 1);
    int_field("compress", c.compress, 1);
    int_field("codebook_size", c.codebook_size, 1);
    int_field("codebook_dim", c.codebook_dim, 1);
    int_field("num_quantizers", c.num_quantizers, 1);
    int_field("num_semantic_quantizers", c.num_semantic_quantizers, 1);
    int_field("vector_quantization_hidden_dimension", c.vector_quantization_hidden_dimension, 1);
    int_field("upsample_groups", c.upsample_groups, 1);
    int_field("num_hidden_layers", c.num_hidden_layers, 1);
    int_field("intermediate_size", c.intermediate_size, 1);
    int_field("num_attention_heads", c.num_attention_heads, 1);
    int_field("num_key_value_heads", c.num_key_value_heads, 1);
    int_field("max_position_embeddings", c.max_position_embeddings, 2);
    int_field("sliding_window", c.sliding_window, 1);
    num_field("norm_eps", c.norm_eps);
    // transformers 5.2 saves it as "_frame_rate"; kyutai/mimi's config says "frame_rate".
    const bool has_rate = (j.contains("frame_rate") && !j["frame_rate"].is_null()) ||
                          (j.contains("_frame_rate") && !j["_frame_rate"].is_null());
    num_field("_frame_rate", c.frame_rate);
    num_field("frame_rate", c.frame_rate);
    c.head_dim = c.hidden_size / c.num_attention_heads;
    int_field("head_dim", c.head_dim, 2);
    if (j.contains("codebook_dim") && j["codebook_dim"].is_null()) c.codebook_dim = c.hidden_size;
    if (j.contains("upsampling_ratios") && !j["upsampling_ratios"].is_null()) {
      const nlohmann::json& r = j["upsampling_ratios"];
      LFM_CHECK(r.is_array() && !r.empty() && r.size() <= 8, "mimi: upsampling_ratios ", json_excerpt(r),
                " (expected 1 to 8 integers)");
      c.upsampling_ratios.clear();
      for (const nlohmann::json& v : r) {
        LFM_CHECK(v.is_number_integer() && v.get<int64_t>() >= 1 && v.get<int64_t>() <= 64, "mimi: upsampling_ratios ",
                  json_excerpt(r), " (each an integer in [1, 64])");
        c.upsampling_ratios.push_back(v.get<int64_t>());
      }
    }
    // RoPE's base: rope_parameters.rope_theta (transformers 5) or rope_theta (older configs).
    if (j.contains("rope_parameters") && j["rope_parameters"].is_object()) {
      const nlohmann::json& rp = j["rope_parameters"];
      LFM_CHECK(rp.value("rope_type", std::string("default")) == "default", "mimi: rope_parameters.rope_type ",
                json_excerpt(rp["rope_type"]), " is not supported (the decoder computes 'default')");
      if (rp.contains("rope_theta")) {
        LFM_CHECK(rp["rope_theta"].is_number() && rp["rope_theta"].get<double>() > 0, "mimi: rope_parameters.rope_theta ",
                  json_excerpt(rp["rope_theta"]), " (expected a positive number)");
        c.rope_theta = rp["rope_theta"].get<double>();
      }
    } else {
      num_field("rope_theta", c.rope_theta);
    }
    must("use_causal_conv", true);
    must("pad_mode", "constant");
    must("trim_right_ratio", 1.0);
    must("use_conv_shortcut", false);
    must("hidden_act", "gelu");
    must("attention_bias", false);
    must("audio_channels", 1);
    // Without frame_rate, transformers derives it: sampling_rate / (hop · 2).
    if (!has_rate)
      c.frame_rate = static_cast<double>(c.sampling_rate) / static_cast<double>(c.hop() * 2);
  } catch (const nlohmann::json::exception& e) {
    fail("mimi: '", path, "': ", e.what());
  } catch (const Error& e) {
    fail(e.what(), " (in '", path, "')");
  }
  const int64_t encoder_rate = (c.sampling_rate + c.hop() - 1) / c.hop();
  LFM_CHECK(std::fabs(c.frame_rate - static_cast<double>(encoder_rate)) > 1e-9, "mimi: '", path, "': frame_rate ",
            c.frame_rate, " equals the encoder's rate: a Mimi without the upsample layer is not supported");
  LFM_CHECK(c.num_attention_heads % c.num_key_value_heads == 0, "mimi: '", path, "': num_attention_heads ",
            c.num_attention_heads, " is not a multiple of num_key_value_heads ", c.num_key_value_heads);
  LFM_CHECK(c.head_dim % 2 == 0, "mimi: '", path, "': head_dim ", c.head_dim, " is odd (RoPE rotates halves)");
  LFM_CHECK(c.num_quantizers >= 8 && c.num_semantic_quantizers == 1, "mimi: '", path, "': num_quantizers ",
            c.num_quantizers, " and num_semantic_quantizers ", c.num_semantic_quantizers,
            " (the decoder reads 8 codebooks: 1 semantic, 7 acoustic)");
  LFM_CHECK(c.upsample_groups == c.hidden_size, "mimi: '", path, "': upsample_groups ", c.upsample_groups,
            " (only the depthwise upsample, groups = hidden_size ", c.hidden_size, ", is supported)");
  LFM_CHECK(c.vector_quantization_hidden_dimension == c.codebook_dim &&
                c.vector_quantization_hidden_dimension != c.hidden_size,
            "mimi: '", path, "': vector_quantization_hidden_dimension ", c.vector_quantization_hidden_dimension,
            " must equal codebook_dim ", c.codebook_dim, " and differ from hidden_size ", c.hidden_size,
            " (the quantizer's output projection)");
  int64_t channels = c.num_filters;
  for (size_t i = 0; i < c.upsampling_ratios.size(); ++i) channels *= 2;
  LFM_CHECK(c.num_filters % (c.compress) == 0 && channels <= (int64_t{1} << 16), "mimi: '", path, "': num_filters ",
            c.num_filters, " with compress ", c.compress);
  return c;
}

}  // namespace lfm
