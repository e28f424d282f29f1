// lfm logits: the logits of every position, through one prefill or prefill + decode steps.
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "cli/common.h"
#include "cli/image_args.h"
#include "core/error.h"
#include "model/forward.h"
#include "model/vision_model.h"
#include "tokenizer/load_tokenizer.h"
#include "tokenizer/tokenizer.h"

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
  app.add_flag("--json", json_out, "Print {\"ids\": [...], \"logits\": [[...], ...]} (ids: with images laid out)");
  std::vector<std::string> image_files;
  add_image_option(app, image_files);
  LFM_CLI_PARSE(app, argc, argv);

  model = resolve_model_arg(model);
  Runtime rt = open_runtime(model, threads, load, device);
  check_images_supported(image_files, *rt.model);
  std::unique_ptr<Tokenizer> tok;
  if (!image_files.empty()) tok = load_tokenizer(model);
  const ImagePrompt prompt = prompt_with_images(parse_id_list(ids_arg, "--ids"), image_files, model, *rt.model, tok.get());
  const std::vector<int32_t>& ids = prompt.ids;
  const int64_t n = static_cast<int64_t>(ids.size());
  if (prefill < 0) prefill = n;
  LFM_CHECK(prefill <= n, "--prefill ", prefill, " exceeds the number of ids (", n, ")");
  // Every tile's embeddings, to stand in for its image tokens.
  std::vector<VisionTile> tiles;
  std::vector<const ImageInput::Tile*> placed;
  for (const auto& img : prompt.images)
    for (const ImageInput::Tile& t : img->tiles) {
      tiles.push_back({t.grid_h, t.grid_w, t.patches});
      placed.push_back(&t);
    }
  const std::vector<std::vector<float>> embeds =
      tiles.empty() ? std::vector<std::vector<float>>() : rt.model->vision()->encode(*rt.backend, tiles);
  const int64_t d = rt.model->config().hidden_size;
  const int64_t vocab = rt.model->config().vocab_size;
  state.ctx_size = n;
  auto cache = make_state_cache(*rt.model, state_plan(state, rt.model->config(), rt.model.get()), *rt.backend);
  Forward fwd(*rt.model, *rt.backend, *cache);
  Sequence* seq = cache->open(n);
  std::vector<std::vector<float>> rows;
  StepOutput out;
  std::vector<BatchItem::Embeddings> rows_in;
  auto run = [&](int64_t begin, int64_t len) {
    BatchItem item{seq, std::span<const int32_t>(ids.data() + begin, len), true};
    rows_in.clear();
    for (size_t t = 0; t < placed.size(); ++t) {
      const int64_t lo = std::max(begin, placed[t]->position), hi = std::min(begin + len, placed[t]->position + placed[t]->tokens);
      if (lo < hi) rows_in.push_back({lo - begin, hi - lo, embeds[t].data() + (lo - placed[t]->position) * d});
    }
    item.embeddings = rows_in;
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
