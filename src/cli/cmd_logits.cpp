// lfm logits: the logits of every position, through one prefill or prefill + decode steps.
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "cli/common.h"
#include "cli/audio_args.h"
#include "cli/image_args.h"
#include "core/error.h"
#include "model/forward.h"
#include "model/audio_model.h"
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
  app.add_flag("--json", json_out, "Print {\"ids\": [...], \"logits\": [[...], ...]} (ids: with images and audio laid out)");
  std::vector<std::string> image_files;
  add_image_option(app, image_files);
  AudioArgs audio;
  add_audio_option(app, audio);
  LFM_CLI_PARSE(app, argc, argv);

  model = resolve_model_arg(model);
  Runtime rt = open_runtime(model, threads, load, device);
  check_images_supported(image_files, *rt.model);
  check_audio_supported(audio, *rt.model);
  std::unique_ptr<Tokenizer> tok;
  if (!image_files.empty()) tok = load_tokenizer(model);
  const ImagePrompt prompt = prompt_with_images(parse_id_list(ids_arg, "--ids"), image_files, model, *rt.model, tok.get());
  const AudioPrompt with_audio = prompt_with_audio(prompt.ids, audio, *rt.model, tok.get());
  const std::vector<int32_t>& ids = with_audio.ids;
  const int64_t n = static_cast<int64_t>(ids.size());
  if (prefill < 0) prefill = n;
  LFM_CHECK(prefill <= n, "--prefill ", prefill, " exceeds the number of ids (", n, ")");
  // Every tile's and clip's embeddings, to stand in for its image or audio tokens: (position,
  // tokens) of each, in the order of `embeds`. (expand_audio ran after expand_images, so the
  // tiles' positions moved by the audio tokens laid out before them.)
  std::vector<VisionTile> tiles;
  std::vector<std::pair<int64_t, int64_t>> placed;
  for (const auto& img : prompt.images)
    for (const ImageInput::Tile& t : img->tiles) {
      tiles.push_back({t.grid_h, t.grid_w, t.patches});
      int64_t shift = 0;
      for (const auto& clip : with_audio.audios)
        if (clip->position < t.position + shift) shift += clip->tokens - 1;
      placed.push_back({t.position + shift, t.tokens});
    }
  std::vector<std::vector<float>> embeds =
      tiles.empty() ? std::vector<std::vector<float>>() : rt.model->vision()->encode(*rt.backend, tiles);
  std::vector<AudioClip> clips;
  for (const auto& clip : with_audio.audios) {
    clips.push_back({clip->frames, clip->features});
    placed.push_back({clip->position, clip->tokens});
  }
  if (!clips.empty())
    for (auto& rows_of_clip : rt.model->audio()->encode(*rt.backend, clips)) embeds.push_back(std::move(rows_of_clip));
  std::vector<size_t> order(placed.size());  // by prompt position: the rows of a step go in order
  for (size_t t = 0; t < order.size(); ++t) order[t] = t;
  std::sort(order.begin(), order.end(), [&](size_t x, size_t y) { return placed[x].first < placed[y].first; });
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
    for (size_t t : order) {
      const auto [at, count] = placed[t];
      const int64_t lo = std::max(begin, at), hi = std::min(begin + len, at + count);
      if (lo < hi) rows_in.push_back({lo - begin, hi - lo, embeds[t].data() + (lo - at) * d});
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
