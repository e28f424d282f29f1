// Helpers shared by the subcommands: option groups, id lists, model + backend setup.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "engine/engine.h"
#include "engine/sampler.h"
#include "hub/file_select.h"
#include "kernels/backend.h"
#include "model/model.h"
#include "model/state_plan.h"

namespace lfm::cli {

// "1,2, 3" → {1, 2, 3}; throws lfm::Error naming the bad entry.
std::vector<int32_t> parse_id_list(const std::string& s, const char* what);

// What -m accepts, for option help texts.
inline constexpr const char* kModelRefHelp =
    "; or a Hugging Face Hub reference owner/name, owner/name:QUANT or owner/name/FILE.gguf, optionally "
    "@revision (downloaded once into the Hugging Face cache)";

// The -m argument as a local path: an existing path is used as it is; a Hub reference is looked up
// in the cache or downloaded (what `need` says: the whole model, or only its config or tokenizer files).
std::string resolve_model_arg(const std::string& model, hub::Need need = hub::Need::kModel);

// A CLI::App that prints the full usage on a parse error (and exits non-zero).
void configure_app(CLI::App& app);

// Option checks that say their bound in words. CLI11's NonNegativeNumber / PositiveNumber print
// the largest double in full ("not in range 0.000000 to 1797693…", 309 digits).
CLI::Validator non_negative_number();  // "--threads: '-1' must be 0 or more"
CLI::Validator positive_number();      // "--ctx-size: '0' must be greater than 0"

// A model plus the machinery to run it. The backend is made first: it prepares the weights.
struct Runtime {
  std::unique_ptr<ThreadPool> pool;
  std::unique_ptr<Backend> backend;
  std::unique_ptr<Model> model;
  std::unique_ptr<Model> draft;  // --draft-model, loaded on the same backend
};
// `device`: cpu, cuda or auto (--device); a bad name or a missing GPU is an lfm::Error saying why.
Runtime open_runtime(const std::string& model_path, int threads, const LoadOptions& load = {},
                     const std::string& device = "cpu");
// --device cpu|cuda|auto (default cpu), for every command that runs a model.
void add_device_option(CLI::App& app, std::string& device);
// --bf16-activations (LoadOptions::bf16_activations).
void add_load_options(CLI::App& app, LoadOptions& load);

// Options that size the state (and, with `engine`, the scheduler): --ctx-size, --kv-type,
// --kv-block-size, and with `engine` also --parallel, --kv-memory, --batch-tokens,
// --itl-target-ms, --prefill-chunk and --no-prefix-cache.
struct StateArgs {
  int64_t ctx_size = 4096;
  std::string kv_type = "auto";
  int64_t block_tokens = 16;
  int64_t parallel = 1;
  std::string kv_memory;
  int64_t batch_tokens = 512;
  double itl_target_ms = EngineOptions{}.itl_target_ms;
  double encode_slice_ms = EngineOptions{}.encode_slice_ms;
  int64_t prefill_chunk = -1;  // unset: --itl-target-ms decides
  bool no_prefix_cache = false;
};
void add_state_options(CLI::App& app, StateArgs& args, bool engine);
// --itl-target-ms and --prefill-chunk (the scheduler's prompt tokens per step next to decode
// tokens); part of add_state_options with `engine`.
void add_schedule_options(CLI::App& app, StateArgs& args);
// The plan for a model (its default cache type unless --kv-type names one); cfg-only when model is null.
StatePlanOptions state_plan(const StateArgs& args, const ModelConfig& cfg, const Model* model);
EngineOptions engine_options(const StateArgs& args, const Model& model);

// Speculative decoding: --draft ngram|model|none, --draft-model PATH (implies --draft model),
// --draft-max K.
struct DraftArgs {
  std::string drafter;
  std::string draft_model;
  int64_t draft_max = 8;
  Drafter kind() const;  // what the flags ask for (an lfm::Error when they contradict)
};
void add_draft_options(CLI::App& app, DraftArgs& args);
// Loads --draft-model into rt.draft (resolving a Hub reference as -m does) and gives the engine
// room for --draft-max drafted tokens when any drafter is asked for.
void apply_draft_options(const DraftArgs& args, Runtime& rt, const LoadOptions& load, EngineOptions& eo);

// --temperature, --top-k, --top-p, --min-p, --repeat-penalty, --presence-penalty,
// --frequency-penalty, --seed, and --generation-config auto|none|FILE into `generation_config`.
void add_sampling_options(CLI::App& app, SamplingParams& sp, uint64_t& seed, std::string& generation_config);
// Applies --seed (0 keeps the default of seed 0, so runs repeat unless a seed is asked for).
void finish_sampling_options(SamplingParams& sp, uint64_t seed);
// When no sampling flag was given, the model's generation_config.json defaults (per
// --generation-config) replace greedy decoding; says on stderr which were applied.
void apply_generation_config(const CLI::App& app, const std::string& spec, const std::string& model_path,
                             SamplingParams& sp);

}  // namespace lfm::cli

// Parses argv with CLI11; on --help returns 0, on a usage error prints usage and returns 2.
#define LFM_CLI_PARSE(app, argc, argv)          \
  try {                                         \
    (app).parse((argc), (argv));                \
  } catch (const CLI::ParseError& e) {          \
    const int rc = (app).exit(e);               \
    return rc == 0 ? 0 : 2;                     \
  }
