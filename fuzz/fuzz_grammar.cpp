// Structured output's front ends and matcher: the first byte picks the input's kind (GBNF text,
// a JSON schema, a regex), the rest is the text. A grammar that compiles is then run on a small
// vocabulary for a few tokens, checking that the mask and allows() agree and that accepting an
// allowed token never fails (a disagreement aborts: a finding).
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "fuzz_util.h"
#include "grammar/grammar.h"
#include "grammar/grammar_matcher.h"
#include "grammar/json_schema.h"
#include "grammar/regex_to_gbnf.h"

namespace {

using namespace lfm::grammar;

std::shared_ptr<const TokenVocabulary> vocab() {
  static const auto v = [] {
    std::vector<std::string> bytes = {"", ""};  // 0: end of sequence, 1: <|x|>
    for (int b = 1; b < 256; ++b) bytes.push_back(std::string(1, static_cast<char>(b)));
    for (const char* s : {"{\"", "\":", "\",", "\"}", "true", "null", "12", "ab", "é", "中", "\\n", "\\u00", "[]", " "})
      bytes.push_back(s);
    return std::make_shared<TokenVocabulary>(bytes, std::vector<std::pair<std::string, int32_t>>{{"<|x|>", 1}});
  }();
  return v;
}

void run(const std::shared_ptr<const Grammar>& g, uint8_t seed) {
  std::shared_ptr<TokenGrammar> tg;
  try {
    tg = std::make_shared<TokenGrammar>(g, vocab());
  } catch (const lfm::Error&) {
    return;  // names a token the vocabulary lacks
  }
  GrammarMatcher m(tg, {0});
  std::vector<uint64_t> mask(static_cast<size_t>(m.mask_words()));
  uint32_t pick = seed;
  for (int step = 0; step < 12 && !m.finished(); ++step) {
    m.fill_mask(mask.data());
    std::vector<int32_t> allowed;
    for (int32_t id = 0; id < vocab()->size(); ++id) {
      const bool bit = (mask[static_cast<size_t>(id) >> 6] >> (id & 63)) & 1;
      if (bit != m.allows(id)) std::abort();
      if (bit) allowed.push_back(id);
    }
    if (allowed.empty()) return;
    pick = pick * 1103515245u + 12345u;
    if (!m.accept(allowed[(pick >> 8) % allowed.size()])) std::abort();
    if (step % 4 == 3) m.rollback(1);
  }
  (void)m.forced_bytes(64);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1 || size > 4096) return 0;
  const std::string text(lfm::fuzz::as_text(data + 1, size - 1));
  try {
    std::shared_ptr<const Grammar> g;
    switch (data[0] % 3) {
      case 0: g = parse_gbnf(text); break;
      case 1: {
        const auto schema = nlohmann::ordered_json::parse(text, nullptr, false);
        if (schema.is_discarded()) return 0;
        JsonSchemaOptions opt;
        opt.any_whitespace = data[0] & 4;
        opt.strict = data[0] & 8;
        g = parse_gbnf(json_schema_to_gbnf(schema, opt));
        break;
      }
      default: g = parse_gbnf(regex_to_gbnf(text)); break;
    }
    run(g, data[0]);
  } catch (const lfm::Error&) {
  }
  return 0;
}
