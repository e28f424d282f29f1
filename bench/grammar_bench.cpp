// Structured output: the per-token mask cost (median and p99 over a generation, in µs), the
// grammar compile time and the first (cold) pass through the mask cache, on a 65,536-token
// vocabulary (and 131,072). The vocabulary is the test tokenizer's tokens plus generated pieces shaped like a
// real byte-level BPE vocabulary's (words with and without a leading space, JSON punctuation
// glued to words, numbers, whitespace runs, non-ASCII words), so that the JSON states see the
// mix of accepted, rejected and uncertain tokens a real one gives.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "grammar/grammar.h"
#include "grammar/grammar_matcher.h"
#include "grammar/json_schema.h"
#include "tokenizer/load_tokenizer.h"
#include "tokenizer/tokenizer.h"

namespace {

using namespace lfm::grammar;

std::string repo_root() { return std::filesystem::path(__FILE__).parent_path().parent_path().string(); }

constexpr int32_t kEos = 7;

// 65,536 tokens (LFM2) or 131,072 (the size of LFM2.5's larger vocabularies).
std::shared_ptr<const TokenVocabulary> vocabulary(int32_t kVocab = 65536) {
  static std::map<int32_t, std::shared_ptr<const TokenVocabulary>> made;
  if (auto it = made.find(kVocab); it != made.end()) return it->second;
  auto v = [&] {
    auto tok = lfm::load_tokenizer(repo_root() + "/tests/data/tokenizer");
    std::vector<std::string> bytes;
    std::set<std::string> seen;
    std::vector<std::pair<std::string, int32_t>> special;
    for (const auto& a : tok->spec().added_tokens) special.push_back({a.content, a.id});
    std::vector<std::string> words;
    for (int32_t id = 0; id < static_cast<int32_t>(tok->spec().vocab.size()); ++id) {
      std::string s;
      if (!tok->spec().vocab[static_cast<size_t>(id)].empty() && !tok->is_special(id)) tok->append_token_bytes(id, s);
      bytes.push_back(s);
      if (!s.empty()) seen.insert(s);
      if (s.size() >= 2) words.push_back(s[0] == ' ' ? s.substr(1) : s);
    }
    for (const auto& a : tok->spec().added_tokens) bytes[static_cast<size_t>(a.id)].clear();
    auto add = [&](const std::string& s) {
      if (static_cast<int32_t>(bytes.size()) < kVocab && !s.empty() && seen.insert(s).second) bytes.push_back(s);
    };
    const char* glue[] = {"\"", "\",", "\":", "\": ", "\"}", "\"]", ".", ",", ")", "(", "{\"", "[\"", " \"", "\n", "_",
                          "-", "=", "'", ":", "\\n", "\\\""};
    std::mt19937 rng(1);
    for (int n = 0; n < 10000; ++n) add(std::to_string(n));
    for (int n = 1; n <= 16; ++n) add(std::string(static_cast<size_t>(n), ' ')), add("\n" + std::string(static_cast<size_t>(n), ' '));
    for (const char* w : {"é", "ü", "中", "文", "日本", "données", "über", "привет", "😀", "∑"}) add(w), add(std::string(" ") + w);
    while (static_cast<int32_t>(bytes.size()) < kVocab) {
      const std::string& w = words[rng() % words.size()];
      switch (rng() % 4) {
        case 0: add(" " + w); break;
        case 1: add(w + glue[rng() % std::size(glue)]); break;
        case 2: add(glue[rng() % std::size(glue)] + w); break;
        default: add(w + words[rng() % words.size()]); break;
      }
    }
    return std::make_shared<const TokenVocabulary>(std::move(bytes), std::move(special));
  }();
  made[kVocab] = v;
  return v;
}

const char* kSchema = R"({
  "type": "object",
  "properties": {
    "id": {"type": "string", "format": "uuid"},
    "name": {"type": "string", "minLength": 1, "maxLength": 40},
    "age": {"type": "integer", "minimum": 0, "maximum": 150},
    "email": {"type": "string", "format": "email"},
    "score": {"type": "number"},
    "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 8},
    "address": {"type": "object", "properties": {
      "street": {"type": "string"}, "city": {"type": "string"}, "zip": {"type": "string", "pattern": "^[0-9]{5}$"}},
      "required": ["street", "city"]},
    "role": {"enum": ["admin", "user", "guest"]},
    "active": {"type": "boolean"},
    "notes": {"anyOf": [{"type": "string"}, {"type": "null"}]}
  },
  "required": ["id", "name", "age", "tags", "role", "active"]
})";

const char* kJsonGbnf = R"(
root   ::= object
value  ::= object | array | string | number | "true" | "false" | "null"
object ::= "{" ws ( string ws ":" ws value ( ws "," ws string ws ":" ws value )* )? ws "}"
array  ::= "[" ws ( value ( ws "," ws value )* )? ws "]"
string ::= "\"" ( [^"\\\x00-\x1F] | "\\" ( ["\\/bfnrt] | "u" [0-9a-fA-F]{4} ) )* "\""
number ::= "-"? ( "0" | [1-9] [0-9]* ) ( "." [0-9]+ )? ( [eE] [-+]? [0-9]+ )?
ws     ::= [ \t\n]{0,4}
)";

