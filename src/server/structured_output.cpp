#include "server/structured_output.h"

#include <algorithm>

#include "chat/output_parser.h"
#include "core/error.h"
#include "engine/engine.h"
#include "grammar/gbnf_compose.h"
#include "grammar/gbnf_writer.h"
#include "grammar/grammar.h"
#include "grammar/json_schema.h"
#include "grammar/regex_to_gbnf.h"
#include "tokenizer/tokenizer.h"

namespace lfm::server {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

namespace {

[[noreturn]] void bad(const std::string& param, const std::string& message) { throw ApiError(400, message, param); }

// A schema converter error ("json schema: /properties/x: ...") as a 400 naming the field.
template <typename F>
std::string converted(const std::string& param, F&& convert) {
  try {
    return convert();
  } catch (const Error& e) {
    bad(param, std::string(param) + ": " + e.what());
  }
}

// The marker as a token element when the tokenizer has it as a token, else its text.
std::string marker(const Tokenizer& tok, std::string_view text) {
  return tok.token_to_id(text) ? std::string(text) : grammar::gbnf_literal(text);
}

// The JSON-schema document for one tool parameter: its schema with the parameters' $defs /
// definitions alongside, so that its $refs resolve.
ojson parameter_document(const ojson& params, const ojson& schema) {
  ojson doc = schema.is_object() ? schema : ojson::object();
  if (!schema.is_object() && schema.is_boolean()) return schema;
  for (const char* k : {"$defs", "definitions"})
    if (params.contains(k) && !doc.contains(k)) doc[k] = params[k];
  return doc;
}

// Rules for tool i's call: call-i ::= "name(" args ")", the arguments in the parameters' order.
// Returns the name of the rule for the arguments.
std::string tool_rules(const ojson& tool, size_t i, bool strict, std::string& out) {
  const ojson& f = tool["function"];
  const std::string name = f["name"].get<std::string>();
  const std::string param = "tools[" + std::to_string(i) + "].function.parameters";
  const std::string t = "tool" + std::to_string(i) + "-";
  const ojson params = f.contains("parameters") && f["parameters"].is_object() ? f["parameters"] : ojson::object();
  std::vector<std::string> names;
  std::vector<bool> required;
  if (params.contains("properties")) {
    if (!params["properties"].is_object()) bad(param + ".properties", param + ".properties must be an object");
    std::vector<std::string> req;
    if (params.contains("required") && params["required"].is_array())
      for (const auto& r : params["required"])
        if (r.is_string()) req.push_back(r.get<std::string>());
    grammar::JsonSchemaOptions opt;
    opt.strict = strict;
    size_t j = 0;
    for (const auto& item : params["properties"].items()) {
      const std::string k = item.key();
      const ojson& schema = item.value();  // (a structured binding cannot be captured by clang 14)
      const std::string prefix = t + "a" + std::to_string(j) + "-";
      const std::string gbnf = converted(param + ".properties." + k, [&] {
        return grammar::json_schema_to_gbnf(parameter_document(params, schema), opt);
      });
      out += grammar::prefix_gbnf_rules(gbnf, prefix) + "\n";
      out += t + "pair" + std::to_string(j) + " ::= " + grammar::gbnf_literal(k + "=") + " " + prefix + "root\n";
      names.push_back(k);
      required.push_back(std::find(req.begin(), req.end(), k) != req.end());
      ++j;
    }
  }
  // first-j: the arguments from j on, the first without a separator; more-j: each with ", ".
  const size_t n = names.size();
  for (size_t j = n + 1; j-- > 0;) {
    const std::string js = std::to_string(j), next = std::to_string(j + 1);
    if (j == n) {
      out += t + "first" + js + " ::= \"\"\n" + t + "more" + js + " ::= \"\"\n";
      continue;
    }
    const std::string pair = t + "pair" + js;
    out += t + "more" + js + " ::= \", \" " + pair + " " + t + "more" + next +
           (required[j] ? "" : " | " + t + "more" + next) + "\n";
    out += t + "first" + js + " ::= " + pair + " " + t + "more" + next + (required[j] ? "" : " | " + t + "first" + next) +
           "\n";
  }
  out += t + "call ::= " + grammar::gbnf_literal(name + "(") + " " + t + "first0 \")\"\n";
  return t + "first0";
}

}  // namespace

std::string requested_grammar(const json& body) {
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
      // Properties keep the schema's order only in ordered_json: parse the schema again from its
      // text (the body was parsed into a sorted json).
      const ojson schema = ojson::parse(js["schema"].dump());
      take("response_format",
           converted("response_format.json_schema.schema", [&] { return grammar::json_schema_to_gbnf(schema, opt); }));
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
    take("regex", converted("regex", [&] { return grammar::regex_to_gbnf(body["regex"].get<std::string>()); }));
  }
  return gbnf;
}

