#include "convert/random_audio_output.h"

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "core/error.h"
#include "core/output_file.h"
#include "convert/quant.h"
#include "convert/random_audio.h"
#include "formats/safetensors_writer.h"
#include "model/config.h"

namespace lfm::gguf {

namespace {

using nlohmann::json;

struct DepthShape {
  int64_t layers, dim, heads, kv, ff;
};

struct DetokShape {
  int64_t hidden, heads, kv, ff;  // ff as the config states it (auto-adjusted when `adjust`)
  bool adjust;
  std::vector<std::string> layer_types;
  int64_t window, vocab;
};

constexpr int64_t kIstftFft = 1280;                       // the detokenizer's fixed iSTFT
constexpr int64_t kDetokOutput = 2 * (kIstftFft / 2 + 1);  // 1282: log-magnitude, then phase

DepthShape depth_shape(const std::string& audio) {
  if (audio == "lfm2.5-audio") return {6, 1024, 32, 8, 2816};
  if (audio == "tiny") return {2, 32, 4, 2, 64};
  fail("gen-random: audio shape '", audio, "' has no speech-output weights (lfm2.5-audio or tiny)");
}

DetokShape detok_shape(const std::string& audio) {
  if (audio == "lfm2.5-audio")
    return {512, 16, 8, 3328, true,
            {"conv", "conv", "sliding_attention", "conv", "sliding_attention", "conv", "sliding_attention", "conv"},
            30, 65536};
  if (audio == "tiny") return {32, 4, 2, 64, false, {"conv", "sliding_attention", "conv", "sliding_attention"}, 12, 16};
  fail("gen-random: audio shape '", audio, "' has no audio detokenizer (lfm2.5-audio or tiny)");
}

int64_t numel_rows(const std::vector<int64_t>& shape) {
  int64_t r = 1;
  for (size_t i = 0; i + 1 < shape.size(); ++i) r *= shape[i];
  return r;
}

}  // namespace

bool random_audio_has_output(const std::string& audio) { return audio == "lfm2.5-audio" || audio == "tiny"; }

json random_depthformer_config(const std::string& audio) {
  const DepthShape s = depth_shape(audio);
  return json{{"model_type", "lfm2_audio_depth"},
              {"layers", s.layers},
              {"dim", s.dim},
              {"tie", true},
              {"num_attention_heads", s.heads},
              {"num_key_value_heads", s.kv},
              {"intermediate_size", s.ff},
              {"multiple_of", 256},
              {"norm_eps", 1e-5},
              {"rope_theta", 1000000.0}};
}

std::vector<ExpectedTensor> random_audio_output_tensors(const std::string& audio, int64_t text_hidden) {
  if (!random_audio_has_output(audio)) return {};
  const DepthShape s = depth_shape(audio);
  const int64_t hd = s.dim / s.heads, C = random_audio_codebooks(audio), V = random_audio_vocab(audio);
  std::vector<ExpectedTensor> t;
  for (int64_t i = 0; i < s.layers; ++i) {
    const std::string p = "model.depthformer.layers." + std::to_string(i) + ".";
    t.push_back({p + "operator.qkv_proj.weight", {s.dim + 2 * s.kv * hd, s.dim}, true});
    t.push_back({p + "operator.out_proj.weight", {s.dim, s.dim}, true});
    t.push_back({p + "operator.bounded_attention.q_layernorm.weight", {hd}, false});
    t.push_back({p + "operator.bounded_attention.k_layernorm.weight", {hd}, false});
    t.push_back({p + "feed_forward.w1.weight", {s.ff, s.dim}, true});
    t.push_back({p + "feed_forward.w2.weight", {s.dim, s.ff}, true});
    t.push_back({p + "feed_forward.w3.weight", {s.ff, s.dim}, true});
    t.push_back({p + "operator_norm.weight", {s.dim}, false});
    t.push_back({p + "ffn_norm.weight", {s.dim}, false});
  }
  t.push_back({"model.depth_linear.weight", {C * s.dim, text_hidden}, true});
  t.push_back({"model.depth_linear.bias", {C * s.dim}, false});
  for (int64_t c = 0; c < C; ++c) {
    const std::string p = "model.depth_embeddings." + std::to_string(c) + ".";
    t.push_back({p + "embedding.weight", {V, s.dim}, true});
    t.push_back({p + "embedding_norm.weight", {s.dim}, false});
  }
  return t;
}

json random_detokenizer_config(const std::string& audio) {
  const DetokShape s = detok_shape(audio);
  return json{{"architectures", {"Lfm25AudioTokenizer"}},
              {"model_type", "lfm2"},
              {"hidden_size", s.hidden},
              {"num_hidden_layers", static_cast<int64_t>(s.layer_types.size())},
              {"num_attention_heads", s.heads},
              {"num_key_value_heads", s.kv},
              {"intermediate_size", s.ff},
              {"block_auto_adjust_ff_dim", s.adjust},
              {"block_ffn_dim_multiplier", 1.0},
              {"block_multiple_of", 256},
              {"layer_types", s.layer_types},
              {"sliding_window", s.window},
              {"output_size", kDetokOutput},
              {"vocab_size", s.vocab},
              {"max_position_embeddings", 128000},
              {"conv_L_cache", 3},
              {"conv_bias", false},
              {"norm_eps", 1e-5},
              {"rope_theta", 1000000.0},
              {"tie_word_embeddings", false}};
}

std::vector<ExpectedTensor> random_detokenizer_tensors(const std::string& audio) {
  // The LFM2 layout of the config read as a bare Lfm2Model (no head); a sliding-window layer has a
  // full-attention layer's tensors (lfm's config parser counts only "full_attention" as attention).
  json j = random_detokenizer_config(audio);
  j["architectures"] = {"Lfm2Model"};
  for (json& t : j["layer_types"])
    if (t == "sliding_attention") t = "full_attention";
  const ModelConfig c = parse_model_config(j);
  const int64_t rows = random_audio_codebooks(audio) * (random_audio_vocab(audio) - 1);  // no end-of-audio code
  std::vector<ExpectedTensor> t = {{"emb.emb.weight", {rows, c.hidden_size}, true}};
  for (ExpectedTensor& e : expected_tensors(c, false)) {
    e.name = "lfm." + e.name.substr(6);  // "model.X" → "lfm.X"
    t.push_back(std::move(e));
  }
  t.push_back({"lin.weight", {kDetokOutput, c.hidden_size}, true});
  t.push_back({"lin.bias", {kDetokOutput}, false});
  t.push_back({"istft.window", {kIstftFft}, false});
  return t;
}

void write_random_detokenizer(const std::string& dir, const RandomCheckpointOptions& opt) {
  namespace fs = std::filesystem;
  const fs::path sub = fs::path(dir) / "audio_detokenizer";
  fs::create_directories(sub);
  json j = random_detokenizer_config(opt.audio);
  j["torch_dtype"] = opt.hf_dtype == DType::F32 ? "float32" : opt.hf_dtype == DType::F16 ? "float16" : "bfloat16";
  write_file_atomically((sub / "config.json").string(), j.dump(2) + "\n", "gen-random");
  const std::vector<ExpectedTensor> tensors = random_detokenizer_tensors(opt.audio);
  std::vector<SafetensorsWriter::Entry> entries;
  // The window is a buffer of exact values (the iSTFT divides by its overlap-added square): F32.
  for (const ExpectedTensor& t : tensors) entries.push_back({t.name, t.name == "istft.window" ? DType::F32 : opt.hf_dtype, t.shape});
  SafetensorsWriter w((sub / "model.safetensors").string(), entries,
                      {{"format", "pt"}, {"lfm", "random weights (gen-random); benchmarking only"}});
  AudioRandomRowProducer gen(opt.seed, opt.branch_scale);
  std::vector<float> f32;
  std::vector<uint8_t> bytes;
  for (size_t k = 0; k < tensors.size(); ++k) {
    const ExpectedTensor& t = tensors[k];
    const int64_t cols = t.shape.back(), rows = numel_rows(t.shape);
    const size_t row_bytes = dtype_row_bytes(entries[k].dtype, cols);
    bytes.resize(static_cast<size_t>(rows) * row_bytes);
    // Row chunks of at most 4 Mi values (lfm.embed_tokens alone is 65536×512).
    const int64_t chunk = std::max<int64_t>(1, std::min<int64_t>(rows, (int64_t{1} << 22) / cols));
    f32.resize(static_cast<size_t>(chunk * cols));
    for (int64_t r0 = 0; r0 < rows; r0 += chunk) {
      const int64_t n = std::min(chunk, rows - r0);
      if (t.name == "istft.window") {
        // torch.hann_window(1280) (periodic): 0.5·(1 − cos(2πi/N)).
        for (int64_t i = 0; i < cols; ++i)
          f32[static_cast<size_t>(i)] = static_cast<float>(0.5 - 0.5 * std::cos(2.0 * M_PI * static_cast<double>(i) / static_cast<double>(cols)));
      } else {
        gen.rows(t, r0, n, f32.data());
      }
      for (int64_t r = 0; r < n; ++r)
        quantize_row(entries[k].dtype, f32.data() + r * cols, bytes.data() + static_cast<size_t>(r0 + r) * row_bytes, cols);
    }
    w.write(t.name, bytes.data(), bytes.size());
  }
  w.finish();
}

}  // namespace lfm::gguf
