#include "cli/common.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "core/error.h"
#include "core/file_io.h"
#include "engine/generation_config.h"
#include "hub/resolve.h"
#include "hub/settings.h"
#include "kernels/backend_factory.h"

namespace lfm::cli {

std::vector<int32_t> parse_id_list(const std::string& s, const char* what) {
  std::vector<int32_t> ids;
  size_t i = 0;
  while (i <= s.size()) {
    size_t j = s.find(',', i);
    if (j == std::string::npos) j = s.size();
    std::string tok = s.substr(i, j - i);
    const auto first = tok.find_first_not_of(" \t");
    const auto last = tok.find_last_not_of(" \t");
    tok = first == std::string::npos ? "" : tok.substr(first, last - first + 1);
    int32_t v = 0;
    auto [p, ec] = std::from_chars(tok.data(), tok.data() + tok.size(), v);
    LFM_CHECK(!tok.empty() && ec == std::errc() && p == tok.data() + tok.size() && v >= 0, what,
              ": '", tok, "' is not a token id (expected comma-separated non-negative integers)");
    ids.push_back(v);
    i = j + 1;
  }
  return ids;
}

std::string resolve_model_arg(const std::string& model, hub::Need need) {
  check_file_or_folder(model, "model:");  // a FIFO would block the first open() forever
  return hub::resolve_model_arg(model, need, hub::settings_from_env());
}

namespace {

CLI::Validator number_check(bool strict, const char* name) {
  return CLI::Validator(
      [strict](std::string& input) -> std::string {
        const char* begin = input.c_str();
        char* end = nullptr;
        const double v = std::strtod(begin, &end);
        if (end == begin || *end != '\0' || std::isnan(v)) return "'" + input + "' is not a number";
        if (strict && !(v > 0)) return "'" + input + "' must be greater than 0";
        if (!strict && !(v >= 0)) return "'" + input + "' must be 0 or more";
        return "";
      },
      strict ? "POSITIVE" : "NONNEGATIVE", name);
}

}  // namespace

CLI::Validator non_negative_number() { return number_check(false, "NONNEGATIVE"); }
CLI::Validator positive_number() { return number_check(true, "POSITIVE"); }

void configure_app(CLI::App& app) {
  app.failure_message(CLI::FailureMessage::help);
  app.get_formatter()->column_width(34);
}

Runtime open_runtime(const std::string& model_path, int threads, const LoadOptions& load, const std::string& device) {
  Runtime rt;
  rt.pool = std::make_unique<ThreadPool>(threads);
  rt.backend = make_backend(parse_device(device), *rt.pool);
  LoadOptions opt = load;
  if (!rt.backend->host_memory()) opt.backend = rt.backend.get();  // the CPU backends share one preparation
  opt.run_on = rt.backend.get();  // the model lets go of its files where the backend allows
  rt.model = load_model(model_path, opt);
  return rt;
}

void add_device_option(CLI::App& app, std::string& device) {
  app.add_option("--device", device,
                 "Where the model runs: cpu, cuda (an NVIDIA GPU; an error when there is none) or auto (a GPU when "
                 "there is one)")
      ->capture_default_str();
}

void add_load_options(CLI::App& app, LoadOptions& load) {
  app.add_flag("--bf16-activations", load.bf16_activations,
               "BF16 weights multiply activations rounded once to bf16 (as llama.cpp and transformers in bf16 do) "
               "instead of exact float32 ones; other weight types and everything outside the matrix products are "
               "unchanged. Prefill ~2x faster on CPUs with AVX-512 BF16 or AMX; on the BF16 test fixture the logits moved "
               "by 1% of the largest (tested bound 3%; README.md: Precision). No effect on CUDA");
  app.add_option("--mmproj", load.mmproj,
                 "LFM2-VL vision tower as llama.cpp's mmproj GGUF, beside a .gguf language model (a processor_config.json "
                 "next to it, if any, sets the image preprocessing)")
      ->check(CLI::ExistingFile);
  app.add_option("--vocoder", load.vocoder,
                 "LFM2.5-Audio speech output (depth transformer and detokenizer) as llama.cpp's vocoder GGUF, beside a "
                 ".gguf language model (lfm convert writes it as vocoder-<name>.gguf); or, with an LFM2-Audio checkpoint "
                 "folder, Kyutai's Mimi decoder (transformers' kyutai/mimi folder or moshi's .safetensors file)")
      ->check(CLI::ExistingPath);
}

void add_schedule_options(CLI::App& app, StateArgs& a) {
  app.add_option("--itl-target-ms", a.itl_target_ms,
                 "Inter-token latency target while new prompts are prefilled: prompt tokens join the decode "
                 "tokens of a step as far as its predicted time (a cost model fitted to the steps run) stays "
                 "within it, at least " + std::to_string(kMinPromptTokens) +
                     " per step; 0: no target, prompts fill the step up to --batch-tokens")
      ->capture_default_str()
      ->check(non_negative_number());
  app.add_option("--encode-slice-ms", a.encode_slice_ms,
                 "Images: while other requests decode, encoding an image takes at most this long per step (at least "
                 "one encoder layer), so their streams go on beside it; -1: --itl-target-ms; 0: whole images at once")
      ->capture_default_str()
      ->check(CLI::Range(-1.0, 1e9));
  app.add_option("--prefill-chunk", a.prefill_chunk,
                 "A fixed count instead of --itl-target-ms (wins when given): while requests decode, at most this "
                 "many prompt tokens per step next to their decode tokens (0: up to --batch-tokens)")
      ->check(non_negative_number());
}

void add_state_options(CLI::App& app, StateArgs& a, bool engine) {
  app.add_option("-c,--ctx-size", a.ctx_size, "Context size: most tokens per sequence")
      ->capture_default_str()
      ->check(positive_number());
  app.add_option("--kv-type", a.kv_type,
                 "Storage of K/V and conv states: f32, f16, bf16, or auto (the checkpoint's: bf16/f16 safetensors "
                 "keep their dtype, GGUF f16, f32 checkpoints f32)")
      ->capture_default_str();
  app.add_option("--kv-block-size", a.block_tokens, "Tokens per KV cache block")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{65536}));
  if (!engine) return;
  app.add_option("--parallel", a.parallel, "Sequences running at once (one conv-state slot each)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{65536}));
  app.add_option("--kv-memory", a.kv_memory,
                 "KV pool budget (e.g. 2G, 512M); default: enough for --ctx-size x --parallel tokens");
  app.add_option("--batch-tokens", a.batch_tokens, "Most tokens per step (prefill is chunked to fit)")
      ->capture_default_str()
      ->check(positive_number());
  add_schedule_options(app, a);
  app.add_flag("--no-prefix-cache", a.no_prefix_cache, "Do not keep and reuse the state of earlier prompts");
}

