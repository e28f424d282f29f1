// Tool calls constrained by a grammar, for lfm serve's chat and the C API: when a tool is marked
// "strict": true, or tool_choice is "required" or names a function, tool calls follow LFM2's form
// <|tool_call_start|>[name(arg=value, ...)]<|tool_call_end|> with each argument a JSON value valid
// under its parameter's JSON Schema, in the parameters' order (required ones always, optional
// ones or not).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace lfm {

class Tokenizer;

// A problem in one field of a request; field() names it (e.g. "tools[0].function.parameters").
class FieldError : public Error {
 public:
  FieldError(std::string field, const std::string& message) : Error(message), field_(std::move(field)) {}
  const std::string& field() const { return field_; }

 private:
  std::string field_;
};

// The whole grammar (GBNF) of a chat reply: `content` (the grammar of the reply's text, "" for
// none) combined with the tool-call grammar when the tools ask for one; "" when nothing is
// constrained. `tools`: the OpenAI tools array (null: none); `tool_choice`: auto | none |
// required | a function's name (with named_tool). For a named tool the grammar starts where the
// prompt's forced prefix (ChatTurn::forced: "<|tool_call_start|>[name(") ends. Throws FieldError.
std::string tool_call_grammar(const nlohmann::ordered_json& tools, const std::string& tool_choice, bool named_tool,
                              const std::string& content, const Tokenizer& tok);

}  // namespace lfm
