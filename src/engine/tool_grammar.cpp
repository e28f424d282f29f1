// Tool calls constrained by a grammar (as lfm serve and the C API offer them).
#include "engine/tool_grammar.h"

#include <unordered_set>
#include <vector>

#include "chat/output_parser.h"
#include "grammar/gbnf_compose.h"
#include "grammar/gbnf_writer.h"
#include "grammar/json_schema.h"
#include "tokenizer/tokenizer.h"

namespace lfm {

using ojson = nlohmann::ordered_json;

namespace {

// A schema converter error ("json schema: /properties/x: ...") as a FieldError naming the field.
template <typename F>
std::string converted(const std::string& param, F&& convert) {
  try {
    return convert();
  } catch (const Error& e) {
    throw FieldError(param, param + ": " + e.what());
  }
}

// The marker as a token element when the tokenizer has it as a token, else its text.
std::string marker(const Tokenizer& tok, std::string_view text) {
  return tok.token_to_id(text) ? std::string(text) : grammar::gbnf_literal(text);
}

// The parameters' $defs / definitions, lent to each parameter's schema document in turn so that
// its $refs resolve. Moved in and out, never copied per parameter: a request with many
// parameters and large $defs would otherwise copy them once per parameter.
class SharedDefs {
 public:
  explicit SharedDefs(const ojson& params) {
    for (size_t i = 0; i < 2; ++i)
      if (params.contains(kKeys[i])) defs_[i] = params[kKeys[i]];
  }
  // Converts one parameter's schema with the $defs alongside (unless it has its own).
  template <typename F>
  std::string convert(const ojson& schema, F&& to_gbnf) {
    if (!schema.is_object()) return to_gbnf(schema.is_boolean() ? schema : ojson::object());
    ojson doc = schema;
    bool lent[2] = {false, false};
    for (size_t i = 0; i < 2; ++i)
      if (!defs_[i].is_null() && !doc.contains(kKeys[i])) {
        doc[kKeys[i]] = std::move(defs_[i]);
        lent[i] = true;
      }
    std::string gbnf = to_gbnf(doc);
    for (size_t i = 0; i < 2; ++i)
      if (lent[i]) defs_[i] = std::move(doc[kKeys[i]]);
    return gbnf;
  }

 private:
  static constexpr const char* kKeys[2] = {"$defs", "definitions"};
  ojson defs_[2];
};

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
    if (!params["properties"].is_object()) throw FieldError(param + ".properties", param + ".properties must be an object");
    std::unordered_set<std::string> req;  // a set: one look-up per parameter
    if (params.contains("required") && params["required"].is_array())
      for (const auto& r : params["required"])
        if (r.is_string()) req.insert(r.get<std::string>());
    SharedDefs defs(params);
    grammar::JsonSchemaOptions opt;
    opt.strict = strict;
    size_t j = 0;
    for (const auto& item : params["properties"].items()) {
      const std::string k = item.key();
      const ojson& schema = item.value();  // (a structured binding cannot be captured by clang 14)
      const std::string prefix = t + "a" + std::to_string(j) + "-";
      const std::string gbnf = converted(param + ".properties." + k, [&] {
        return defs.convert(schema, [&](const ojson& doc) { return grammar::json_schema_to_gbnf(doc, opt); });
      });
      out += grammar::prefix_gbnf_rules(gbnf, prefix) + "\n";
      out += t + "pair" + std::to_string(j) + " ::= " + grammar::gbnf_literal(k + "=") + " " + prefix + "root\n";
      names.push_back(k);
      required.push_back(req.count(k) > 0);
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

std::string tool_call_grammar(const nlohmann::ordered_json& tools, const std::string& tool_choice, bool named_tool,
                              const std::string& content, const Tokenizer& tok) {
  bool strict_tools = false;
  if (!tools.is_null())
    for (const auto& t : tools)
      strict_tools = strict_tools || (t["function"].contains("strict") && t["function"]["strict"] == true);
  const bool forced = named_tool || tool_choice == "required";
  if (tools.is_null() || (!strict_tools && !forced)) return content;
  std::string out, calls;
  for (size_t i = 0; i < tools.size(); ++i) {
    const ojson& t = tools[i];
    const bool strict = t["function"].contains("strict") && t["function"]["strict"] == true;
    const std::string args = tool_rules(t, i, strict, out);
    if (named_tool && t["function"]["name"] == tool_choice) {
      // The prompt ends with "<|tool_call_start|>[name(": the grammar continues the arguments.
      out += "root ::= " + args + " \")\" ( \", \" tool" + std::to_string(i) + "-call )* \"]\" " +
             marker(tok, chat::kToolCallEnd) + "\n";
    }
    calls += (calls.empty() ? "" : " | ") + std::string("tool") + std::to_string(i) + "-call";
  }
  out += "call ::= " + calls + "\n";
  const std::string list_rest = "call ( \", \" call )* \"]\" " + marker(tok, chat::kToolCallEnd);
  if (named_tool) return out;
  if (tool_choice == "required") return out + "root ::= " + list_rest + "\n";
  // auto with strict tools: free text (or the requested content), or a call block.
  out += "block ::= " + marker(tok, chat::kToolCallStart) + " \"[\" " + list_rest + "\n";
  if (!content.empty()) return out + grammar::prefix_gbnf_rules(content, "content-") + "\nroot ::= content-root | block\n";
  std::string free_alts = ".";
  for (std::string_view m : {chat::kThinkOpen, chat::kThinkClose})
    if (tok.token_to_id(m)) free_alts += " | " + std::string(m);
  return out + "free ::= ( " + free_alts + " )*\nroot ::= free ( block free )?\n";
}

}  // namespace lfm