StatePlanOptions state_plan(const StateArgs& a, const ModelConfig& cfg, const Model* model) {
  StatePlanOptions o;
  o.ctx_size = a.ctx_size;
  o.parallel = a.parallel;
  o.block_tokens = a.block_tokens;
  o.type = parse_state_type(a.kv_type, model ? default_state_type(*model) : default_state_type(cfg));
  o.memory_bytes = a.kv_memory.empty() ? 0 : parse_byte_size(a.kv_memory);
  o.prefix_cache = !a.no_prefix_cache;
  return o;
}

EngineOptions engine_options(const StateArgs& a, const Model& model) {
  EngineOptions e;
  e.state = state_plan(a, model.config(), &model);
  e.batch_tokens = a.batch_tokens;
  e.itl_target_ms = a.itl_target_ms;
  e.encode_slice_ms = a.encode_slice_ms;
  e.prefill_chunk = a.prefill_chunk;
  return e;
}

void add_sampling_options(CLI::App& app, SamplingParams& sp, uint64_t& seed, std::string& generation_config) {
  app.add_option("--generation-config", generation_config,
                 "Sampling defaults used when no sampling flag is given: auto (the model folder's "
                 "generation_config.json: temperature, top_p, top_k, min_p, repetition_penalty; LFM2 recommends "
                 "temperature 0.3, min_p 0.15, repetition_penalty 1.05), none (greedy), or a JSON file; the "
                 "defaults applied are printed on stderr")
      ->capture_default_str();
  app.add_option("--temperature", sp.temperature, "Sampling temperature; 0 is greedy")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 100.0));
  app.add_option("--top-k", sp.top_k, "Keep the k most likely tokens (0: off)")
      ->capture_default_str()
      ->check(non_negative_number());
  app.add_option("--top-p", sp.top_p, "Nucleus sampling mass (1: off)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--min-p", sp.min_p, "Drop tokens below min-p times the top probability")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--repeat-penalty", sp.repetition_penalty, "Repetition penalty over prompt and output (1: off)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 100.0));
  app.add_option("--presence-penalty", sp.presence_penalty, "Presence penalty (-2 to 2)")
      ->capture_default_str()
      ->check(CLI::Range(-2.0, 2.0));
  app.add_option("--frequency-penalty", sp.frequency_penalty, "Frequency penalty (-2 to 2)")
      ->capture_default_str()
      ->check(CLI::Range(-2.0, 2.0));
  app.add_option("--seed", seed, "Random seed for sampling")->capture_default_str();
}

