// lfm info: the normalised config, layer pattern, sizes and cache costs of a model. Works on a
// folder that holds only config.json (sizes are then derived from the config).
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>

#include "cli/command.h"
#include "cli/common.h"
#include "formats/gguf_info.h"
#include "formats/gguf_reader.h"
#include "formats/safetensors.h"
#include "model/gguf_retrieval.h"
#include "model/retrieval.h"
#include "model/state_plan.h"
#include "model/weights.h"

namespace lfm::cli {
namespace {

int64_t dtype_bytes_for(const std::string& torch_dtype) {
  if (torch_dtype == "float32") return 4;
  return 2;  // bfloat16 / float16
}

std::string gib(size_t bytes) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.3f GiB", static_cast<double>(bytes) / (1024.0 * 1024 * 1024));
  return buf;
}

int run_info(int argc, char** argv) {
  CLI::App app{"Describe a model: config, layer pattern, parameters, bytes and cache sizes."};
  configure_app(app);
  std::string model;
  bool json_out = false;
  StateArgs state;
  state.ctx_size = 0;
  app.add_option("-m,--model", model,
                 std::string("Model: Hugging Face folder (config.json is enough) or .gguf file") + kModelRefHelp +
                     " (only config.json is fetched for a safetensors repository)")
      ->required();
  add_state_options(app, state, /*engine=*/true);
  app.get_option("--ctx-size")->description("Context size for the state pool report (default: the model's)");
  app.add_flag("--json", json_out, "Print one JSON object");
  LFM_CLI_PARSE(app, argc, argv);

  model = resolve_model_arg(model, hub::Need::kConfig);
  namespace fs = std::filesystem;
  ModelConfig cfg;
  int64_t params = 0;
  size_t bytes = 0;
  std::string weights_note;
  const bool has_weights = fs::is_regular_file(model) || fs::exists(fs::path(model) / "model.safetensors") ||
                           fs::exists(fs::path(model) / "model.safetensors.index.json");
  std::unique_ptr<Model> m;
  if (has_weights) {
    m = load_model(model, LoadOptions{.pack = false});
    cfg = m->config();
    params = m->parameter_count();
    bytes = m->weight_bytes();
    weights_note = "from the checkpoint";
  } else {
    cfg = load_model_config((fs::path(model) / "config.json").string());
    for (const auto& t : expected_tensors(cfg, cfg.has_lm_head && !cfg.tie_embeddings)) {
      int64_t n = 1;
      for (int64_t d : t.shape) n *= d;
      params += n;
    }
    bytes = static_cast<size_t>(params) * dtype_bytes_for(cfg.dtype);
    weights_note = "derived from config.json (no weights in the folder)";
  }
  if (state.ctx_size == 0) state.ctx_size = cfg.max_position;
  const StatePlanOptions plan = state_plan(state, cfg, m.get());
  const StateCacheOptions pool = plan_state_cache(cfg, plan);
  const StateBytes sb = state_bytes(state_shape(cfg), pool);
  const std::string cache_dtype = dtype_name(pool.type);
  nlohmann::json j;
  j["config"] = cfg.to_json();
  j["layer_pattern"] = cfg.layer_pattern();
  j["parameters"] = params;
  j["weight_bytes"] = bytes;
  j["weights_source"] = weights_note;
  j["cache_dtype"] = cache_dtype;
  j["kv_cache_bytes_per_token"] = sb.kv_per_token;
  j["conv_state_bytes_per_sequence"] = sb.conv_per_slot;
  j["state_pool"] = {{"ctx_size", plan.ctx_size},
                     {"parallel", plan.parallel},
                     {"block_tokens", pool.block_tokens},
                     {"blocks", pool.n_blocks},
                     {"kv_bytes", sb.kv_total},
                     {"conv_slot_bytes", sb.conv_total},
                     {"prefix_snapshot_bytes", sb.snapshots_total},
                     {"total_bytes", sb.total()}};
  const bool is_gguf = fs::is_regular_file(model) && is_gguf_path(model);
  if (is_gguf) j["gguf"] = gguf::gguf_summary_json(model);
  // A retriever's head (its sentence-transformers / PyLate files, or the GGUF's keys).
  std::optional<RetrievalConfig> head;
  if (fs::is_directory(model)) head = read_retrieval_config(model, cfg.hidden_size);
  else if (is_gguf) head = gguf::retrieval_config_from_gguf(gguf::GgufFile(model), cfg);
  if (head) {
    j["retriever"] = {{"kind", head->colbert() ? "colbert" : "embedding"},
                      {"pooling", pooling_name(head->pooling)},
                      {"normalize", head->normalize},
                      {"dense_out", head->dense_out},
                      {"max_tokens", head->max_tokens},
                      {"query_prompt", head->query_prompt},
                      {"document_prompt", head->document_prompt},
                      {"query_prefix", head->query_prefix},
                      {"document_prefix", head->document_prefix},
                      {"query_length", head->query_length},
                      {"document_length", head->document_length},
                      {"attend_to_expansion_tokens", head->attend_to_expansion_tokens},
                      {"skiplist_words", head->skiplist_words.size()}};
  }
  if (json_out) {
    std::cout << j.dump(2) << "\n";
    return 0;
  }
  std::cout << "model:        " << model << "\n"
            << "type:         " << cfg.model_type << " (" << cfg.architecture << "), dtype " << cfg.dtype << "\n"
            << "layers:       " << cfg.n_layers << " (" << cfg.n_conv_layers() << " conv, " << cfg.n_attention_layers()
            << " attention)\n"
            << "pattern:      " << cfg.layer_pattern() << "  (c = conv, A = attention)\n"
            << "hidden:       " << cfg.hidden_size << ", heads " << cfg.n_heads << " / kv " << cfg.n_kv_heads
            << ", head_dim " << cfg.head_dim << "\n"
            << "ffn width:    " << cfg.ffn_dim << "\n";
  if (cfg.is_moe())
    std::cout << "experts:      " << cfg.n_experts << " x " << cfg.moe_ffn_dim << ", top-" << cfg.n_experts_used
              << ", dense layers " << cfg.n_dense_layers << "\n";
  std::cout << "vocab:        " << cfg.vocab_size << ", tied embeddings " << (cfg.tie_embeddings ? "yes" : "no") << "\n"
            << "rope theta:   " << cfg.rope_theta << ", norm eps " << cfg.norm_eps << ", conv kernel "
            << cfg.conv_kernel << (cfg.conv_bias ? " (with biases)" : "") << "\n"
            << "context:      " << cfg.max_position << " (max_position_embeddings)\n"
            << "parameters:   " << params << " (" << weights_note << ")\n"
            << "weight bytes: " << bytes << "\n"
            << "KV cache:     " << sb.kv_per_token << " bytes/token in " << cache_dtype << "\n"
            << "conv state:   " << sb.conv_per_slot << " bytes/sequence in " << cache_dtype << "\n"
            << "state pool:   " << plan.parallel << " x " << plan.ctx_size << " tokens in " << pool.n_blocks
            << " blocks of " << pool.block_tokens << ": KV " << gib(sb.kv_total) << " + conv slots " << sb.conv_total
            << " bytes";
  if (pool.prefix_cache)
    std::cout << " + prefix-cache conv snapshots " << gib(sb.snapshots_total) << " (one per block; --no-prefix-cache drops them)";
  std::cout << " = " << gib(sb.total()) << "\n";
  if (head) {
    std::cout << "retriever:    ";
    if (head->colbert())
      std::cout << "ColBERT, Dense " << cfg.hidden_size << " -> " << head->dense_out << ", queries " << head->query_length
                << " tokens (" << (head->attend_to_expansion_tokens ? "" : "un") << "attended expansion), documents "
                << head->document_length << ", " << head->skiplist_words.size() << " skiplist words\n";
    else
      std::cout << pooling_name(head->pooling) << " pooling" << (head->normalize ? ", normalised" : "")
                << (head->dense_out ? ", Dense to " + std::to_string(head->dense_out) : std::string()) << ", texts up to "
                << head->max_tokens << " tokens, prompts \"" << head->query_prompt << "\" / \"" << head->document_prompt
                << "\"\n";
  }
  if (is_gguf) std::cout << gguf::gguf_summary_text(model);
  return 0;
}

CommandRegistrar reg({"info", "describe a model (config, layers, sizes, cache costs)", run_info});

}  // namespace
}  // namespace lfm::cli
