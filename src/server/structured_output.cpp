#include "server/structured_output.h"

#include <algorithm>

#include "core/error.h"
#include "engine/engine.h"
#include "engine/tool_grammar.h"
#include "grammar/gbnf_compose.h"
#include "grammar/gbnf_writer.h"
#include "grammar/grammar.h"
#include "grammar/json_schema.h"
#include "grammar/regex_to_gbnf.h"
#include "grammar/token_grammar.h"
#include "grammar/work_budget.h"
#include "tokenizer/tokenizer.h"

namespace lfm::server {

// The request body as parse_json_body parsed it: ordered, so a schema's properties keep the
// client's order in the grammar (and so in the output).
using json = nlohmann::ordered_json;

namespace {

[[noreturn]] void bad(const std::string& param, const std::string& message) { throw ApiError(400, message, param); }

// A compile stopped by its budget's cancel callback: the client left, or the server drains.
[[noreturn]] void cancelled(const std::string& param) {
  throw ApiError(503, "the request was cancelled while its grammar was compiled (client gone, or the server is "
                      "shutting down)", param);
}

// A schema converter error ("json schema: /properties/x: ...") as a 400 naming the field.
template <typename F>
std::string converted(const std::string& param, grammar::WorkBudget* budget, F&& convert) {
  try {
    return convert();
  } catch (const Error& e) {
    if (budget && budget->cancelled()) cancelled(param);
    bad(param, std::string(param) + ": " + e.what());
  }
}

}  // namespace

std::string requested_grammar(const json& body, grammar::WorkBudget* budget) {
  std::string gbnf, from;
  auto take = [&](const std::string& field, std::string g) {
    if (!from.empty()) bad(field, "cannot be combined with '" + from + "'");
    from = field;
    gbnf = std::move(g);
  };
  if (body.contains("response_format") && !body["response_format"].is_null()) {
    const json& rf = body["response_format"];
    if (!rf.is_object() || !rf.contains("type") || !rf["type"].is_string())
      bad("response_format", "response_format must be an object with a 'type'");
    const std::string type = rf["type"].get<std::string>();
    if (type == "json_object") {
      take("response_format", grammar::any_json_gbnf(false));
    } else if (type == "json_schema") {
      if (!rf.contains("json_schema") || !rf["json_schema"].is_object())
        bad("response_format.json_schema", "response_format.json_schema must be an object");
      const json& js = rf["json_schema"];
      if (!js.contains("schema")) bad("response_format.json_schema.schema", "response_format.json_schema.schema is required");
      grammar::JsonSchemaOptions opt;
      opt.strict = js.contains("strict") && js["strict"].is_boolean() && js["strict"].get<bool>();
      const json& schema = js["schema"];
      take("response_format",
           converted("response_format.json_schema.schema", budget,
                     [&] { return grammar::json_schema_to_gbnf(schema, opt, budget); }));
    } else if (type != "text") {
      bad("response_format.type", "response_format.type must be 'text', 'json_object' or 'json_schema', got '" + type + "'");
    }
  }
  if (body.contains("grammar") && !body["grammar"].is_null()) {
    if (!body["grammar"].is_string()) bad("grammar", "grammar must be a string of GBNF text");
    take("grammar", body["grammar"].get<std::string>());
  }
  if (body.contains("regex") && !body["regex"].is_null()) {
    if (!body["regex"].is_string()) bad("regex", "regex must be a string");
    take("regex", converted("regex", budget, [&] { return grammar::regex_to_gbnf(body["regex"].get<std::string>(), budget); }));
  }
  return gbnf;
}

std::string grammar_param(const json& body) {
  if (body.contains("grammar") && !body["grammar"].is_null()) return "grammar";
  if (body.contains("regex") && !body["regex"].is_null()) return "regex";
  return body.contains("response_format") ? "response_format" : "tools";
}

std::string chat_grammar(const ChatParams& c, const std::string& content, const Tokenizer& tok) {
  try {
    return tool_call_grammar(c.tools, c.tool_choice, c.named_tool, content, tok);
  } catch (const FieldError& e) {
    bad(e.field(), e.what());
  }
}

std::shared_ptr<const grammar::TokenGrammar> GrammarCache::get(const std::string& gbnf, const Engine& engine,
                                                               const std::string& param, grammar::WorkBudget* budget) {
  if (gbnf.empty()) return nullptr;
  {
    std::lock_guard lock(mu_);
    auto it = index_.find(gbnf);
    if (it != index_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second);
      return it->second->second;
    }
  }
  std::shared_ptr<const grammar::TokenGrammar> tg;
  try {
    tg = engine.compile_grammar(grammar::parse_gbnf(gbnf, "root", budget));
  } catch (const Error& e) {
    if (budget && budget->cancelled()) cancelled(param);
    bad(param, param + ": " + e.what());
  }
  std::lock_guard lock(mu_);
  if (index_.count(gbnf)) return tg;  // compiled by another request meanwhile; either will do
  lru_.emplace_front(gbnf, tg);
  index_[gbnf] = lru_.begin();
  // Entries' masks grow while they are used: the total is measured now, not when they came in.
  for (size_t total = bytes_locked(); !lru_.empty() && (lru_.size() > capacity_ || total > max_bytes_);) {
    total -= std::min(total, footprint(lru_.back()));
    index_.erase(lru_.back().first);
    lru_.pop_back();
  }
  return tg;
}

size_t GrammarCache::footprint(const Entry& e) { return 2 * e.first.size() + 64 + e.second->footprint(); }

size_t GrammarCache::bytes_locked() const {
  size_t n = 0;
  for (const auto& e : lru_) n += footprint(e);
  return n;
}

size_t GrammarCache::bytes() const {
  std::lock_guard lock(mu_);
  return bytes_locked();
}

size_t GrammarCache::size() const {
  std::lock_guard lock(mu_);
  return lru_.size();
}

}  // namespace lfm::server
