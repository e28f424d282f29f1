// lfm bench-embed: embedding throughput of a retriever (or any model's hidden states) on
// documents of random token ids, or on a file's lines tokenized as they are (no prompt, BOS as
// the tokenizer adds it: what llama.cpp's llama-embedding reads), as a search index sees it:
// many documents per call, batched by the embedder into encoder passes.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>

#include "cli/command.h"
#include "cli/common.h"
#include "core/error.h"
#include "engine/embedder.h"
#include "tokenizer/load_tokenizer.h"
#include "tokenizer/tokenizer.h"

namespace lfm::cli {
namespace {

int run_bench_embed(int argc, char** argv) {
  CLI::App app{
      "Measure embedding throughput: documents of random token ids (lengths uniform in [--min-tokens, "
      "--max-tokens]) embedded as one call per round; prints documents/s, tokens/s and, for ColBERT, token "
      "vectors/s."};
  configure_app(app);
  std::string model, output = "text", file;
  int64_t docs = 256, min_tokens = 128, max_tokens = 512, batch_tokens = 8192;
  int repeats = 3, threads = 0;
  uint64_t seed = 1;
  app.add_option("-m,--model", model, std::string("Model: Hugging Face folder or .gguf file") + kModelRefHelp)
      ->required();
  app.add_option("--docs", docs, "Documents per round")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  app.add_option("--min-tokens", min_tokens, "Shortest document (tokens, BOS included)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--max-tokens", max_tokens, "Longest document")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--batch-tokens", batch_tokens, "Tokens per encoder pass")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("-r,--repeats", repeats, "Timed rounds (after a warm-up pass over the first documents)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("-f,--file", file,
                 "Documents from this file, one per line (empty lines skipped), tokenized without a prompt and cut "
                 "to the model's limit, instead of random ids (--docs, --min-tokens, --max-tokens, --seed unused)")
      ->check(CLI::ExistingFile);
  app.add_option("--seed", seed, "Seed of the random documents")->capture_default_str();
  app.add_option("-o,--output", output, "text or json")->capture_default_str()->check(CLI::IsMember({"text", "json"}));
  app.add_option("-t,--threads", threads, "Threads (0: all cores)")
      ->capture_default_str()
      ->check(non_negative_number());
  LoadOptions load;
  add_load_options(app, load);
  std::string device = "cpu";
  add_device_option(app, device);
  LFM_CLI_PARSE(app, argc, argv);
  LFM_CHECK(min_tokens <= max_tokens, "bench-embed: --min-tokens ", min_tokens, " exceeds --max-tokens ", max_tokens);

  model = resolve_model_arg(model);
  Runtime rt = open_runtime(model, threads, load, device);
  EmbedderOptions opt;
  opt.batch_tokens = batch_tokens;
  Embedder embedder(*rt.model, nullptr, *rt.backend, opt);
  const int32_t vocab = static_cast<int32_t>(rt.model->config().vocab_size);
  std::mt19937_64 rng(seed);
  std::vector<PreparedText> texts;
  int64_t tokens = 0;
  if (!file.empty()) {
    const auto tok = load_tokenizer(model);
    std::ifstream in(file, std::ios::binary);
    LFM_CHECK(in, "bench-embed: cannot read --file ", file);
    min_tokens = std::numeric_limits<int64_t>::max();
    max_tokens = 0;
    std::vector<int32_t> ids;
    for (std::string line; std::getline(in, line);) {
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (line.empty()) continue;
      ids = tok->encode(line, /*add_special=*/true);
      if (static_cast<int64_t>(ids.size()) > embedder.max_tokens())
        ids.resize(static_cast<size_t>(embedder.max_tokens()));
      const auto n = static_cast<int64_t>(ids.size());
      min_tokens = std::min(min_tokens, n);
      max_tokens = std::max(max_tokens, n);
      tokens += n;
      texts.push_back(embedder.prepare_ids(std::move(ids), InputRole::kDocument));
    }
    LFM_CHECK(!texts.empty(), "bench-embed: --file ", file, " has no documents");
    docs = static_cast<int64_t>(texts.size());
  } else {
    LFM_CHECK(max_tokens <= embedder.max_tokens(), "bench-embed: --max-tokens ", max_tokens,
              " is past the model's limit of ", embedder.max_tokens());
  }
  for (int64_t i = 0; file.empty() && i < docs; ++i) {
    const int64_t n = std::uniform_int_distribution<int64_t>(min_tokens, max_tokens)(rng);
    std::vector<int32_t> ids(static_cast<size_t>(n));
    ids[0] = rt.model->config().bos_token_id;
    for (int64_t t = 1; t < n; ++t)
      ids[static_cast<size_t>(t)] = std::uniform_int_distribution<int32_t>(3, vocab - 1)(rng);
    tokens += n;
    texts.push_back(embedder.prepare_ids(std::move(ids), InputRole::kDocument));
  }
  {
    // Warm-up on the first pass's worth of documents: scratch sized, weight pages touched.
    size_t n = 1;
    for (auto sum = static_cast<int64_t>(texts[0].ids.size());
         n < texts.size() && sum + static_cast<int64_t>(texts[n].ids.size()) <= batch_tokens; ++n)
      sum += static_cast<int64_t>(texts[n].ids.size());
    embedder.embed(std::span<const PreparedText>(texts.data(), n));
  }
  std::vector<double> seconds;
  for (int r = 0; r < repeats; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    const auto out = embedder.embed(texts);
    seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    LFM_CHECK(static_cast<int64_t>(out.size()) == docs, "bench-embed: ", out.size(), " results for ", docs,
              " documents");
  }
  std::sort(seconds.begin(), seconds.end());
  const double best = seconds.front(), median = seconds[seconds.size() / 2];
  const bool per_token = embedder.config().pooling == Pooling::kNone;
  if (output == "json") {
    nlohmann::json j = {{"model", model},
                        {"backend", rt.backend->name()},
                        {"docs", docs},
                        {"tokens", tokens},
                        {"batch_tokens", batch_tokens},
                        {"seconds_best", best},
                        {"seconds_median", median},
                        {"docs_per_s", static_cast<double>(docs) / median},
                        {"tokens_per_s", static_cast<double>(tokens) / median}};
    if (per_token) j["vectors_per_s"] = static_cast<double>(tokens) / median;
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("%s on %s: %lld documents, %lld tokens (%lld-%lld each), %lld tokens per pass\n", model.c_str(),
                rt.backend->name(), static_cast<long long>(docs), static_cast<long long>(tokens),
                static_cast<long long>(min_tokens), static_cast<long long>(max_tokens),
                static_cast<long long>(batch_tokens));
    std::printf("median %.3f s (best %.3f s over %d rounds): %.2f documents/s, %.1f tokens/s%s\n", median, best,
                repeats, static_cast<double>(docs) / median, static_cast<double>(tokens) / median,
                per_token ? " (one vector per token)" : "");
  }
  return 0;
}

CommandRegistrar reg({"bench-embed", "measure embedding throughput on random documents", run_bench_embed});

}  // namespace
}  // namespace lfm::cli
