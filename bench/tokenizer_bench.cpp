// Tokenizer throughput: encode MB/s on English prose (the synthetic LFM2-style tokenizer in
// tests/data/tokenizer; the real vocabulary is ~25x larger, which mostly affects hash lookups).
#include <benchmark/benchmark.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "tokenizer/load_tokenizer.h"
#include "tokenizer/streaming_detokenizer.h"

namespace {

// bench/CMakeLists.txt defines no source-dir macro; CMake passes absolute paths, so derive the
// repository root from this file's own path.
std::string repo_root() { return std::filesystem::path(__FILE__).parent_path().parent_path().string(); }

std::string source_file(const std::string& rel) {
  std::ifstream in(repo_root() + "/" + rel, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

const lfm::Tokenizer& tokenizer() {
  static const auto t = lfm::load_tokenizer(repo_root() + "/tests/data/tokenizer");
  return *t;
}

// ~1 MB of English: the English paragraphs of the training corpus, varied per repetition so
// the BPE cache sees realistic (not perfectly repeated) text.
const std::string& english_text() {
  static const std::string text = [] {
    const std::string corpus = source_file("tools/tokenizer/corpus.txt");
    const std::string english = corpus.substr(0, corpus.find("THE QUICK BROWN FOX"));
    std::string out;
    for (int i = 0; out.size() < (1 << 20); ++i) out += english + " Section " + std::to_string(i * 7919) + ".\n";
    return out;
  }();
  return text;
}

void BM_TokenizerEncodeEnglish(benchmark::State& state) {
  const std::string& text = english_text();
  size_t tokens = 0;
  for (auto _ : state) {
    const auto ids = tokenizer().encode(text);
    tokens = ids.size();
    benchmark::DoNotOptimize(ids.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(text.size()));
  state.counters["tokens"] = static_cast<double>(tokens);
}
BENCHMARK(BM_TokenizerEncodeEnglish)->Unit(benchmark::kMillisecond);

void BM_TokenizerStreamingDecode(benchmark::State& state) {
  const auto ids = tokenizer().encode(english_text());
  for (auto _ : state) {
    lfm::StreamingDetokenizer detok(tokenizer());
    size_t bytes = 0;
    for (int32_t id : ids) bytes += detok.push(id).size();
    bytes += detok.finish().size();
    benchmark::DoNotOptimize(bytes);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(english_text().size()));
}
BENCHMARK(BM_TokenizerStreamingDecode)->Unit(benchmark::kMillisecond);

}  // namespace