std::string grammar_param(const json& body) {
  if (body.contains("grammar") && !body["grammar"].is_null()) return "grammar";
  if (body.contains("regex") && !body["regex"].is_null()) return "regex";
  return body.contains("response_format") ? "response_format" : "tools";
}

std::string chat_grammar(const ChatParams& c, const std::string& content, const Tokenizer& tok) {
  bool strict_tools = false;
  if (!c.tools.is_null())
    for (const auto& t : c.tools)
      strict_tools = strict_tools || (t["function"].contains("strict") && t["function"]["strict"] == true);
  const bool forced = c.named_tool || c.tool_choice == "required";
  if (c.tools.is_null() || (!strict_tools && !forced)) return content;
  std::string out, calls;
  for (size_t i = 0; i < c.tools.size(); ++i) {
    const ojson& t = c.tools[i];
    const bool strict = t["function"].contains("strict") && t["function"]["strict"] == true;
    const std::string args = tool_rules(t, i, strict, out);
    if (c.named_tool && t["function"]["name"] == c.tool_choice) {
      // The prompt ends with "<|tool_call_start|>[name(": the grammar continues the arguments.
      out += "root ::= " + args + " \")\" ( \", \" tool" + std::to_string(i) + "-call )* \"]\" " +
             marker(tok, chat::kToolCallEnd) + "\n";
    }
    calls += (calls.empty() ? "" : " | ") + std::string("tool") + std::to_string(i) + "-call";
  }
  out += "call ::= " + calls + "\n";
  const std::string list_rest = "call ( \", \" call )* \"]\" " + marker(tok, chat::kToolCallEnd);
  if (c.named_tool) return out;
  if (c.tool_choice == "required") return out + "root ::= " + list_rest + "\n";
  // auto with strict tools: free text (or the requested content), or a call block.
  out += "block ::= " + marker(tok, chat::kToolCallStart) + " \"[\" " + list_rest + "\n";
  if (!content.empty()) return out + grammar::prefix_gbnf_rules(content, "content-") + "\nroot ::= content-root | block\n";
  std::string free_alts = ".";
  for (std::string_view m : {chat::kThinkOpen, chat::kThinkClose})
    if (tok.token_to_id(m)) free_alts += " | " + std::string(m);
  return out + "free ::= ( " + free_alts + " )*\nroot ::= free ( block free )?\n";
}

std::shared_ptr<const grammar::TokenGrammar> GrammarCache::get(const std::string& gbnf, const Engine& engine,
                                                               const std::string& param) {
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
    tg = engine.compile_grammar(grammar::parse_gbnf(gbnf));
  } catch (const Error& e) {
    bad(param, param + ": " + e.what());
  }
  std::lock_guard lock(mu_);
  if (index_.count(gbnf)) return tg;  // compiled by another request meanwhile; either will do
  lru_.emplace_front(gbnf, tg);
  index_[gbnf] = lru_.begin();
  while (lru_.size() > capacity_) {
    index_.erase(lru_.back().first);
    lru_.pop_back();
  }
  return tg;
}

}  // namespace lfm::server
