// Reading an LFM2(.5)-Audio config.json: the FastConformer `encoder` dict in transformers'
// Parakeet form or NeMo's original form, the `preprocessor` dict (the front end), `lfm` (the
// backbone) and the audio placeholder id. docs/design/audio_input_research.md §1.2.
#include "model/audio_config.h"

#include <cmath>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/limits.h"

namespace lfm {

using nlohmann::json;

namespace {

// An integer field of `j` (the dict named `where`): `def` when absent and def >= lo, else required.
int64_t get_int(const json& j, const char* where, const char* key, int64_t def, int64_t lo, int64_t hi) {
  if (!j.contains(key) || j[key].is_null()) {
    LFM_CHECK(def >= lo, "audio config: ", where, ".", key, " is required");
    return def;
  }
  LFM_CHECK(j[key].is_number_integer(), "audio config: ", where, ".", key, " must be an integer, got ", j[key].dump());
  const int64_t v = j[key].get<int64_t>();
  LFM_CHECK(v >= lo && v <= hi, "audio config: ", where, ".", key, " = ", v, " is outside [", lo, ", ", hi, "]");
  return v;
}

double get_number(const json& j, const char* where, const char* key, double def) {
  if (!j.contains(key) || j[key].is_null()) return def;
  LFM_CHECK(j[key].is_number(), "audio config: ", where, ".", key, " must be a number, got ", j[key].dump());
  return j[key].get<double>();
}

bool get_bool(const json& j, const char* where, const char* key, bool def) {
  if (!j.contains(key) || j[key].is_null()) return def;
  LFM_CHECK(j[key].is_boolean(), "audio config: ", where, ".", key, " must be true or false, got ", j[key].dump());
  return j[key].get<bool>();
}

// A string field that must be `want` when present (or `def` when absent).
void expect_string(const json& j, const char* where, const char* key, const char* want, bool required = false) {
  if (!j.contains(key) || j[key].is_null()) {
    LFM_CHECK(!required, "audio config: ", where, ".", key, " is required (lfm supports '", want, "')");
    return;
  }
  LFM_CHECK(j[key].is_string() && j[key].get<std::string>() == want, "audio config: ", where, ".", key, " = ",
            j[key].dump(), " is not supported (lfm supports '", want, "')");
}

// transformers' ParakeetEncoderConfig.
void parse_parakeet(const json& e, AudioConfig& c) {
  const char* w = "encoder";
  expect_string(e, w, "model_type", "parakeet_encoder");
  c.hidden_size = get_int(e, w, "hidden_size", 0, 1, limits::kMaxHiddenSize);
  c.n_layers = get_int(e, w, "num_hidden_layers", 0, 1, limits::kMaxLayers);
  c.n_heads = get_int(e, w, "num_attention_heads", 0, 1, limits::kMaxHeads);
  c.intermediate_size = get_int(e, w, "intermediate_size", 0, 1, limits::kMaxFfnDim);
  c.num_mel_bins = get_int(e, w, "num_mel_bins", 128, 1, 4096);
  c.conv_kernel_size = get_int(e, w, "conv_kernel_size", 9, 1, limits::kMaxConvKernel);
  c.subsampling_channels = get_int(e, w, "subsampling_conv_channels", 256, 1, limits::kMaxHiddenSize);
  c.subsampling_factor = get_int(e, w, "subsampling_factor", 8, 1, 64);
  c.max_position_embeddings = get_int(e, w, "max_position_embeddings", 5000, 1, limits::kMaxPositions);
  c.scale_input = get_bool(e, w, "scale_input", false);
  const int64_t kv = get_int(e, w, "num_key_value_heads", c.n_heads, 1, limits::kMaxHeads);
  LFM_CHECK(kv == c.n_heads, "audio config: encoder.num_key_value_heads = ", kv, " differs from num_attention_heads ",
            c.n_heads, " (the FastConformer's attention is multi-head)");
  get_int(e, w, "subsampling_conv_kernel_size", 3, 3, 3);
  get_int(e, w, "subsampling_conv_stride", 2, 2, 2);
  expect_string(e, w, "hidden_act", "silu");
  LFM_CHECK(get_bool(e, w, "attention_bias", true), "audio config: encoder.attention_bias = false is not supported");
  LFM_CHECK(get_bool(e, w, "convolution_bias", true),
            "audio config: encoder.convolution_bias = false is not supported");
}

// NeMo's ConformerEncoder kwargs (the original checkpoints' config.json).
void parse_nemo(const json& e, AudioConfig& c) {
  const char* w = "encoder";
  c.hidden_size = get_int(e, w, "d_model", 0, 1, limits::kMaxHiddenSize);
  c.n_layers = get_int(e, w, "n_layers", 0, 1, limits::kMaxLayers);
  c.n_heads = get_int(e, w, "n_heads", 0, 1, limits::kMaxHeads);
  const int64_t ff = get_int(e, w, "ff_expansion_factor", 4, 1, 64);
  c.intermediate_size = c.hidden_size * ff;
  c.num_mel_bins = get_int(e, w, "feat_in", 0, 1, 4096);
  c.conv_kernel_size = get_int(e, w, "conv_kernel_size", 31, 1, limits::kMaxConvKernel);
  // NeMo: -1 means d_model channels.
  const int64_t ch = get_int(e, w, "subsampling_conv_channels", -1, -1, limits::kMaxHiddenSize);
  LFM_CHECK(ch != 0, "audio config: encoder.subsampling_conv_channels = 0 is outside [1, ", limits::kMaxHiddenSize,
            "]");
  c.subsampling_channels = ch == -1 ? c.hidden_size : ch;
  c.subsampling_factor = get_int(e, w, "subsampling_factor", 4, 1, 64);
  c.max_position_embeddings = get_int(e, w, "pos_emb_max_len", 5000, 1, limits::kMaxPositions);
  c.scale_input = get_bool(e, w, "xscaling", true);
  expect_string(e, w, "subsampling", "dw_striding", true);
  expect_string(e, w, "self_attention_model", "rel_pos", true);
  expect_string(e, w, "conv_norm_type", "batch_norm");
  LFM_CHECK(get_bool(e, w, "untie_biases", true),
            "audio config: encoder.untie_biases = false is not supported "
            "(lfm reads pos_bias_u / pos_bias_v per layer)");
  LFM_CHECK(!e.contains("reduction") || e["reduction"].is_null(),
            "audio config: encoder.reduction = ", e["reduction"].dump(), " is not supported (no reduction)");
  LFM_CHECK(!get_bool(e, w, "causal_downsampling", false),
            "audio config: encoder.causal_downsampling = true is not supported");
  const int64_t feat_out = get_int(e, w, "feat_out", -1, -1, limits::kMaxHiddenSize);
  LFM_CHECK(feat_out == -1 || feat_out == c.hidden_size, "audio config: encoder.feat_out = ", feat_out,
            " is not supported (no output projection: -1 or d_model ", c.hidden_size, ")");
  // Full-context attention and a centred conv: what the engine runs (a streaming encoder limits both).
  if (e.contains("att_context_size") && !e["att_context_size"].is_null())
    LFM_CHECK(e["att_context_size"] == json::array({-1, -1}),
              "audio config: encoder.att_context_size = ", e["att_context_size"].dump(),
              " is not supported (full context: [-1, -1])");
  if (e.contains("conv_context_size") && !e["conv_context_size"].is_null()) {
    const json& cc = e["conv_context_size"];
    const int64_t half = (c.conv_kernel_size - 1) / 2;
    LFM_CHECK(cc == "default" || cc == json::array({half, half}),
              "audio config: encoder.conv_context_size = ", cc.dump(),
              " is not supported (a centred conv: null, \"default\" or [", half, ", ", half, "])");
  }
}

// The front end from NeMo's AudioToMelSpectrogramPreprocessor kwargs.
audio::LogMelConfig parse_preprocessor(const json& p, int64_t mel_bins) {
  const char* w = "preprocessor";
  audio::LogMelConfig f;
  f.sample_rate = static_cast<int>(get_int(p, w, "sample_rate", 16000, 1000, 192000));
  f.n_fft = static_cast<int>(get_int(p, w, "n_fft", 512, 2, 1 << 16));
  const double win = get_number(p, w, "window_size", 0.025), hop = get_number(p, w, "window_stride", 0.01);
  LFM_CHECK(win > 0 && win < 10, "audio config: preprocessor.window_size = ", win, " s is outside (0, 10)");
  LFM_CHECK(hop > 0 && hop < 10, "audio config: preprocessor.window_stride = ", hop, " s is outside (0, 10)");
  f.win_length = static_cast<int>(std::lround(win * f.sample_rate));
  f.hop_length = static_cast<int>(std::lround(hop * f.sample_rate));
  f.num_mel_bins = static_cast<int>(get_int(p, w, "features", mel_bins, 1, 4096));
  f.fmax = f.sample_rate / 2.0;
  expect_string(p, w, "normalize", "per_feature");
  expect_string(p, w, "window", "hann");
  LFM_CHECK(get_bool(p, w, "log", true), "audio config: preprocessor.log = false is not supported");
  get_int(p, w, "frame_splicing", 1, 1, 1);
  get_int(p, w, "pad_to", 0, 0, 0);
  return f;
}

}  // namespace

int64_t AudioConfig::tokens_for_frames(int64_t frames) const {
  // Each stride-2 conv (kernel 3, pad 1) makes (t − 1) / 2 + 1 = ceil(t / 2) rows of t.
  int64_t t = frames;
  for (int64_t f = subsampling_factor; f > 1; f /= 2) t = t > 0 ? (t - 1) / 2 + 1 : 0;
  return t;
}

bool is_audio_config(const json& j) {
  if (!j.is_object()) return false;
  if (j.value("model_type", std::string()) == "lfm2_audio") return true;
  if (j.contains("architectures") && j["architectures"].is_array())
    for (const json& a : j["architectures"])
      if (a.is_string() && a.get<std::string>() == "Lfm2AudioForConditionalGeneration") return true;
  return false;
}

json audio_text_config_of(const json& j) {
  LFM_CHECK(j.contains("lfm") && j["lfm"].is_object(), "audio config: an lfm2_audio config needs an 'lfm' object");
  json t = j["lfm"];
  if (!t.contains("model_type")) t["model_type"] = "lfm2";
  t.erase("architectures");  // the top level names Lfm2AudioForConditionalGeneration
  return t;
}

AudioConfig parse_audio_config(const json& j) {
  LFM_CHECK(is_audio_config(j), "audio config: model_type is not 'lfm2_audio'");
  LFM_CHECK(j.contains("encoder") && j["encoder"].is_object(),
            "audio config: an lfm2_audio config needs an 'encoder' object");
  const json& e = j["encoder"];
  AudioConfig c;
  if (e.contains("d_model"))
    parse_nemo(e, c);
  else
    parse_parakeet(e, c);
  LFM_CHECK(c.hidden_size % c.n_heads == 0, "audio config: encoder hidden size ", c.hidden_size,
            " is not divisible by its ", c.n_heads, " heads");
  LFM_CHECK(c.head_dim() <= 256, "audio config: encoder head dim ", c.head_dim(), " is above 256");
  LFM_CHECK(c.subsampling_factor == 8, "audio config: encoder subsampling_factor = ", c.subsampling_factor,
            " is not supported (lfm runs the ×8 dw_striding subsampling: three stride-2 convs)");
  LFM_CHECK(c.num_mel_bins % c.subsampling_factor == 0, "audio config: encoder mel bins ", c.num_mel_bins,
            " are not a multiple of the subsampling factor ", c.subsampling_factor);
  LFM_CHECK(c.conv_kernel_size % 2 == 1, "audio config: encoder conv_kernel_size = ", c.conv_kernel_size,
            " is not odd (the conv module's depthwise conv is centred)");
  if (j.contains("preprocessor") && !j["preprocessor"].is_null()) {
    LFM_CHECK(j["preprocessor"].is_object(), "audio config: 'preprocessor' must be an object");
    c.front_end = parse_preprocessor(j["preprocessor"], c.num_mel_bins);
  } else {
    c.front_end.num_mel_bins = static_cast<int>(c.num_mel_bins);
  }
  try {
    audio::validate(c.front_end);
  } catch (const Error& err) {
    fail("audio config: preprocessor: ", err.what());
  }
  LFM_CHECK(c.front_end.num_mel_bins == c.num_mel_bins,
            "audio config: preprocessor.features = ", c.front_end.num_mel_bins, " differs from the encoder's ",
            c.num_mel_bins, " mel bins");
  c.text_hidden_size = get_int(audio_text_config_of(j), "lfm", "hidden_size", 0, 1, limits::kMaxHiddenSize);
  c.audio_token_id = static_cast<int32_t>(get_int(j, "config", "audio_token_id", 133, 0, limits::kMaxVocabSize - 1));
  return c;
}

}  // namespace lfm
