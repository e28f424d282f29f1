#include "convert/random_audio.h"

#include <algorithm>
#include <cmath>

#include "convert/audio_mmproj_export.h"
#include "convert/quant.h"
#include "convert/random_audio_output.h"
#include "core/error.h"
#include "model/audio_mmproj.h"

namespace lfm::gguf {

namespace {

using nlohmann::json;

struct AudioShape {
  int64_t d, layers, heads, ff, channels, codebooks, audio_vocab;
};

AudioShape audio_shape(const std::string& audio) {
  // LFM2-Audio-1.5B and LFM2.5-Audio-1.5B share the encoder and the 8 Mimi codebooks.
  if (audio == "lfm2-audio" || audio == "lfm2.5-audio") return {512, 17, 8, 2048, 256, 8, 2049};
  if (audio == "tiny") return {64, 2, 4, 128, 8, 2, 16};
  fail("gen-random: unknown audio shape '", audio, "' (lfm2-audio, lfm2.5-audio or tiny)");
}

// The encoder's tensors in memory (the mmproj writer reads a TensorSource), stored as `dtype`.
class OwnedSource : public MapTensorSource {
 public:
  explicit OwnedSource(std::string origin) { origin_ = std::move(origin); }
  void add(const std::string& name, std::vector<int64_t> shape, DType dtype, std::vector<uint8_t> bytes) {
    buffers_.push_back(std::move(bytes));
    const std::vector<uint8_t>& b = buffers_.back();
    tensors_.emplace(name, TensorView{dtype, std::move(shape), b.data(), b.size()});
  }

