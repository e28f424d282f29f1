// lfm logits: the logits of every position, through one prefill or prefill + decode steps.
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "cli/common.h"
#include "core/error.h"
#include "model/forward.h"

namespace lfm::cli {
namespace {

int run_logits(int argc, char** argv) {
  CLI::App app{"Print the logits of every position of a token sequence."};
  configure_app(app);
  std::string model, ids_arg;
  int64_t prefill = -1;
  int threads = 0;
  bool json_out = false;
  StateArgs state;
  app.add_option("-m,--model", model, std::string("Model: Hugging Face folder or .gguf file") + kModelRefHelp)->required();
  app.add_option("--ids", ids_arg, "Token ids, comma-separated")->required();
  app.add_option("--prefill", prefill,
                 "Run the first N ids as one prefill, then the rest one token at a time through the cache")
      ->check(positive_number());
  app.add_option("-t,--threads", threads, "Threads (0: all cores)")
      ->capture_default_str()
      ->check(non_negative_number());
  app.add_option("--kv-type", state.kv_type, "Storage of K/V and conv states: f32, f16, bf16 or auto")
      ->capture_default_str();
  app.add_option("--kv-block-size", state.block_tokens, "Tokens per KV cache block")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{65536}));
  LoadOptions load;
  add_load_options(app, load);
  std::string device = "cpu";
  add_device_option(app, device);
  app.add_flag("--json", json_out, "Print {\"logits\": [[...], ...]}");
  LFM_CLI_PARSE(app, argc, argv);

  const std::vector<int32_t> ids = parse_id_list(ids_arg, "--ids");
  const int64_t n = static_cast<int64_t>(ids.size());
  if (prefill < 0) prefill = n;
  LFM_CHECK(prefill <= n, "--prefill ", prefill, " exceeds the number of ids (", n, ")");
  Runtime rt = open_runtime(resolve_model_arg(model), threads, load, device);
  const int64_t vocab = rt.model->config().vocab_size;
  state.ctx_size = n;
  auto cache = make_state_cache(*rt.model, state_plan(state, rt.model->config(), rt.model.get()), *rt.backend);
  Forward fwd(*rt.model, *rt.backend, *cache);
  Sequence* seq = cache->open(n);
  std::vector<std::vector<float>> rows;
  StepOutput out;
  auto run = [&](int64_t begin, int64_t len) {
    BatchItem item{seq, std::span<const int32_t>(ids.data() + begin, len), true};
    fwd.step(std::span<const BatchItem>(&item, 1), out);
    for (int64_t r = 0; r < len; ++r) rows.emplace_back(out.row(0, r), out.row(0, r) + vocab);
  };
  run(0, prefill);
  for (int64_t i = prefill; i < n; ++i) run(i, 1);

  if (json_out) {
    nlohmann::json j;
    j["ids"] = ids;
    j["prefill"] = prefill;
    j["logits"] = rows;
    std::cout << j.dump() << "\n";
  } else {
    for (int64_t p = 0; p < n; ++p) {
      std::cout << p << ' ' << ids[p];
      char buf[32];
      for (float v : rows[p]) {
        std::snprintf(buf, sizeof buf, " %.7g", v);
        std::cout << buf;
      }
      std::cout << '\n';
    }
  }
  return 0;
}

CommandRegistrar reg({"logits", "print the logits of every position", run_logits});

}  // namespace
}  // namespace lfm::cli