std::string grammar_text(int which) {
  return which == 0 ? json_schema_to_gbnf(nlohmann::ordered_json::parse(kSchema)) : std::string(kJsonGbnf);
}

// Generations by a random walk over allowed tokens (the end-of-sequence id taken once allowed,
// at most 256 tokens each); every fill_mask timed. Counters: p50_us / p99_us / mean_us per
// token, cold_ms (the first generation's whole mask time, cache empty), compile_ms.
void BM_GrammarMask(benchmark::State& state) {
  const int which = static_cast<int>(state.range(0));
  auto vocab = vocabulary(static_cast<int32_t>(state.range(1)));
  const auto t0 = std::chrono::steady_clock::now();
  auto tg = std::make_shared<TokenGrammar>(parse_gbnf(grammar_text(which)), vocab);
  const double compile_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::vector<double> us;
  double cold_ms = -1;
  std::mt19937 rng(3);
  std::vector<uint64_t> mask(static_cast<size_t>(tg->mask_words()));
  std::vector<int32_t> allowed;
  for (auto _ : state) {
    GrammarMatcher m(tg, {kEos});
    double gen_ms = 0;
    for (int step = 0; step < 256 && !m.finished(); ++step) {
      const auto a = std::chrono::steady_clock::now();
      m.fill_mask(mask.data());
      const double t = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - a).count();
      gen_ms += t / 1000;
      if (cold_ms >= 0) us.push_back(t);
      allowed.clear();
      for (int32_t w = 0; w < static_cast<int32_t>(mask.size()); ++w)
        for (uint64_t bits = mask[static_cast<size_t>(w)]; bits; bits &= bits - 1)
          allowed.push_back(w * 64 + __builtin_ctzll(bits));
      if (allowed.empty()) break;
      // Prefer short tokens now and then so strings close and structures end.
      int32_t pick = allowed[rng() % allowed.size()];
      if (std::find(allowed.begin(), allowed.end(), kEos) != allowed.end() && step > 32) pick = kEos;
      if (rng() % 3 == 0) {
        std::string_view best;
        for (int k = 0; k < 8; ++k) {
          const int32_t c = allowed[rng() % allowed.size()];
          if (c == kEos) continue;
          if (best.empty() || vocab->bytes(c).size() < best.size()) {
            best = vocab->bytes(c);
            pick = c;
          }
        }
      }
      m.accept(pick);
    }
    if (cold_ms < 0) cold_ms = gen_ms;
  }
  std::sort(us.begin(), us.end());
  auto pct = [&](double p) { return us.empty() ? 0.0 : us[static_cast<size_t>(p * static_cast<double>(us.size() - 1))]; };
  double sum = 0;
  for (double x : us) sum += x;
  state.counters["p50_us"] = pct(0.5);
  state.counters["p99_us"] = pct(0.99);
  state.counters["mean_us"] = us.empty() ? 0 : sum / static_cast<double>(us.size());
  state.counters["tokens"] = static_cast<double>(us.size());
  state.counters["cold_ms"] = cold_ms;
  state.counters["compile_ms"] = compile_ms;
  state.SetLabel(which == 0 ? "JSON schema (10 properties)" : "GBNF JSON");
}
BENCHMARK(BM_GrammarMask)
    ->Args({0, 65536})
    ->Args({1, 65536})
    ->Args({0, 131072})
    ->Args({1, 131072})
    ->Unit(benchmark::kMillisecond)
    ->Iterations(40);

// Compile time of a 50-property schema (GBNF text, parse, and every mask computed).
void BM_SchemaCompile50(benchmark::State& state) {
  nlohmann::ordered_json schema = {{"type", "object"}};
  nlohmann::ordered_json props = nlohmann::ordered_json::object();
  std::vector<std::string> required;
  const char* types[] = {"string", "integer", "boolean", "number"};
  for (int i = 0; i < 50; ++i) {
    const std::string name = "field_" + std::to_string(i);
    props[name] = {{"type", types[i % 4]}};
    if (i % 2 == 0) required.push_back(name);
  }
  schema["properties"] = props;
  schema["required"] = required;
  auto vocab = vocabulary();
  double to_grammar_ms = 0, masks_ms = 0;
  for (auto _ : state) {
    const auto a = std::chrono::steady_clock::now();
    auto g = parse_gbnf(json_schema_to_gbnf(schema));
    const auto b = std::chrono::steady_clock::now();
    TokenGrammar tg(g, vocab);
    tg.precompute_all();
    const auto c = std::chrono::steady_clock::now();
    to_grammar_ms = std::chrono::duration<double, std::milli>(b - a).count();
    masks_ms = std::chrono::duration<double, std::milli>(c - b).count();
    state.counters["positions"] = static_cast<double>(tg.cached_positions());
    state.counters["cache_MiB"] = static_cast<double>(tg.cached_bytes()) / (1 << 20);
  }
  state.counters["grammar_ms"] = to_grammar_ms;
  state.counters["all_masks_ms"] = masks_ms;
}
BENCHMARK(BM_SchemaCompile50)->Unit(benchmark::kMillisecond)->Iterations(2);

}  // namespace