 private:
  std::vector<std::vector<uint8_t>> buffers_;  // a vector of vectors: moving the outer keeps data()
};

}  // namespace

std::vector<std::string> random_audio_names() { return {"lfm2-audio", "lfm2.5-audio", "tiny"}; }

AudioConfig random_audio_encoder(const std::string& audio, int64_t text_hidden) {
  const AudioShape s = audio_shape(audio);
  AudioConfig c;
  c.hidden_size = s.d;
  c.n_layers = s.layers;
  c.n_heads = s.heads;
  c.intermediate_size = s.ff;
  c.subsampling_channels = s.channels;
  c.text_hidden_size = text_hidden;
  return c;  // 128 mels, kernel 9, ×8, LogMelConfig's front end: the defaults are LFM2-Audio's
}

int64_t random_audio_embedding_rows(const std::string& audio) {
  const AudioShape s = audio_shape(audio);
  return s.codebooks * s.audio_vocab;
}

int64_t random_audio_codebooks(const std::string& audio) { return audio_shape(audio).codebooks; }
int64_t random_audio_vocab(const std::string& audio) { return audio_shape(audio).audio_vocab; }

json random_audio_config(const json& text, const std::string& audio) {
  const AudioShape s = audio_shape(audio);
  const AudioConfig c = random_audio_encoder(audio, text.at("hidden_size").get<int64_t>());
  json lfm = text;
  lfm.erase("architectures");
  lfm.erase("torch_dtype");
  const json encoder = {{"model_type", "parakeet_encoder"},
                        {"hidden_size", c.hidden_size},
                        {"num_hidden_layers", c.n_layers},
                        {"num_attention_heads", c.n_heads},
                        {"num_key_value_heads", c.n_heads},
                        {"intermediate_size", c.intermediate_size},
                        {"num_mel_bins", c.num_mel_bins},
                        {"conv_kernel_size", c.conv_kernel_size},
                        {"subsampling_conv_channels", c.subsampling_channels},
                        {"subsampling_conv_kernel_size", 3},
                        {"subsampling_conv_stride", 2},
                        {"subsampling_factor", c.subsampling_factor},
                        {"hidden_act", "silu"},
                        {"attention_bias", true},
                        {"convolution_bias", true},
                        {"scale_input", false},
                        {"max_position_embeddings", c.max_position_embeddings},
                        {"dropout", 0.0},
                        {"dropout_positions", 0.0},
                        {"attention_dropout", 0.0},
                        {"activation_dropout", 0.0},
                        {"layerdrop", 0.0}};
  const json preprocessor = {{"model_type", "lfm2_audio_preprocessor"},
                             {"sample_rate", 16000},
                             {"features", c.num_mel_bins},
                             {"n_fft", 512},
                             {"window_size", 0.025},
                             {"window_stride", 0.01},
                             {"window", "hann"},
                             {"normalize", "per_feature"},
                             {"log", true},
                             {"dither", 1e-5},
                             {"frame_splicing", 1},
                             {"pad_to", 0},
                             {"pad_value", 0.0}};
  json out{{"architectures", {"Lfm2AudioForConditionalGeneration"}},
           {"model_type", "lfm2_audio"},
           {"audio_token_id", 133},
           {"codebooks", s.codebooks},
           {"audio_vocab_size", s.audio_vocab},
           {"tie_audio_embeddings", false},
           {"hidden_size", lfm.at("hidden_size")},
           {"vocab_size", lfm.at("vocab_size")},
           {"bos_token_id", lfm.value("bos_token_id", 1)},
           {"eos_token_id", lfm.value("eos_token_id", 7)},
           {"pad_token_id", lfm.value("pad_token_id", 0)},
           {"tie_word_embeddings", lfm.value("tie_word_embeddings", true)},
           {"torch_dtype", text.value("torch_dtype", "bfloat16")},
           {"lfm", lfm},
           {"encoder", encoder},
           {"preprocessor", preprocessor}};
  if (random_audio_has_output(audio)) {
    // Speech output: the depthformer, the special ids and the interleaved schedule (transformers'
    // Lfm2AudioConfig defaults; the end-of-audio code is the last audio token).
    out["depthformer"] = random_depthformer_config(audio);
    out["audio_eos_token_id"] = s.audio_vocab - 1;
    out["audio_start_token_id"] = 128;
    out["text_end_token_id"] = 130;
    out["interleaved_n_text"] = 6;
    out["interleaved_n_audio"] = 12;
  }
  return out;
}

std::vector<ExpectedTensor> random_audio_tensors(const std::string& audio, int64_t text_hidden) {
  const AudioConfig c = random_audio_encoder(audio, text_hidden);
  std::vector<ExpectedTensor> out;
  for (const AudioTensor& t : lfm2a_tensor_layout(c, true)) out.push_back({"model." + t.name, t.shape, t.shape.size() > 1});
  const int64_t rows = random_audio_embedding_rows(audio);
  out.push_back({"model.audio_embedding.embedding.weight", {rows, text_hidden}, true});
  out.push_back({"model.audio_embedding.embedding_norm.weight", {text_hidden}, false});
  out.push_back({"model.audio_embedding.to_logits.weight", {rows, text_hidden}, true});
  return out;
}

void AudioRandomRowProducer::rows(const ExpectedTensor& t, int64_t first_row, int64_t n_rows, float* out) {
  base_.rows(t, first_row, n_rows, out);
  const size_t n = static_cast<size_t>(n_rows * t.shape.back());
  const float a = 0.02f * std::sqrt(3.0f);  // the base's U(-a, a) for matrices and other tensors
  const size_t dot = t.name.rfind('.');
  const std::string module = t.name.substr(0, dot), kind = t.name.substr(dot + 1);
  const std::string last = module.substr(module.rfind('.') + 1);
  if (kind == "running_var") {
    for (size_t i = 0; i < n; ++i) out[i] = 1.0f + 0.5f * out[i] / a;
  } else if (kind == "running_mean") {
    for (size_t i = 0; i < n; ++i) out[i] = 0.35f * out[i] / a;
  } else if (kind == "weight" && last.find("norm") != std::string::npos) {
    std::fill(out, out + n, 1.0f);  // LayerNorm / BatchNorm gains (norm_out, norm_conv, …)
  }
}

void write_random_audio_mmproj(const std::string& path, const RandomCheckpointOptions& opt) {
  const ModelConfig text = parse_model_config(random_shape_config(opt.shape));
  AudioConfig cfg = random_audio_encoder(opt.audio, text.hidden_size);
  const bool f32 = opt.gguf_type == FileType::F32;
  const DType stored = f32 ? DType::F32 : opt.hf_dtype;
  OwnedSource src("gen-random");
  AudioRandomRowProducer gen(opt.seed, opt.branch_scale);
  for (const ExpectedTensor& t : random_audio_tensors(opt.audio, text.hidden_size)) {
    std::vector<float> v(static_cast<size_t>(std::max<int64_t>(1, t.shape.back())));
    const int64_t cols = t.shape.back(), rows = [&] {
      int64_t r = 1;
      for (size_t i = 0; i + 1 < t.shape.size(); ++i) r *= t.shape[i];
      return r;
    }();
    // The folder keeps every tensor in hf_dtype: round the same way, row by row.
    const size_t row_bytes = dtype_row_bytes(stored, cols);
    std::vector<uint8_t> bytes(static_cast<size_t>(rows) * row_bytes);
    for (int64_t r = 0; r < rows; ++r) {
      gen.rows(t, r, 1, v.data());
      quantize_row(stored, v.data(), bytes.data() + static_cast<size_t>(r) * row_bytes, cols);
    }
    src.add(t.name.substr(6), t.shape, stored, std::move(bytes));  // without "model."
  }
  write_audio_mmproj_gguf(path, cfg, src, f32, "LFM2-Audio-" + opt.shape + "-random");
}

}  // namespace lfm::gguf
