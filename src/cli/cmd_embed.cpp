// lfm embed / lfm rerank: a retriever's vectors and relevance scores (engine/embedder.h).
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <numeric>

#include "cli/command.h"
#include "cli/common.h"
#include "core/error.h"
#include "engine/embedder.h"
#include "formats/gguf_reader.h"
#include "tokenizer/load_tokenizer.h"
#include "tokenizer/tokenizer.h"

namespace lfm::cli {
namespace {

// The model's tokenizer, or null when it has none and `optional` (token ids only).
std::unique_ptr<Tokenizer> tokenizer_for(const std::string& model, bool optional) {
  namespace fs = std::filesystem;
  if (optional && fs::is_directory(model) && !fs::exists(fs::path(model) / "tokenizer.json")) return nullptr;
  // A GGUF converted from a folder without tokenizer.json names the tokenizer model "none".
  if (optional && fs::is_regular_file(model) && is_gguf_path(model)) {
    const gguf::GgufFile f(model);
    const gguf::Value* kind = f.find("tokenizer.ggml.model");
    if (!kind || (kind->type == gguf::ValueType::STRING && kind->str == "none")) return nullptr;
  }
  return load_tokenizer(model);
}

nlohmann::json vectors_json(const Embedding& e) {
  if (e.rows == 1 && e.scored.empty()) return std::vector<float>(e.values.begin(), e.values.end());
  nlohmann::json rows = nlohmann::json::array();
  for (int64_t r = 0; r < e.rows; ++r) rows.push_back(std::vector<float>(e.row(r), e.row(r) + e.dim));
  return rows;
}

void print_plain(const Embedding& e) {
  for (int64_t r = 0; r < e.rows; ++r) {
    for (int64_t c = 0; c < e.dim; ++c) std::printf(c ? " %.7g" : "%.7g", static_cast<double>(e.row(r)[c]));
    std::printf("\n");
  }
}

int run_embed(int argc, char** argv) {
  CLI::App app{"Embed texts with a retriever (LFM2.5-Embedding, the ColBERT models): one vector per text, or one per "
               "token (ColBERT, --pooling none)."};
  configure_app(app);
  std::string model, file, ids_arg, pooling_arg;
  std::vector<std::string> texts;
  bool query = false, document = false, json_out = false;
  int threads = 0;
  app.add_option("-m,--model", model, std::string("Model: Hugging Face folder or .gguf file") + kModelRefHelp)->required();
  app.add_option("texts", texts, "Texts to embed");
  app.add_option("-f,--file", file, "Embed each line of FILE (JSON Lines out)");
  app.add_option("--ids", ids_arg, "One text given as token ids, comma-separated, used as they are");
  auto* q = app.add_flag("--query", query, "Embed as queries (the model's query prompt / prefix)");
  app.add_flag("--document", document, "Embed as documents (the model's document prompt / prefix)")->excludes(q);
  app.add_option("--pooling", pooling_arg, "cls, mean, last or none (per-token vectors); default: the model's");
  app.add_flag("--json", json_out,
               "Print {\"embeddings\": [...], \"tokens\": [[ids], ...]} (and \"scored\": per-token 0/1 for ColBERT "
               "documents: the skiplist's vectors are not scored)");
  app.add_option("-t,--threads", threads, "Threads (0: all cores)")->capture_default_str()->check(non_negative_number());
  LoadOptions load;
  add_load_options(app, load);
  std::string device = "cpu";
  add_device_option(app, device);
  LFM_CLI_PARSE(app, argc, argv);

  const int sources = !texts.empty() + !file.empty() + !ids_arg.empty();
  LFM_CHECK(sources == 1, "embed: give texts, -f FILE or --ids (exactly one of them)");
  const std::optional<Pooling> pooling =
      pooling_arg.empty() ? std::nullopt : std::optional<Pooling>(parse_pooling(pooling_arg));
  const InputRole role = query ? InputRole::kQuery : document ? InputRole::kDocument : InputRole::kPlain;
  model = resolve_model_arg(model);
  Runtime rt = open_runtime(model, threads, load, device);
  const auto tok = tokenizer_for(model, !ids_arg.empty());
  Embedder embedder(*rt.model, tok.get(), *rt.backend);

  std::vector<PreparedText> prepared;
  if (!ids_arg.empty()) {
    prepared.push_back(embedder.prepare_ids(parse_id_list(ids_arg, "--ids"), role));
  } else if (!file.empty()) {
    std::ifstream in(file);
    LFM_CHECK(in, "embed: cannot read '", file, "'");
    for (std::string line; std::getline(in, line);) prepared.push_back(embedder.prepare(line, role));
  } else {
    for (const std::string& t : texts) prepared.push_back(embedder.prepare(t, role));
  }
  const std::vector<Embedding> out = embedder.embed(prepared, pooling);
  if (!file.empty()) {
    for (size_t i = 0; i < out.size(); ++i)
      std::cout << nlohmann::json{{"embedding", vectors_json(out[i])}, {"tokens", prepared[i].ids}}.dump() << "\n";
  } else if (json_out) {
    nlohmann::json j{{"embeddings", nlohmann::json::array()}, {"tokens", nlohmann::json::array()}};
    bool masked = false;
    for (size_t i = 0; i < out.size(); ++i) {
      j["embeddings"].push_back(vectors_json(out[i]));
      j["tokens"].push_back(prepared[i].ids);
      masked = masked || !out[i].scored.empty();
    }
    // ColBERT documents: which token vectors MaxSim reads (the skiplist's are not).
    if (masked) {
      j["scored"] = nlohmann::json::array();
      for (const Embedding& e : out)
        j["scored"].push_back(e.scored.empty() ? std::vector<uint8_t>(static_cast<size_t>(e.rows), 1) : e.scored);
    }
    std::cout << j.dump() << "\n";
  } else {
    for (size_t i = 0; i < out.size(); ++i) {
      if (i) std::printf("\n");
      print_plain(out[i]);
    }
  }
  return 0;
}

int run_rerank(int argc, char** argv) {
  CLI::App app{"Rank documents by their relevance to a query with a retriever (MaxSim for ColBERT, cosine for a "
               "dense embedding model)."};
  configure_app(app);
  std::string model, query;
  std::vector<std::string> docs;
  bool json_out = false;
  int threads = 0;
  app.add_option("-m,--model", model, std::string("Model: Hugging Face folder or .gguf file") + kModelRefHelp)->required();
  app.add_option("-q,--query", query, "The query")->required();
  app.add_option("documents", docs, "The documents")->required();
  app.add_flag("--json", json_out, "Print {\"results\": [{\"index\", \"relevance_score\"}, ...]}, best first");
  app.add_option("-t,--threads", threads, "Threads (0: all cores)")->capture_default_str()->check(non_negative_number());
  LoadOptions load;
  add_load_options(app, load);
  std::string device = "cpu";
  add_device_option(app, device);
  LFM_CLI_PARSE(app, argc, argv);

  model = resolve_model_arg(model);
  Runtime rt = open_runtime(model, threads, load, device);
  const auto tok = tokenizer_for(model, false);
  Embedder embedder(*rt.model, tok.get(), *rt.backend);
  std::vector<PreparedText> prepared{embedder.prepare(query, InputRole::kQuery)};
  for (const std::string& d : docs) prepared.push_back(embedder.prepare(d, InputRole::kDocument));
  const std::vector<Embedding> out = embedder.embed(prepared);
  std::vector<double> scores;
  for (size_t i = 1; i < out.size(); ++i) scores.push_back(Embedder::score(out[0], out[i]));
  std::vector<size_t> order(scores.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return scores[a] > scores[b]; });
  if (json_out) {
    nlohmann::json results = nlohmann::json::array();
    for (size_t i : order) results.push_back({{"index", i}, {"relevance_score", scores[i]}});
    std::cout << nlohmann::json{{"results", results}}.dump() << "\n";
  } else {
    for (size_t rank = 0; rank < order.size(); ++rank)
      std::printf("%zu\t%.6f\t%zu\t%s\n", rank + 1, scores[order[rank]], order[rank], docs[order[rank]].c_str());
  }
  return 0;
}

CommandRegistrar embed_reg({"embed", "embed texts with a retriever (vectors per text or per token)", run_embed});
CommandRegistrar rerank_reg({"rerank", "rank documents against a query with a retriever", run_rerank});

}  // namespace
}  // namespace lfm::cli
