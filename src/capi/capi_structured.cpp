// The C API's structured output: the sampling params' json_schema / json_object / grammar / regex
// turned into GBNF by the converters lfm serve's response_format uses (grammar/json_schema.h,
// grammar/regex_to_gbnf.h), compiled for the engine (Engine::compile_grammar) and kept by their
// text, so a schema used again keeps its mask cache.
#include <algorithm>

#include "capi/capi_internal.h"
#include "engine/tool_grammar.h"
#include "grammar/grammar.h"
#include "grammar/json_schema.h"
#include "grammar/regex_to_gbnf.h"
#include "grammar/token_grammar.h"
#include "grammar/work_budget.h"

using lfm::capi::fail;
using lfm::capi::require;

namespace lfm::capi {

namespace {

constexpr size_t kGrammarCacheSize = 32;
// The compiled grammars kept hold at most this (their text, grammar and masks; as lfm serve's
// --grammar-cache-memory default).
constexpr size_t kGrammarCacheBytes = size_t{256} << 20;

// The converter's result, or LFM_ERR_INVALID_ARGUMENT naming the field and the problem.
template <class F>
std::string converted(const char* field, F&& convert) {
  try {
    return convert();
  } catch (const Error& e) {
    fail(LFM_ERR_INVALID_ARGUMENT, std::string("lfm_sampling_params.") + field + ": " + e.what());
  }
}

}  // namespace

namespace {

// The GBNF of the params' json_schema / json_object / grammar / regex ("" for none); `field`: which.
std::string content_gbnf(const lfm_sampling_params& sp, const char*& field, grammar::WorkBudget& budget) {
  const int given = (sp.json_schema != nullptr) + (sp.json_object != 0) + (sp.grammar != nullptr) + (sp.regex != nullptr);
  field = "tools";
  if (given == 0) return "";
  require(given == 1, "lfm_sampling_params: at most one of json_schema, json_object, grammar and regex may be set");
  field = sp.json_schema ? "json_schema" : sp.json_object ? "json_object" : sp.grammar ? "grammar" : "regex";
  std::string gbnf;
  grammar::JsonSchemaOptions opt;
  opt.strict = sp.schema_strict != 0;
  opt.any_whitespace = sp.schema_whitespace != 0;
  if (sp.json_schema) {
    // Ordered: properties keep the schema's order.
    const nlohmann::ordered_json schema = parse_json(sp.json_schema, "lfm_sampling_params.json_schema", false);
    gbnf = converted(field, [&] { return grammar::json_schema_to_gbnf(schema, opt, &budget); });
  } else if (sp.json_object) {
    gbnf = grammar::any_json_gbnf(opt.any_whitespace);
  } else if (sp.grammar) {
    gbnf = sp.grammar;
  } else {
    gbnf = converted(field, [&] { return grammar::regex_to_gbnf(sp.regex, &budget); });
  }
  return gbnf;
}

}  // namespace

std::shared_ptr<const grammar::TokenGrammar> request_grammar(lfm_engine& e, const lfm_sampling_params& sp,
                                                             const ChatTurnInput* turn) {
  const char* field = nullptr;
  // One budget (grammar/work_budget.h's defaults) for the request's whole compile.
  grammar::WorkBudget budget;
  std::string gbnf = content_gbnf(sp, field, budget);
  const bool tools = turn && !turn->tools.is_null();
  if (gbnf.empty() && !tools) return nullptr;
  if (!e.model->tokenizer)
    fail(LFM_ERR_UNSUPPORTED, "structured output needs the model's tokenizer: " + e.model->tokenizer_error);
  if (tools) {
    try {
      gbnf = tool_call_grammar(turn->tools, turn->tool_choice, turn->named_tool, gbnf, *e.model->tokenizer);
    } catch (const FieldError& x) {
      fail(LFM_ERR_INVALID_ARGUMENT, std::string("tools_json: ") + x.what());
    }
    if (gbnf.empty()) return nullptr;
  }
  {
    std::lock_guard lock(e.grammar_mu);
    for (auto it = e.grammars.begin(); it != e.grammars.end(); ++it)
      if (it->first == gbnf) {
        e.grammars.splice(e.grammars.begin(), e.grammars, it);
        return it->second;
      }
  }
  std::shared_ptr<const grammar::TokenGrammar> tg;
  try {
    tg = e.engine->compile_grammar(grammar::parse_gbnf(gbnf, "root", &budget));
  } catch (const Error& x) {
    fail(LFM_ERR_INVALID_ARGUMENT, std::string("lfm_sampling_params.") + field + ": " + x.what());
  }
  std::lock_guard lock(e.grammar_mu);
  e.grammars.emplace_front(std::move(gbnf), tg);
  // Masks grow while grammars are used: the footprint is summed now, and the least recently used
  // entries go until count and bytes fit.
  size_t total = 0;
  for (const auto& [text, g] : e.grammars) total += 2 * text.size() + g->footprint();
  while (!e.grammars.empty() && (e.grammars.size() > kGrammarCacheSize || total > kGrammarCacheBytes)) {
    total -= std::min(total, 2 * e.grammars.back().first.size() + e.grammars.back().second->footprint());
    e.grammars.pop_back();
  }
  return tg;
}

}  // namespace lfm::capi
