// Structured output for the server's requests: the grammar (GBNF text) a request's fields ask
// for, and the compiled grammars, cached by that text so that a schema used again reuses its
// mask cache.
//   response_format {"type": "text" | "json_object" | "json_schema", "json_schema": {"name",
//   "schema", "strict"}}; the lfm extensions "grammar" (GBNF text, start rule root) and "regex"
//   (the whole output must match); at most one of them.
//   Chat tools: when a tool is marked "strict": true, or tool_choice is "required" or names a
//   function, tool calls follow LFM2's form <|tool_call_start|>[name(arg=value, ...)]
//   <|tool_call_end|> with each argument a JSON value valid under its parameter's schema, in the
//   parameters' order (required ones always, optional ones or not).
#pragma once

#include <cstddef>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "server/api_types.h"

namespace lfm {
class Engine;
class Tokenizer;
namespace grammar {
class TokenGrammar;
class WorkBudget;
}
}  // namespace lfm

namespace lfm::server {

// The grammar of response_format / grammar / regex, or "" when the body asks for none. Throws
// ApiError 400 naming the field (and, for a schema, the path inside it), also when the
// conversion's work passes `budget` (null: a default one); 503 when the budget's cancel callback
// stopped it.
std::string requested_grammar(const nlohmann::ordered_json& body, grammar::WorkBudget* budget = nullptr);

// The request field a grammar error is reported under: "grammar", "regex", or "response_format"
// (also for tools).
std::string grammar_param(const nlohmann::ordered_json& body);

// The whole grammar of a chat reply: `content` (requested_grammar's) combined with the tool-call
// grammar when the tools ask for one; "" when nothing is constrained. For a forced tool choice
// the grammar starts where the prompt's forced prefix (ChatTurn::forced) ends.
std::string chat_grammar(const ChatParams& c, const std::string& content, const Tokenizer& tok);

// Bounded in count and in bytes: each entry's footprint (its GBNF text, its grammar and the masks
// it has cached so far, which grow as it is used) is summed on every insertion, and the least
// recently used entries go until the total fits. A grammar larger than the whole limit is used
// but not kept.
class GrammarCache {
 public:
  explicit GrammarCache(size_t capacity = 64, size_t max_bytes = size_t{256} << 20)
      : capacity_(capacity), max_bytes_(max_bytes) {}
  // The compiled grammar for `gbnf` (empty: null). Throws ApiError 400 naming `param` when the
  // grammar does not parse or its compile passes `budget` (null: a default one), 503 when the
  // budget's cancel callback stopped it.
  std::shared_ptr<const grammar::TokenGrammar> get(const std::string& gbnf, const Engine& engine,
                                                   const std::string& param, grammar::WorkBudget* budget = nullptr);
  size_t bytes() const;  // the entries' footprint now
  size_t size() const;

 private:
  using Entry = std::pair<std::string, std::shared_ptr<const grammar::TokenGrammar>>;
  static size_t footprint(const Entry& e);  // the text (key and entry) and the compiled grammar
  size_t bytes_locked() const;
  size_t capacity_, max_bytes_;
  mutable std::mutex mu_;
  std::list<Entry> lru_;  // most recently used first
  std::unordered_map<std::string, std::list<Entry>::iterator> index_;
};

}  // namespace lfm::server
