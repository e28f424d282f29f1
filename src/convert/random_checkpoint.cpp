#include "convert/random_checkpoint.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "core/output_file.h"
#include "convert/quant.h"
#include "convert/random_audio.h"
#include "convert/random_audio_output.h"
#include "formats/safetensors_writer.h"
#include "model/vision_config.h"
#include "model/weights.h"

namespace lfm::gguf {

namespace {

using nlohmann::json;

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

json attention_layers(int64_t n_layers, std::vector<int64_t> attn) {
  std::vector<std::string> types(static_cast<size_t>(n_layers), "conv");
  for (int64_t i : attn) types[static_cast<size_t>(i)] = "full_attention";
  return types;
}

json dense(int64_t d, int64_t layers, int64_t heads, std::vector<int64_t> attn, int64_t ff, bool adjust) {
  return json{{"architectures", {"Lfm2ForCausalLM"}},
              {"model_type", "lfm2"},
              {"hidden_size", d},
              {"num_hidden_layers", layers},
              {"num_attention_heads", heads},
              {"num_key_value_heads", 8},
              {"intermediate_size", ff},
              {"block_auto_adjust_ff_dim", adjust},
              {"block_ffn_dim_multiplier", 1.0},
              {"block_multiple_of", 256},
              {"layer_types", attention_layers(layers, std::move(attn))},
              {"vocab_size", 65536},
              {"max_position_embeddings", 128000},
              {"conv_L_cache", 3},
              {"conv_bias", false},
              {"norm_eps", 1e-5},
              {"rope_theta", 1000000.0},
              {"tie_word_embeddings", true},
              {"bos_token_id", 1},
              {"eos_token_id", 7},
              {"pad_token_id", 0},
              {"torch_dtype", "bfloat16"}};
}

json moe(json base, int64_t dense_ff, int64_t moe_ff, int64_t experts, int64_t top_k, int64_t n_dense) {
  base["architectures"] = {"Lfm2MoeForCausalLM"};
  base["model_type"] = "lfm2_moe";
  base.erase("block_auto_adjust_ff_dim");
  base.erase("block_ffn_dim_multiplier");
  base.erase("block_multiple_of");
  base["intermediate_size"] = dense_ff;
  base["moe_intermediate_size"] = moe_ff;
  base["num_experts"] = experts;
  base["num_experts_per_tok"] = top_k;
  base["num_dense_layers"] = n_dense;
  base["use_expert_bias"] = true;
  base["norm_topk_prob"] = true;
  base["routed_scaling_factor"] = 1.0;
  return base;
}

json tiny() {
  json j = dense(256, 4, 4, {1, 3}, 512, false);
  j["num_key_value_heads"] = 2;
  j["vocab_size"] = 512;
  return j;
}

}  // namespace

std::vector<std::string> random_shape_names() { return {"tiny", "tiny-moe", "350M", "700M", "1.2B", "2.6B", "8B-A1B"}; }

nlohmann::json random_shape_config(const std::string& shape) {
  const std::vector<int64_t> attn16 = {2, 5, 8, 10, 12, 14};
  if (shape == "tiny") return tiny();
  if (shape == "tiny-moe") return moe(tiny(), 512, 256, 4, 2, 1);
  if (shape == "350M") return dense(1024, 16, 16, attn16, 6656, true);
  if (shape == "700M") return dense(1536, 16, 24, attn16, 10240, true);
  if (shape == "1.2B") return dense(2048, 16, 32, attn16, 12288, true);
  if (shape == "2.6B") return dense(2048, 30, 32, {2, 5, 9, 13, 17, 21, 24, 27}, 10752, false);
  if (shape == "8B-A1B") return moe(dense(2048, 24, 32, {2, 6, 10, 14, 18, 21}, 7168, false), 7168, 1792, 32, 4, 2);
  std::string known;
  for (const auto& n : random_shape_names()) known += (known.empty() ? "" : ", ") + n;
  fail("gen-random: unknown shape '", shape, "' (one of ", known, ")");
}

void RandomRowProducer::rows(const ExpectedTensor& t, int64_t first_row, int64_t n_rows, float* out) {
  const int64_t cols = t.shape.back();
  const size_t n = static_cast<size_t>(n_rows * cols);
  if (t.name.ends_with("norm.weight") || t.name.ends_with("norm1.weight") || t.name.ends_with("norm2.weight")) {
    // RMSNorm and LayerNorm weights: 1
    std::fill(out, out + n, 1.0f);
    return;
  }
  if (t.name.ends_with("expert_bias") || t.name.ends_with(".bias")) {
    std::fill(out, out + n, 0.0f);
    return;
  }
  // U(-a, a) has std a/√3; a = 0.02·√3 gives std 0.02 (llama.cpp's tiny test model uses N(0, 0.02)).
  const bool branch_out = t.name.ends_with("out_proj.weight") || t.name.ends_with("w2.weight") ||
                          t.name.ends_with("attn_output.weight") || t.name.ends_with("ffn_down.weight") ||
                          t.name.ends_with("ffn_down_exps.weight");
  const float a = 0.02f * std::sqrt(3.0f) * (branch_out ? branch_scale_ : 1.0f);
  const uint64_t tensor_seed = fnv1a(t.name) ^ (seed_ * 0x9e3779b97f4a7c15ull);
  for (int64_t r = 0; r < n_rows; ++r) {
    uint64_t state = tensor_seed + static_cast<uint64_t>(first_row + r) * 0xd1b54a32d192ed03ull;
    float* row = out + r * cols;
    for (int64_t c = 0; c < cols; ++c) {
      const uint64_t bits = splitmix64(state);
      const float u = static_cast<float>(bits >> 40) * (1.0f / 16777216.0f);  // [0, 1), 24 bits
      row[c] = (2.0f * u - 1.0f) * a;
    }
  }
}

std::vector<std::string> random_vision_names() { return {"siglip2-base", "siglip2-so400m"}; }
std::vector<std::string> random_retriever_names() { return {"embedding", "colbert", "colbert-causal"}; }

namespace {

// LFM2-VL's config.json around a text shape: SigLIP2 NaFlex (patch 16, a 16×16 position table),
// projector 2560 wide (LFM2-VL's), image token 396.
json vl_config(const json& text, const std::string& vision) {
  json v = {{"model_type", "siglip2_vision_model"}, {"hidden_act", "gelu_pytorch_tanh"}, {"layer_norm_eps", 1e-6},
            {"num_channels", 3}, {"num_patches", 256}, {"patch_size", 16}, {"vision_use_head", false}};
  if (vision == "siglip2-base") {
    v.update({{"hidden_size", 768}, {"intermediate_size", 3072}, {"num_hidden_layers", 12}, {"num_attention_heads", 12}});
  } else if (vision == "siglip2-so400m") {
    v.update({{"hidden_size", 1152}, {"intermediate_size", 4304}, {"num_hidden_layers", 27}, {"num_attention_heads", 16}});
  } else {
    fail("gen-random: unknown vision shape '", vision, "' (siglip2-base or siglip2-so400m)");
  }
  json t = text;
  t.erase("architectures");
  return json{{"architectures", {"Lfm2VlForConditionalGeneration"}},
              {"model_type", "lfm2_vl"},
              {"downsample_factor", 2},
              {"image_token_id", 396},
              {"projector_bias", true},
              {"projector_hidden_act", "gelu"},
              {"projector_hidden_size", 2560},
              {"projector_use_layernorm", true},
              {"tie_word_embeddings", true},
              {"text_config", t},
              {"vision_config", v}};
}

// The sentence-transformers / PyLate files of a retriever with the released models' settings,
// and the Dense tensor to write (ColBERT), into `dir`.
std::vector<ExpectedTensor> write_retriever_files(const std::string& dir, const std::string& kind, int64_t d) {
  namespace fs = std::filesystem;
  auto put = [&](const std::string& rel, const json& j) {
    fs::create_directories((fs::path(dir) / rel).parent_path());
    write_file_atomically((fs::path(dir) / rel).string(), j.dump(2) + "\n", "gen-random");
  };
  const json transformer = {{"idx", 0}, {"name", "0"}, {"path", ""}, {"type", "sentence_transformers.models.Transformer"}};
  if (kind == "embedding") {
    put("modules.json", json::array({transformer, {{"idx", 1}, {"name", "1"}, {"path", "1_Pooling"},
                                                   {"type", "sentence_transformers.models.Pooling"}}}));
    put("1_Pooling/config.json", {{"word_embedding_dimension", d}, {"pooling_mode_cls_token", true},
                                  {"pooling_mode_mean_tokens", false}, {"pooling_mode_max_tokens", false},
                                  {"pooling_mode_mean_sqrt_len_tokens", false}, {"pooling_mode_lasttoken", false}});
    put("config_sentence_transformers.json",
        {{"prompts", {{"query", "query: "}, {"document", "document: "}}}, {"similarity_fn_name", "cosine"}});
    put("sentence_bert_config.json", {{"max_seq_length", 512}, {"do_lower_case", false}});
    return {};
  }
  put("modules.json", json::array({transformer, {{"idx", 1}, {"name", "1"}, {"path", "1_Dense"},
                                                 {"type", "pylate.models.Dense.Dense"}}}));
  put("1_Dense/config.json", {{"in_features", d}, {"out_features", 128}, {"bias", false},
                              {"activation_function", "torch.nn.modules.linear.Identity"}});
  json skiplist = json::array();
  for (char c : std::string("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~")) skiplist.push_back(std::string(1, c));
  put("config_sentence_transformers.json",
      {{"query_prefix", "[Q] "}, {"document_prefix", "[D] "}, {"query_length", 32}, {"document_length", 512},
       {"attend_to_expansion_tokens", false}, {"do_query_expansion", true}, {"skiplist_words", skiplist},
       {"similarity_fn_name", "MaxSim"}});
  put("sentence_bert_config.json", {{"max_seq_length", 511}, {"do_lower_case", false}});
  return {{"linear.weight", {128, d}, true}};
}

}  // namespace

void write_random_config(const std::string& dir, const std::string& shape) {
  namespace fs = std::filesystem;
  fs::create_directories(dir);
  const json j = random_shape_config(shape);
  parse_model_config(j);  // validate before writing
  write_file_atomically((fs::path(dir) / "config.json").string(), j.dump(2) + "\n", "gen-random");
}

void write_random_hf(const std::string& dir, const RandomCheckpointOptions& opt) {
  namespace fs = std::filesystem;
  LFM_CHECK(opt.hf_dtype == DType::F32 || opt.hf_dtype == DType::F16 || opt.hf_dtype == DType::BF16,
            "gen-random: a Hugging Face checkpoint stores f32, f16 or bf16, not ", dtype_name(opt.hf_dtype));
  json j = random_shape_config(opt.shape);
  j["torch_dtype"] = opt.hf_dtype == DType::F32 ? "float32" : opt.hf_dtype == DType::F16 ? "float16" : "bfloat16";
  if (!opt.retriever.empty()) {
    LFM_CHECK(opt.vision.empty(), "gen-random: a retriever has no vision tower");
    const auto names = random_retriever_names();
    LFM_CHECK(std::find(names.begin(), names.end(), opt.retriever) != names.end(), "gen-random: unknown retriever '",
              opt.retriever, "' (embedding, colbert or colbert-causal)");
    // As the released checkpoints say it: model_type lfm2 with the base model's architecture.
    j["architectures"] = {opt.retriever == "colbert-causal" ? "Lfm2Model" : "Lfm2BidirectionalModel"};
  }
  const ModelConfig cfg = parse_model_config(j);
  std::vector<ExpectedTensor> tensors = expected_tensors(cfg, cfg.has_lm_head && !cfg.tie_embeddings);
  if (!opt.audio.empty()) {
    // LFM2-Audio: the backbone under "model.lfm.", then the encoder, adapter and audio embedding.
    LFM_CHECK(opt.vision.empty() && opt.retriever.empty(), "gen-random: --audio goes with neither --vision nor --retriever");
    j = random_audio_config(j, opt.audio);
    for (ExpectedTensor& t : tensors)
      if (t.name.starts_with("model.")) t.name = "model.lfm." + t.name.substr(6);
    for (ExpectedTensor& t : random_audio_tensors(opt.audio, cfg.hidden_size)) tensors.push_back(std::move(t));
    // Speech output (lfm2.5-audio, tiny): the depthformer here, the detokenizer in its sub-folder.
    for (ExpectedTensor& t : random_audio_output_tensors(opt.audio, cfg.hidden_size)) tensors.push_back(std::move(t));
  }
  if (!opt.vision.empty()) {
    // LFM2-VL: the language model under transformers 5's names, then the vision tower and projector.
    j = vl_config(j, opt.vision);
    for (ExpectedTensor& t : tensors)
      if (t.name.starts_with("model.")) t.name = "model.language_model." + t.name.substr(6);
    for (const VisionTensor& v : vision_tensors(parse_vision_config(j))) {
      const bool tower = v.name.starts_with("vision.");
      tensors.push_back({(tower ? "model.vision_tower.vision_model." : "model.multi_modal_projector.") +
                             v.name.substr(tower ? 7 : 10),
                         v.shape, v.matrix});
    }
  }
  fs::create_directories(dir);
  write_file_atomically((fs::path(dir) / "config.json").string(), j.dump(2) + "\n", "gen-random");
  if (!opt.retriever.empty()) {
    for (ExpectedTensor& t : tensors)
      if (t.name.starts_with("model.")) t.name = t.name.substr(6);  // a bare base model's names
    const std::vector<ExpectedTensor> dense = write_retriever_files(dir, opt.retriever, cfg.hidden_size);
    if (!dense.empty()) {
      // The Dense module's own file, float32 as PyLate saves it.
      RandomRowProducer gen(opt.seed ^ 0xD3u, 1.0f);
      std::vector<float> w(static_cast<size_t>(dense[0].shape[0] * dense[0].shape[1]));
      gen.rows(dense[0], 0, dense[0].shape[0], w.data());
      SafetensorsWriter dw((fs::path(dir) / "1_Dense/model.safetensors").string(),
                           {{"linear.weight", DType::F32, dense[0].shape}}, {{"format", "pt"}});
      dw.write("linear.weight", w.data(), w.size() * sizeof(float));
      dw.finish();
    }
  }
  std::vector<SafetensorsWriter::Entry> entries;
  uint64_t total = 0;
  for (const auto& t : tensors) {
    // Vectors stay float32 as Hugging Face keeps the MoE expert bias; everything else in hf_dtype.
    const DType dt = t.name.ends_with("expert_bias") ? DType::F32 : opt.hf_dtype;
    entries.push_back({t.name, dt, t.shape});
  }
  SafetensorsWriter w((fs::path(dir) / "model.safetensors").string(), entries, {{"format", "pt"}, {"lfm", "random weights (gen-random); benchmarking only"}});
  for (const auto& e : entries) total += dtype_row_bytes(e.dtype, 1) * [&] {
    uint64_t n = 1;
    for (int64_t d : e.shape) n *= static_cast<uint64_t>(d);
    return n;
  }();
  // The audio producer gives the backbone the same values as the plain one (its norms are 1 either way).
  RandomRowProducer plain(opt.seed, opt.branch_scale);
  AudioRandomRowProducer audio_gen(opt.seed, opt.branch_scale);
  RowProducer& gen = opt.audio.empty() ? static_cast<RowProducer&>(plain) : audio_gen;
  std::vector<float> f32;
  std::vector<uint8_t> bytes;
  uint64_t done = 0;
  const bool bar = opt.progress && isatty(fileno(stderr));
  for (size_t k = 0; k < tensors.size(); ++k) {
    const ExpectedTensor& t = tensors[k];
    const int64_t cols = t.shape.back();
    const int64_t rows = [&] {
      int64_t r = 1;
      for (size_t i = 0; i + 1 < t.shape.size(); ++i) r *= t.shape[i];
      return r;
    }();
    const size_t row_bytes = dtype_row_bytes(entries[k].dtype, cols);
    bytes.resize(static_cast<size_t>(rows) * row_bytes);
    const int64_t chunk = std::max<int64_t>(1, std::min<int64_t>(rows, (int64_t{1} << 22) / cols));
    f32.resize(static_cast<size_t>(chunk * cols));
    for (int64_t r0 = 0; r0 < rows; r0 += chunk) {
      const int64_t n = std::min(chunk, rows - r0);
      gen.rows(t, r0, n, f32.data());
      for (int64_t r = 0; r < n; ++r)
        quantize_row(entries[k].dtype, f32.data() + r * cols, bytes.data() + static_cast<size_t>(r0 + r) * row_bytes, cols);
    }
    w.write(t.name, bytes.data(), bytes.size());
    done += bytes.size();
    if (bar) std::fprintf(stderr, "\r%5.1f%%  %.1f / %.1f MiB", 100.0 * done / total, done / 1048576.0, total / 1048576.0);
  }
  w.finish();
  if (bar) std::fprintf(stderr, "\n");
  if (!opt.audio.empty() && random_audio_has_output(opt.audio)) write_random_detokenizer(dir, opt);
}

void write_random_gguf(const std::string& path, const RandomCheckpointOptions& opt) {
  json shape = random_shape_config(opt.shape);
  if (!opt.layer_types.empty()) {
    std::vector<std::string> types;
    for (char c : opt.layer_types) {
      LFM_CHECK(c == 'c' || c == 'A', "gen-random: layer types are 'c' (conv) or 'A' (attention), got '", c, "' in '",
                opt.layer_types, "'");
      types.push_back(c == 'c' ? "conv" : "full_attention");
    }
    shape["num_hidden_layers"] = static_cast<int64_t>(types.size());
    shape["layer_types"] = types;
  }
  const ModelConfig cfg = parse_model_config(shape);
  RandomRowProducer gen(opt.seed, opt.branch_scale);
  ExportOptions eo;
  eo.type = opt.gguf_type;
  eo.name = "LFM2-" + opt.shape + "-random";
  eo.progress = opt.progress;
  eo.threads = opt.threads;
  eo.extra.emplace_back("general.description",
                        Value::of_string("random weights (lfm gen-random, seed " + std::to_string(opt.seed) +
                                         "); for benchmarking only, says nothing about quality"));
  write_gguf_model(path, cfg, gen, eo);
  if (!opt.audio.empty()) {
    namespace fs = std::filesystem;
    const std::string mm = opt.mmproj_path.empty()
                               ? (fs::path(path).parent_path() / ("mmproj-" + fs::path(path).filename().string())).string()
                               : opt.mmproj_path;
    write_random_audio_mmproj(mm, opt);
  }
}

}  // namespace lfm::gguf