void finish_sampling_options(SamplingParams& sp, uint64_t seed) { sp.seed = seed; }

void apply_generation_config(const CLI::App& app, const std::string& spec, const std::string& model_path,
                             SamplingParams& sp) {
  for (const char* flag : {"--temperature", "--top-k", "--top-p", "--min-p", "--repeat-penalty", "--presence-penalty",
                           "--frequency-penalty"})
    if (app.count(flag) > 0) return;  // the user chose how to sample
  const SamplingDefaults d = load_sampling_defaults(spec, model_path);
  if (d.empty()) return;
  d.apply(sp);
  std::fprintf(stderr, "sampling defaults from %s: %s (any sampling flag or --generation-config none overrides)\n",
               d.source.c_str(), d.describe().c_str());
}

Drafter DraftArgs::kind() const {
  if (drafter.empty()) return draft_model.empty() ? Drafter::kNone : Drafter::kModel;
  const Drafter d = parse_drafter(drafter);
  LFM_CHECK(d != Drafter::kModel || !draft_model.empty(), "--draft model needs --draft-model PATH");
  LFM_CHECK(draft_model.empty() || d == Drafter::kModel, "--draft-model is given, but --draft is '", drafter,
            "' (leave --draft out or say model)");
  return d;
}

void add_draft_options(CLI::App& app, DraftArgs& a) {
  app.add_option("--draft", a.drafter,
                 "Speculative decoding: 'ngram' drafts by prompt lookup (what followed the latest earlier occurrence "
                 "of the last tokens), 'model' with --draft-model; drafts are verified in one step, so greedy output "
                 "is unchanged and sampled output keeps its distribution")
      ->check(CLI::IsMember({"none", "ngram", "model"}));
  app.add_option("--draft-model", a.draft_model,
                 "Draft model (folder, .gguf or Hub reference) with the model's tokenizer, e.g. LFM2-350M for "
                 "LFM2-1.2B, or a Q4_0 copy of the model");
  app.add_option("--draft-max", a.draft_max, "Most drafted tokens verified per step (adapts to what is accepted)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{64}));
}

void apply_draft_options(const DraftArgs& a, Runtime& rt, const LoadOptions& load, EngineOptions& eo) {
  const Drafter kind = a.kind();
  if (kind == Drafter::kNone) return;
  eo.state.draft_tokens = a.draft_max;
  if (kind != Drafter::kModel) return;
  LoadOptions opt = load;
  if (!rt.backend->host_memory()) opt.backend = rt.backend.get();
  opt.run_on = rt.backend.get();
  rt.draft = load_model(resolve_model_arg(a.draft_model), opt);
}

}  // namespace lfm::cli
