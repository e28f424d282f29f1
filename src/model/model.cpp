#include "model/model.h"

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "core/error.h"
#include "core/file_io.h"
#include "core/json_guard.h"
#include "formats/renamed_source.h"
#include "formats/safetensors.h"
#include "kernels/backend.h"
#include "kernels/weight_pack.h"
#include "model/audio_config.h"
#include "model/audio_model.h"
#include "model/speech_out.h"
#include "model/detokenizer.h"
#include "model/gguf_model.h"
#include "model/mimi.h"
#include "model/retrieval.h"
#include "model/vision_config.h"
#include "model/vision_model.h"

namespace lfm {

std::vector<float> rope_inverse_frequencies(double theta, int64_t head_dim) {
  // torch: 1.0 / (base ** (arange(0, dim, 2).float() / dim)), all in float32.
  std::vector<float> inv(static_cast<size_t>(head_dim / 2));
  for (int64_t j = 0; j < head_dim / 2; ++j) {
    const float expo = static_cast<float>(2 * j) / static_cast<float>(head_dim);
    const float p =
        static_cast<float>(std::pow(static_cast<double>(static_cast<float>(theta)), static_cast<double>(expo)));
    inv[j] = 1.0f / p;
  }
  return inv;
}

Model::Model(ModelConfig cfg, std::unique_ptr<TensorSource> source, const LoadOptions& options)
    : cfg_(std::move(cfg)), source_(std::move(source)) {
  weights_ = bind_weights(cfg_, *source_);
  if (options.bf16_activations) set_bf16_activations();
  int64_t n_conv = 0, n_attn = 0;
  for (LayerKind k : cfg_.layer_kinds) slot_.push_back(k == LayerKind::Conv ? n_conv++ : n_attn++);
  inv_freq_ = rope_inverse_frequencies(cfg_.rope_theta, cfg_.head_dim);
  if (options.pack) prepare_weights(options.backend);
  const Backend* run_on = options.run_on;
  if (options.pack && run_on && run_on->reads_only_prepared_copies() &&
      (prepared_for_ == run_on || (prepared_for_ == nullptr && run_on->host_memory())))
    detach_from_files();
}

namespace {

// Every matrix that matmul reads. The embedding table is not among them (rows are looked up as
// stored); a tied lm_head is its own view of the same bytes and is.
template <typename F>
void for_each_matmul_weight(ModelWeights& w, F&& f) {
  f(w.lm_head);
  for (LayerWeights& l : w.layers) {
    for (TensorView* t : {&l.conv.in_proj, &l.conv.out_proj, &l.attn.q, &l.attn.k, &l.attn.v, &l.attn.out, &l.ffn.w1,
                          &l.ffn.w3, &l.ffn.w2, &l.moe.router})
      f(*t);
    for (FfnWeights& e : l.moe.experts)
      for (TensorView* t : {&e.w1, &e.w3, &e.w2}) f(*t);
  }
}

// Every small vector an op reads.
template <typename F>
void for_each_weight_vector(ModelWeights& w, F&& f) {
  f(w.final_norm);
  for (LayerWeights& l : w.layers)
    for (WeightVector* v : {&l.operator_norm, &l.ffn_norm, &l.conv.kernel, &l.conv.in_bias, &l.conv.conv_bias,
                            &l.conv.out_bias, &l.attn.q_norm, &l.attn.k_norm, &l.moe.expert_bias})
      f(*v);
}

}  // namespace

// The backend makes the copies its kernels read (Backend::prepare_weights); the CPU preparation
// when none is named. Absent tensors (views without data, empty vectors) are not offered.
void Model::prepare_weights(Backend* backend) {
  WeightSet set;
  for_each_matmul_weight(weights_, [&](TensorView& t) {
    if (t.data) set.matrices.push_back(&t);
  });
  set.tables.push_back(&weights_.embed);
  for_each_weight_vector(weights_, [&](WeightVector& v) {
    if (!v.empty()) set.vectors.push_back(&v);
  });
  set.vectors.push_back(&inv_freq_);
  TensorSource* src = source_.get();
  set.release_original = [src](const TensorView& t) { src->drop_pages(t); };
  prepared_ = backend ? backend->prepare_weights(set) : prepare_cpu_weights(set);
  prepared_for_ = backend;
}

// What a step still reads of the stored bytes: the embedding table unless the backend copied it,
// and every matrix that got no copy (a tied lm_head is the table's bytes). Those are copied into
// memory in place; the files are let go of (TensorSource::detach).
void Model::detach_from_files() {
  std::vector<std::pair<const void*, size_t>> keep;
  auto still_read = [&](const TensorView& t) {
    if (t.data && !t.packed) keep.push_back({t.data, t.nbytes});
  };
  still_read(weights_.embed);
  for_each_matmul_weight(weights_, still_read);
  std::sort(keep.begin(), keep.end());
  keep.erase(std::unique(keep.begin(), keep.end()), keep.end());
  for (const auto& range : keep) resident_bytes_ += range.second;
  source_->detach(keep);
  detached_ = true;
}

// Before packing: the layout a matrix gets depends on its act_type (weight_pack.h).
void Model::set_bf16_activations() {
  for_each_matmul_weight(weights_, [&](TensorView& t) {
    if (t.dtype != DType::BF16) return;
    t.act_type = DType::BF16;
    bf16_activations_ = true;
  });
}

size_t Model::packed_bytes() const {
  size_t n = 0;
  if (prepared_)
    for (const auto& r : prepared_->host_copies) n += r.second;
  return n;
}

size_t Model::prepared_bytes() const { return prepared_ ? prepared_->bytes : 0; }

std::vector<std::pair<const void*, size_t>> Model::read_ranges() const {
  using Span = std::pair<uintptr_t, uintptr_t>;  // [begin, end) addresses
  std::vector<Span> replaced;
  std::vector<std::pair<const void*, size_t>> out;
  if (prepared_) {
    for (const auto& [p, n] : prepared_->replaced)
      replaced.push_back({reinterpret_cast<uintptr_t>(p), reinterpret_cast<uintptr_t>(p) + n});
    out = prepared_->host_copies;
  }
  std::sort(replaced.begin(), replaced.end());
  for (const auto& name : source_->names()) {
    const TensorView* t = source_->find(name);
    uintptr_t at = reinterpret_cast<uintptr_t>(t->data);
    const uintptr_t end = at + t->nbytes;
    for (const Span& r : replaced) {  // in address order: keep the pieces between replaced spans
      if (r.first >= end) break;
      if (r.second <= at) continue;
      if (r.first > at) out.push_back({reinterpret_cast<const void*>(at), r.first - at});
      at = std::max(at, r.second);
    }
    if (end > at) out.push_back({reinterpret_cast<const void*>(at), end - at});
  }
  return out;
}

int64_t Model::parameter_count() const {
  int64_t n = 0;
  for (const auto& name : source_->names()) n += source_->find(name)->numel();
  return n;
}

size_t Model::weight_bytes() const {
  size_t n = 0;
  for (const auto& name : source_->names()) n += source_->find(name)->nbytes;
  return n;
}

size_t Model::expert_bytes() const {
  size_t n = 0;
  for (const LayerWeights& l : weights_.layers)
    for (const FfnWeights& e : l.moe.experts)
      for (const TensorView* t : {&e.w1, &e.w3, &e.w2}) n += t->packed && t->packed_layout != PackedLayout::kDevice ? packed_size(t->packed_layout, *t) : t->nbytes;
  return n;
}

size_t Model::read_bytes() const {
  size_t n = 0;
  for (const auto& range : read_ranges()) n += range.second;
  return n;
}

namespace {

bool starts_with(const std::string& s, const std::string& prefix) { return s.compare(0, prefix.size(), prefix) == 0; }

// A name with `from` replaced by `to` where it occurs (once).
std::string replaced(std::string s, const std::string& from, const std::string& to) {
  if (const size_t at = s.find(from); at != std::string::npos) s.replace(at, from.size(), to);
  return s;
}

// The binding name (model/audio_model.h) of an LFM2-Audio checkpoint tensor that belongs to the
// speech encoder or adapter: native transformers names ("model.conformer.…",
// "model.audio_adapter_…") or the original ones ("conformer.…" with NeMo's module names,
// "audio_adapter.model.{0,1,3}.…"; docs/design/audio_input_research.md §1.3). Empty otherwise.
std::string audio_binding_name(const std::string& n) {
  if (starts_with(n, "model.conformer.")) return n.substr(6);
  if (starts_with(n, "model.audio_adapter_")) return n.substr(6);
  if (starts_with(n, "conformer.")) {
    std::string s = replaced(n, "conformer.pre_encode.conv.", "conformer.subsampling.layers.");
    s = replaced(s, "conformer.pre_encode.out.", "conformer.subsampling.linear.");
    for (const auto& [from, to] : {std::pair<const char*, const char*>{".self_attn.linear_q.", ".self_attn.q_proj."},
                                   {".self_attn.linear_k.", ".self_attn.k_proj."},
                                   {".self_attn.linear_v.", ".self_attn.v_proj."},
                                   {".self_attn.linear_out.", ".self_attn.o_proj."},
                                   {".self_attn.linear_pos.", ".self_attn.relative_k_proj."},
                                   {".self_attn.pos_bias_u", ".self_attn.bias_u"},
                                   {".self_attn.pos_bias_v", ".self_attn.bias_v"},
                                   {".conv.batch_norm.", ".conv.norm."}})
      s = replaced(s, from, to);
    return s;
  }
  if (starts_with(n, "audio_adapter.model.0.")) return "audio_adapter_norm." + n.substr(22);
  if (starts_with(n, "audio_adapter.model.1.")) return "audio_adapter_linear_1." + n.substr(22);
  if (starts_with(n, "audio_adapter.model.3.")) return "audio_adapter_linear_2." + n.substr(22);
  return {};
}

// Tensors of an LFM2-Audio checkpoint that speech input does not use: the audio output side
// (audio_embedding, depthformer, depth_*) and training buffers.
bool audio_output_tensor(const std::string& n) {
  const std::string s = starts_with(n, "model.") ? n.substr(6) : n;
  for (const char* p : {"audio_embedding.", "depthformer.", "depth_linear.", "depth_embeddings.", "codebook_offsets",
                        "audio_loss_weights"})
    if (starts_with(s, p)) return true;
  return false;
}

std::vector<std::pair<std::string, std::string>> audio_text_prefixes() {
  return {{"model.lfm.", "model."}, {"lfm.", "model."}};
}

// The speech encoder's and adapter's tensors of a checkpoint under their binding names.
std::shared_ptr<RenamedTensorSource> audio_source(const std::shared_ptr<const TensorSource>& base) {
  std::vector<std::pair<std::string, std::string>> names;  // whole names, as "prefixes"
  for (const std::string& n : base->names())
    if (std::string ours = audio_binding_name(n); !ours.empty()) names.emplace_back(n, std::move(ours));
  return std::make_shared<RenamedTensorSource>(base, names);
}

AudioConfig parse_audio_config_at(const nlohmann::json& j, const std::string& config_path) {
  try {
    return parse_audio_config(j);
  } catch (const nlohmann::json::exception& e) {
    fail("config: '", config_path, "': ", e.what());
  } catch (const Error& e) {
    fail(e.what(), " (in '", config_path, "')");
  }
}

// LFM2-Audio: the backbone (the `lfm` dict, tensors "model.lfm.…" or "lfm.…") and, when the
// weights are prepared, the speech encoder and adapter; the audio output tensors stay unused.
std::unique_ptr<Model> load_audio_folder(const std::string& path, const std::string& config_path,
                                         const nlohmann::json& j, const LoadOptions& options) {
  ModelConfig cfg;
  try {
    cfg = parse_model_config(audio_text_config_of(j));
  } catch (const nlohmann::json::exception& e) {
    fail("config: '", config_path, "': ", e.what());
  } catch (const Error& e) {
    fail(e.what(), " (in '", config_path, "')");
  }
  const AudioConfig acfg = parse_audio_config_at(j, config_path);
  LFM_CHECK(acfg.audio_token_id < cfg.vocab_size, "config: audio_token_id ", acfg.audio_token_id,
            " is outside the vocabulary of ", cfg.vocab_size, " (in '", config_path, "')");
  LFM_CHECK(acfg.text_hidden_size == cfg.hidden_size, "config: the audio adapter's width ", acfg.text_hidden_size,
            " is not the language model's hidden size ", cfg.hidden_size, " (in '", config_path, "')");
  auto base = std::make_shared<SafetensorsCheckpoint>(path);
  auto text = std::make_unique<RenamedTensorSource>(base, audio_text_prefixes());
  auto audio_src = audio_source(base);
  size_t unused = 0;
  for (const std::string& n : base->names()) unused += audio_output_tensor(n) ? 1 : 0;
  const size_t ours = text->names().size() + audio_src->names().size() + unused;
  LFM_CHECK(ours == base->names().size(), "weights: ", base->names().size() - ours, " tensors of ", base->origin(),
            " belong to neither the language model, the speech encoder nor the audio output");
  auto model = std::make_unique<Model>(std::move(cfg), std::move(text), options);
  if (options.pack) {
    model->set_audio(std::make_shared<AudioModel>(acfg, audio_src, options.backend));
    const std::vector<std::string> names = base->names();
    const bool speaks = std::any_of(names.begin(), names.end(),
                                    [](const std::string& n) { return n.find("depthformer.") != std::string::npos; });
    if (speaks) {
      SpeechOutConfig scfg;
      try {
        scfg = parse_speech_out_config(j, model->config().hidden_size);
      } catch (const nlohmann::json::exception& e) {
        fail("config: '", config_path, "': ", e.what());
      } catch (const Error& e) {
        fail(e.what(), " (in '", config_path, "')");
      }
      model->set_speech_out(std::make_shared<SpeechOutModel>(scfg, base, options.backend));
    }
    // Codes → waveform: a Mimi named by LoadOptions::vocoder; else LFM2.5-Audio's detokenizer
    // subfolder; else (LFM2-Audio-1.5B) Kyutai's Mimi in moshi's layout beside the weights.
    const std::filesystem::path detok = std::filesystem::path(path) / "audio_detokenizer";
    if (!options.vocoder.empty()) {
      model->set_detokenizer(MimiDecoder::load(options.vocoder, options));
    } else if (std::filesystem::exists(detok / "config.json")) {
      model->set_detokenizer(Detokenizer::load(detok.string(), options));
    } else if (speaks) {
      if (const std::string mimi = MimiDecoder::find_in_folder(path); !mimi.empty())
        model->set_detokenizer(MimiDecoder::load(mimi, options));
    }
  }
  return model;
}

}  // namespace

std::unique_ptr<Model> load_model(const std::string& path, const LoadOptions& options) {
  namespace fs = std::filesystem;
  LFM_CHECK(fs::exists(path), "model: '", path, "' does not exist");
  if (fs::is_regular_file(path)) {
    LFM_CHECK(is_gguf_path(path), "model: '", path,
              "' is a file but not a .gguf; pass a checkpoint folder or a GGUF file");
    return load_gguf_model(path, options);
  }
  const std::string config_path = (fs::path(path) / "config.json").string();
  const nlohmann::json j = parse_json(read_text_file(config_path, "config:"), cat("config: '", config_path, "'"));
  LFM_CHECK(options.vocoder.empty() || (is_audio_config(j) && MimiDecoder::is_mimi_file(options.vocoder)),
            "model: a vocoder file goes with a .gguf language model, or a Mimi (transformers' folder or a .safetensors "
            "file) with an LFM2-Audio checkpoint folder; '", options.vocoder, "' is neither for the checkpoint folder '",
            path, "'");
  LFM_CHECK(options.mmproj.empty(), "model: an mmproj file goes with a .gguf language model; the checkpoint folder '",
            path, "' has its own vision tower");
  if (is_audio_config(j)) return load_audio_folder(path, config_path, j, options);
  if (!is_vision_language_config(j)) {
    ModelConfig cfg = load_model_config(config_path);
    const int64_t hidden = cfg.hidden_size;
    std::unique_ptr<TensorSource> src = std::make_unique<SafetensorsCheckpoint>(path);
    // A base model saved on its own (a retriever's Lfm2Model / Lfm2BidirectionalModel) names its
    // tensors without the "model." prefix.
    if (!cfg.has_lm_head && !src->find("model.embed_tokens.weight") && src->find("embed_tokens.weight")) {
      std::shared_ptr<const TensorSource> base = std::move(src);
      src = std::make_unique<RenamedTensorSource>(base, std::vector<std::pair<std::string, std::string>>{
                                                            {"embed_tokens.", "model.embed_tokens."},
                                                            {"embedding_norm.", "model.embedding_norm."},
                                                            {"layers.", "model.layers."}});
    }
    auto model = std::make_unique<Model>(std::move(cfg), std::move(src), options);
    if (options.pack) model->set_retrieval(load_retrieval_head(path, hidden, options.backend));
    return model;
  }
  // LFM2-VL: one checkpoint, three sub-models under their own prefixes.
  ModelConfig cfg;
  VisionConfig vcfg;
  try {
    cfg = parse_model_config(text_config_of(j));
    vcfg = parse_vision_config(j);
  } catch (const nlohmann::json::exception& e) {
    fail("config: '", config_path, "': ", e.what());
  } catch (const Error& e) {
    fail(e.what(), " (in '", config_path, "')");
  }
  LFM_CHECK(vcfg.image_token_id < cfg.vocab_size, "config: image_token_id ", vcfg.image_token_id,
            " is outside the vocabulary of ", cfg.vocab_size, " (in '", config_path, "')");
  auto base = std::make_shared<SafetensorsCheckpoint>(path);
  auto text = std::make_unique<RenamedTensorSource>(base, vl_text_prefixes());
  auto vision_src = std::make_shared<RenamedTensorSource>(base, vl_vision_prefixes());
  LFM_CHECK(text->names().size() + vision_src->names().size() == base->names().size(), "weights: ",
            base->names().size() - text->names().size() - vision_src->names().size(), " tensors of ", base->origin(),
            " belong to neither the language model nor the vision tower");
  auto model = std::make_unique<Model>(std::move(cfg), std::move(text), options);
  if (options.pack) model->set_vision(std::make_shared<VisionModel>(vcfg, vision_src, options.backend));
  return model;
}

std::optional<VisionCheckpoint> open_vision_checkpoint(const std::string& folder) {
  namespace fs = std::filesystem;
  const std::string config_path = (fs::path(folder) / "config.json").string();
  const nlohmann::json j = parse_json(read_text_file(config_path, "config:"), cat("config: '", config_path, "'"));
  if (!is_vision_language_config(j)) return std::nullopt;
  VisionCheckpoint v;
  try {
    v.config = parse_vision_config(j);
  } catch (const nlohmann::json::exception& e) {
    fail("config: '", config_path, "': ", e.what());
  } catch (const Error& e) {
    fail(e.what(), " (in '", config_path, "')");
  }
  v.source = std::make_shared<RenamedTensorSource>(std::make_shared<SafetensorsCheckpoint>(folder), vl_vision_prefixes());
  return v;
}

std::optional<AudioCheckpoint> open_audio_checkpoint(const std::string& folder) {
  namespace fs = std::filesystem;
  const std::string config_path = (fs::path(folder) / "config.json").string();
  const nlohmann::json j = parse_json(read_text_file(config_path, "config:"), cat("config: '", config_path, "'"));
  if (!is_audio_config(j)) return std::nullopt;
  AudioCheckpoint a;
  a.config = parse_audio_config_at(j, config_path);
  a.source = audio_source(std::make_shared<SafetensorsCheckpoint>(folder));
  return a;
}

}  // namespace lfm
