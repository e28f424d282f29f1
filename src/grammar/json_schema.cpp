#include "grammar/json_schema.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <vector>

#include "core/error.h"
#include "grammar/gbnf_writer.h"
#include "grammar/number_ranges.h"
#include "grammar/regex_to_gbnf.h"
#include "grammar/work_budget.h"

namespace lfm::grammar {

namespace {

// ordered_json: the schema's property order is the order the grammar writes properties in.
using json = nlohmann::ordered_json;

// Keywords that only annotate: never affect validity.
const std::set<std::string> kAnnotations = {
    "$schema", "$id", "id", "$comment", "$defs", "definitions", "title", "description", "default", "examples",
    "deprecated", "readOnly", "writeOnly", "contentMediaType", "contentEncoding", "$anchor", "strict"};
// Keywords that change validity but that this converter cannot honour.
const std::set<std::string> kUnsupported = {
    "not", "if", "then", "else", "patternProperties", "propertyNames", "dependentRequired", "dependentSchemas",
    "dependencies", "uniqueItems", "contains", "minContains", "maxContains", "multipleOf", "minProperties",
    "maxProperties", "unevaluatedProperties", "unevaluatedItems", "$dynamicRef", "$recursiveRef"};

constexpr const char* kWho = "json schema";
// Steps charged for the work of the walk, sized so that a step is some tens of nanoseconds: a
// value copied (an allocation), a merge or a reference resolved (JSON pointers, path strings).
constexpr uint64_t kCopyValueSteps = 4, kMergeSteps = 32, kResolveSteps = 32, kVisitSteps = 8;
constexpr double kMaxBound = 1e18;  // bounds beyond this are ignored (they exceed int64 digit ranges)

std::string pointer_token(const std::string& key) {
  std::string out;
  for (char c : key) {
    if (c == '~') out += "~0";
    else if (c == '/') out += "~1";
    else out += c;
  }
  return out;
}

const char* kind_name(const json& v) {
  switch (v.type()) {
    case json::value_t::null: return "null";
    case json::value_t::boolean: return "boolean";
    case json::value_t::string: return "string";
    case json::value_t::array: return "array";
    case json::value_t::object: return "object";
    default: return "number";
  }
}

bool has_type(const json& v, const std::string& t) {
  if (t == "null") return v.is_null();
  if (t == "boolean") return v.is_boolean();
  if (t == "string") return v.is_string();
  if (t == "array") return v.is_array();
  if (t == "object") return v.is_object();
  if (t == "number") return v.is_number();
  if (t == "integer")
    return v.is_number_integer() || (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>());
  return false;
}

class Converter {
 public:
  Converter(const json& root, const JsonSchemaOptions& opt, WorkBudget& budget)
      : root_(root), opt_(opt), budget_(budget) {
    if (opt_.any_whitespace) ws_ = rules_.add("ws", "[ \\t]{0,8} (\"\\r\"? \"\\n\" [ \\t]{0,64})?");
  }

  std::string run() {
    // The root is written as the target of "#", so that references back to it find its rule.
    const std::string e = ref("#", "", 0);
    if (e != "root") rules_.add("root", e);
    check_size("");
    budget_.bytes(kWho, rules_.text_size());  // the text itself
    return rules_.text();
  }

  std::string any_object() {
    rules_.add("root", object_generic());
    return rules_.text();
  }

 private:
  [[noreturn]] void error(const std::string& path, const std::string& what) const {
    fail("json schema: ", path.empty() ? "(root)" : path, ": ", what);
  }

  // Separators with the optional whitespace around them.
  std::string sep(const char* lit) const {
    const std::string l = std::string("\"") + lit + "\"";
    return ws_.empty() ? l : ws_ + " " + l + " " + ws_;
  }
  std::string open(const char* lit) const { return ws_.empty() ? std::string("\"") + lit + "\"" : std::string("\"") + lit + "\" " + ws_; }
  std::string close(const char* lit) const { return ws_.empty() ? std::string("\"") + lit + "\"" : ws_ + " \"" + lit + "\""; }

  // ---- primitives ---------------------------------------------------------------------------
  std::string chr() { return rules_.add("char", json_char_body()); }
  std::string string_generic() { return rules_.add("string", "\"\\\"\" " + chr() + "* \"\\\"\""); }
  std::string number_generic() {
    return rules_.add("number", "\"-\"? " + integer_digits() + " (\".\" [0-9]{1," + std::to_string(kMaxFractionDigits) +
                                    "})? ([eE] [-+]? [0-9]{1,3})?");
  }
  std::string integer_digits() const { return "(\"0\" | [1-9] [0-9]{0," + std::to_string(kMaxIntegerDigits - 1) + "})"; }
  std::string integer_generic() { return rules_.add("integer", "\"-\"? " + integer_digits()); }
  std::string boolean() { return rules_.add("boolean", "\"true\" | \"false\""); }
  std::string null() { return rules_.add("null", "\"null\""); }
  std::string value() {
    if (rules_.has("value")) return "value";
    const std::string v = rules_.reserve("value");
    const std::string arr = rules_.add("array", open("[") + " (" + v + " (" + sep(",") + " " + v + ")*" +
                                                    (ws_.empty() ? "" : " " + ws_) + ")? \"]\"");
    rules_.set(v, object_generic() + " | " + arr + " | " + string_generic() + " | " + number_generic() + " | " +
                      boolean() + " | " + null());
    return v;
  }
  std::string object_generic() {
    if (rules_.has("object")) return "object";
    const std::string o = rules_.reserve("object");
    const std::string kv = rules_.add("member", string_generic() + " " + sep(":") + " " + value());
    rules_.set(o, open("{") + " (" + kv + " (" + sep(",") + " " + kv + ")*" + (ws_.empty() ? "" : " " + ws_) +
                      ")? \"}\"");
    return o;
  }

  std::string literal_value(const json& v) { return gbnf_literal(v.dump(-1, ' ', false, json::error_handler_t::strict)); }

  // ---- schema walking -----------------------------------------------------------------------
  // Also charges the rules written since the last call (kept three times: the rule's body, the
  // reuse index, the final text).
  void check_size(const std::string& path) {
    budget_.bytes(kWho, 3 * (rules_.text_size() - charged_text_));
    charged_text_ = rules_.text_size();
    if (rules_.text_size() > opt_.max_grammar_bytes)
      error(path, "the grammar exceeds " + std::to_string(opt_.max_grammar_bytes) + " bytes (schema too large)");
  }

  const json& resolve(const std::string& ref, const std::string& path, std::string& target) {
    if (ref.empty() || ref[0] != '#') error(path + "/$ref", "only local references (#...) are supported, got \"" + ref + "\"");
    budget_.steps(kWho, kResolveSteps + ref.size() / 4);
    target = ref.substr(1);
    std::string decoded;  // percent-decoding (URI fragment)
    for (size_t i = 0; i < target.size(); ++i) {
      if (target[i] == '%' && i + 2 < target.size() && std::isxdigit(static_cast<unsigned char>(target[i + 1])) &&
          std::isxdigit(static_cast<unsigned char>(target[i + 2]))) {
        decoded += static_cast<char>(std::stoi(target.substr(i + 1, 2), nullptr, 16));
        i += 2;
      } else {
        decoded += target[i];
      }
    }
    target = decoded;
    try {
      return root_.at(json::json_pointer(target));
    } catch (const std::exception&) {
      error(path + "/$ref", "unknown $ref target \"" + ref + "\"");
    }
  }

  // Charges the work of copying `j` (one step per value), before the copy: allOf over $refs
  // copied whole subtrees 2^depth times.
  void charge_copy(const json& j) {
    std::vector<const json*> todo = {&j};
    while (!todo.empty()) {
      const json* v = todo.back();
      todo.pop_back();
      budget_.steps(kWho, kCopyValueSteps + (v->is_string() ? v->get_ref<const std::string&>().size() / 16 : 0));
      if (v->is_structured())
        for (const auto& x : *v) todo.push_back(&x);
    }
  }

  // A schema with allOf members, $ref siblings and the like folded into one object (best effort).
  json merge(json a, const json& b, const std::string& path, int depth) {
    if (depth > opt_.max_depth) error(path, "allOf nested too deeply");
    budget_.steps(kWho, kMergeSteps + path.size() / 16);
    charge_copy(b);
    if (b.is_boolean()) {
      if (!b.get<bool>()) error(path, "allOf member `false` admits nothing");
      return a;
    }
    if (!b.is_object()) error(path, std::string("expected a schema, got ") + kind_name(b));
    // The schema merged into may be a boolean one too (a property's `true`).
    if (a.is_boolean()) {
      if (!a.get<bool>()) error(path, "allOf with a member `false` admits nothing");
      a = json::object();
    }
    if (!a.is_object()) error(path, std::string("expected a schema, got ") + kind_name(a));
    json bb = b;
    if (bb.contains("$ref")) {
      if (!bb["$ref"].is_string()) error(path + "/$ref", std::string("expected a string, got ") + kind_name(bb["$ref"]));
      std::string t;
      const json& found = resolve(bb["$ref"].get<std::string>(), path, t);
      charge_copy(found);
      json target = found;
      bb.erase("$ref");
      bb = merge(std::move(bb), target, path, depth + 1);
    }
    if (bb.contains("allOf")) {
      if (!bb["allOf"].is_array()) error(path + "/allOf", std::string("expected an array of schemas, got ") + kind_name(bb["allOf"]));
      json members = bb["allOf"];
      bb.erase("allOf");
      for (size_t i = 0; i < members.size(); ++i)
        bb = merge(std::move(bb), members[i], path + "/allOf/" + std::to_string(i), depth + 1);
    }
    for (auto it = bb.begin(); it != bb.end(); ++it) {
      const std::string& k = it.key();
      if (!a.contains(k)) { a[k] = it.value(); continue; }
      json& av = a[k];
      const json& bv = it.value();
      if (k == "properties" && av.is_object() && bv.is_object()) {
        for (auto p = bv.begin(); p != bv.end(); ++p)
          av[p.key()] = av.contains(p.key()) ? merge(av[p.key()], p.value(), path + "/properties/" + pointer_token(p.key()), depth + 1)
                                             : p.value();
      } else if (k == "required" && av.is_array() && bv.is_array()) {
        for (const auto& r : bv)
          if (std::find(av.begin(), av.end(), r) == av.end()) av.push_back(r);
      } else if (k == "type") {
        json as = av.is_array() ? av : json::array({av}), bs = bv.is_array() ? bv : json::array({bv}), both = json::array();
        for (const auto& t : as)
          for (const auto& u : bs)
            if (t == u || (t == "integer" && u == "number")) both.push_back(t);
            else if (t == "number" && u == "integer") both.push_back(u);
        if (both.empty()) error(path + "/type", "allOf members have no type in common");
        av = both.size() == 1 ? both[0] : both;
      } else if ((k == "minimum" || k == "minLength" || k == "minItems" || k == "exclusiveMinimum") && av.is_number() && bv.is_number()) {
        if (bv > av) av = bv;
      } else if ((k == "maximum" || k == "maxLength" || k == "maxItems" || k == "exclusiveMaximum") && av.is_number() && bv.is_number()) {
        if (bv < av) av = bv;
      } else {
        av = bv;  // later wins (documented approximation)
      }
    }
    return a;
  }

  std::string visit(const json& s, const std::string& path, const std::string& name, int depth) {
    if (depth > opt_.max_depth) error(path, "schema nested deeper than " + std::to_string(opt_.max_depth));
    budget_.steps(kWho, kVisitSteps + path.size() / 16 + (s.is_object() ? s.size() : 0));
    check_size(path);
    if (s.is_boolean()) {
      if (!s.get<bool>()) error(path, "schema `false` admits no value");
      return value();
    }
    if (!s.is_object()) error(path, std::string("expected a schema (object or boolean), got ") + kind_name(s));
    for (auto it = s.begin(); it != s.end(); ++it)
      if (kUnsupported.count(it.key()) && opt_.strict) error(path + "/" + it.key(), "keyword not supported");

    if (s.contains("$ref")) {
      if (!s["$ref"].is_string()) error(path + "/$ref", std::string("expected a string, got ") + s["$ref"].dump());
      bool siblings = false;
      for (auto it = s.begin(); it != s.end(); ++it)
        if (it.key() != "$ref" && !kAnnotations.count(it.key())) siblings = true;
      if (siblings) {
        charge_copy(s);
        json rest = s;
        rest.erase("$ref");
        return visit(merge(rest, json{{"$ref", s["$ref"]}}, path, depth), path, name, depth + 1);
      }
      return ref(s["$ref"].get<std::string>(), path, depth);
    }
    if (s.contains("allOf")) {
      const json& members = s["allOf"];
      if (!members.is_array()) error(path + "/allOf", std::string("expected an array, got ") + kind_name(members));
      charge_copy(s);
      json merged = s;
      merged.erase("allOf");
      for (size_t i = 0; i < members.size(); ++i)
        merged = merge(std::move(merged), members[i], path + "/allOf/" + std::to_string(i), depth + 1);
      return visit(merged, path, name, depth + 1);
    }
    for (const char* key : {"anyOf", "oneOf"}) {
      if (!s.contains(key)) continue;
      const json& alts = s[key];
      if (!alts.is_array() || alts.empty()) error(path + "/" + key, "expected a non-empty array");
      charge_copy(s);
      json base = s;
      base.erase(key);
      bool has_base = false;  // sibling keywords apply to every alternative
      for (auto it = base.begin(); it != base.end(); ++it) has_base = has_base || !kAnnotations.count(it.key());
      std::string body;
      for (size_t i = 0; i < alts.size(); ++i) {
        const std::string p = path + "/" + key + "/" + std::to_string(i);
        if (has_base) charge_copy(base);
        const std::string e = has_base ? visit(merge(base, alts[i], p, depth), p, name + "-" + std::to_string(i), depth + 1)
                                       : visit(alts[i], p, name + "-" + std::to_string(i), depth + 1);
        body += (body.empty() ? "" : " | ") + e;
      }
      return rules_.add(name, body);
    }

    std::vector<std::string> types;
    if (s.contains("type")) {
      const json& t = s["type"];
      if (t.is_string()) types.push_back(t.get<std::string>());
      else if (t.is_array() && !t.empty())
        for (const auto& x : t) {
          if (!x.is_string()) error(path + "/type", "expected type names, got " + x.dump());
          types.push_back(x.get<std::string>());
        }
      else error(path + "/type", "expected a type name or a list of them, got " + t.dump());
      for (const auto& x : types)
        if (x != "object" && x != "array" && x != "string" && x != "number" && x != "integer" && x != "boolean" && x != "null")
          error(path + "/type", "unknown type \"" + x + "\"");
    }

    if (s.contains("const") || s.contains("enum")) {
      json values = s.contains("const") ? json::array({s["const"]}) : s["enum"];
      if (!values.is_array()) error(path + "/enum", std::string("expected an array, got ") + kind_name(values));
      std::string body;
      for (const auto& v : values) {
        bool ok = types.empty();
        for (const auto& t : types) ok = ok || has_type(v, t);
        if (ok) body += (body.empty() ? "" : " | ") + literal_value(v);
      }
      if (body.empty()) error(path + (s.contains("const") ? "/const" : "/enum"), "no value of the allowed types");
      return rules_.add(name, body);
    }

    if (types.empty()) {
      // No type: the keywords present say which kind is meant; none at all is any value.
      if (s.contains("properties") || s.contains("additionalProperties") || s.contains("required")) types = {"object"};
      else if (s.contains("items") || s.contains("prefixItems") || s.contains("minItems") || s.contains("maxItems")) types = {"array"};
      else if (s.contains("pattern") || s.contains("format") || s.contains("minLength") || s.contains("maxLength")) types = {"string"};
      else if (s.contains("minimum") || s.contains("maximum") || s.contains("exclusiveMinimum") || s.contains("exclusiveMaximum")) types = {"number"};
      else return value();
    }
    std::string body;
    for (const auto& t : types) {
      std::string e;
      if (t == "object") e = object(s, path, name, depth);
      else if (t == "array") e = array(s, path, name, depth);
      else if (t == "string") e = string(s, path, name);
      else if (t == "number" || t == "integer") e = number(s, path, t == "integer");
      else if (t == "boolean") e = boolean();
      else e = null();
      body += (body.empty() ? "" : " | ") + e;
    }
    return rules_.add(name, body);
  }

  std::string ref(const std::string& r, const std::string& path, int depth) {
    std::string target;
    const json& t = resolve(r, path, target);
    auto it = ref_rules_.find(target);
    if (it != ref_rules_.end()) {
      // A reference back into a schema being written: fine after some input (a nested object),
      // an endless loop when nothing was consumed in between.
      auto pending = pending_.find(target);
      if (pending != pending_.end() && pending->second == structure_depth_)
        error(path + "/$ref", "reference cycle \"" + r + "\" that matches no input");
      return it->second;
    }
    std::string base = target.empty() ? "root" : target.substr(target.rfind('/') + 1);
    const std::string name = target.empty() && !rules_.has("root") ? rules_.reserve("root") : rules_.reserve("ref-" + base);
    ref_rules_[target] = name;
    pending_[target] = structure_depth_;
    const std::string e = visit(t, target, name + "-body", depth + 1);
    rules_.set(name, e);
    pending_.erase(target);
    return name;
  }

  std::optional<double> number_at(const json& s, const std::string& path, const char* key) {
    if (!s.contains(key)) return std::nullopt;
    const json& v = s[key];
    if (!v.is_number()) error(path + "/" + key, std::string("expected a number, got ") + v.dump());
    return v.get<double>();
  }
  std::optional<size_t> count_at(const json& s, const std::string& path, const char* key) {
    auto v = number_at(s, path, key);
    if (!v) return std::nullopt;
    if (*v < 0 || std::floor(*v) != *v) error(path + "/" + key, "expected a non-negative integer, got " + s[key].dump());
    return static_cast<size_t>(std::min(*v, 1e9));
  }

  std::string number(const json& s, const std::string& path, bool integer);
  std::string string(const json& s, const std::string& path, const std::string& name);
  std::string object(const json& s, const std::string& path, const std::string& name, int depth);
  std::string array(const json& s, const std::string& path, const std::string& name, int depth);

  const json& root_;
  JsonSchemaOptions opt_;
  WorkBudget& budget_;
  size_t charged_text_ = 0;  // rules_.text_size() already charged
  RuleSet rules_;
  std::string ws_;                               // the whitespace rule; "" when compact
  std::map<std::string, std::string> ref_rules_;  // $ref target pointer → its rule
  std::map<std::string, int> pending_;            // targets being written → structure depth then
  int structure_depth_ = 0;                       // objects / arrays entered (input consumed)
};


std::string Converter::number(const json& s, const std::string& path, bool integer) {
  // The tightest lower and upper bound, each inclusive or exclusive (draft 4: a boolean flag).
  std::optional<double> lo = number_at(s, path, "minimum"), hi = number_at(s, path, "maximum");
  bool lo_ex = false, hi_ex = false;
  for (const char* key : {"exclusiveMinimum", "exclusiveMaximum"}) {
    if (!s.contains(key)) continue;
    const bool is_min = std::string_view(key) == "exclusiveMinimum";
    const json& v = s[key];
    if (v.is_boolean()) {
      (is_min ? lo_ex : hi_ex) = v.get<bool>();
      continue;
    }
    const double b = *number_at(s, path, key);
    auto& bound = is_min ? lo : hi;
    if (!bound || (is_min ? b >= *bound : b <= *bound)) {
      bound = b;
      (is_min ? lo_ex : hi_ex) = true;
    }
  }
  if (lo && std::abs(*lo) > kMaxBound) lo.reset();
  if (hi && std::abs(*hi) > kMaxBound) hi.reset();
  if (!lo && !hi) return integer ? integer_generic() : number_generic();
  // Integer bounds: non-integer ones are rounded inward (a subset of the valid numbers).
  std::optional<int64_t> l, h;
  if (lo) {
    const bool whole = std::floor(*lo) == *lo;
    l = static_cast<int64_t>(std::ceil(*lo));
    if (whole && lo_ex && integer) *l += 1;
    lo_ex = whole && lo_ex && !integer;
  }
  if (hi) {
    const bool whole = std::floor(*hi) == *hi;
    h = static_cast<int64_t>(std::floor(*hi));
    if (whole && hi_ex && integer) *h -= 1;
    hi_ex = whole && hi_ex && !integer;
  }
  const std::string e = integer ? integer_range_gbnf(l, h) : decimal_range_gbnf(l, lo_ex, h, hi_ex);
  if (e.empty()) error(path, integer ? "no integer satisfies the bounds" : "no number satisfies the bounds (as rounded to integers)");
  return "(" + e + ")";
}

std::string Converter::string(const json& s, const std::string& path, const std::string& name) {
  const std::string q = "\"\\\"\"";  // the quote around a JSON string
  if (s.contains("pattern")) {
    const json& p = s["pattern"];
    if (!p.is_string()) error(path + "/pattern", "expected a string, got " + p.dump());
    try {
      return q + " " + regex_json_string_content(p.get<std::string>(), rules_, name + "-pattern", &budget_) + " " + q;
    } catch (const Error& e) {
      error(path + "/pattern", e.what());
    }
  }
  if (s.contains("format")) {
    const json& f = s["format"];
    if (!f.is_string()) error(path + "/format", "expected a string, got " + f.dump());
    const std::string fmt = f.get<std::string>();
    const std::string date = "[0-9]{4} \"-\" (\"0\" [1-9] | \"1\" [0-2]) \"-\" (\"0\" [1-9] | [12] [0-9] | \"3\" [01])";
    const std::string time =
        "([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9] \":\" [0-5] [0-9] (\".\" [0-9]{1,9})? "
        "([zZ] | [+\\x2D] ([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9])";
    std::string body;
    if (fmt == "date") body = rules_.add("date", date);
    else if (fmt == "time") body = rules_.add("time", time);
    else if (fmt == "date-time") body = rules_.add("date-time", rules_.add("date", date) + " [Tt] " + rules_.add("time", time));
    else if (fmt == "uuid") body = rules_.add("uuid", "[0-9a-fA-F]{8} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{12}");
    else if (fmt == "email") body = rules_.add("email", "[A-Za-z0-9._%+\\x2D]+ \"@\" [A-Za-z0-9\\x2D]+ (\".\" [A-Za-z0-9\\x2D]+)+");
    if (!body.empty()) return q + " " + body + " " + q;  // unknown formats: any string
  }
  const auto min = count_at(s, path, "minLength"), max = count_at(s, path, "maxLength");
  if (!min && !max) return string_generic();
  const size_t lo = min.value_or(0);
  if (max && *max < lo) error(path, "maxLength is below minLength");
  if (max && *max > 100000) error(path + "/maxLength", "above 100000 (the grammar would be too large)");
  if (lo > 100000) error(path + "/minLength", "above 100000 (the grammar would be too large)");
  const std::string rep = "{" + std::to_string(lo) + "," + (max ? std::to_string(*max) : "") + "}";
  return q + " " + chr() + rep + " " + q;
}

std::string Converter::object(const json& s, const std::string& path, const std::string& name, int depth) {
  struct Prop { std::string key; const json* schema; bool required; };
  static const json kAny = true;
  std::vector<Prop> props;
  std::set<std::string> required;
  if (s.contains("required")) {
    const json& r = s["required"];
    if (!r.is_array()) error(path + "/required", "expected an array of names, got " + r.dump());
    for (const auto& x : r) {
      if (!x.is_string()) error(path + "/required", "expected property names, got " + x.dump());
      required.insert(x.get<std::string>());
    }
  }
  if (s.contains("properties")) {
    const json& p = s["properties"];
    if (!p.is_object()) error(path + "/properties", std::string("expected an object, got ") + kind_name(p));
    for (auto it = p.begin(); it != p.end(); ++it) props.push_back({it.key(), &it.value(), required.count(it.key()) > 0});
  }
  for (const auto& r : required)  // required but not described: any value
    if (!s.contains("properties") || !s["properties"].contains(r)) props.push_back({r, &kAny, true});

  ++structure_depth_;
  std::vector<std::string> kv;
  std::vector<std::string> names;
  for (const auto& p : props) {
    const std::string sub = path + "/properties/" + pointer_token(p.key);
    const std::string v = visit(*p.schema, sub, name + "-" + p.key, depth + 1);
    kv.push_back(rules_.add(name + "-" + p.key + "-kv", gbnf_literal(json(p.key).dump()) + " " + sep(":") + " " + v));
    names.push_back(p.key);
  }
  std::string additional;
  const json ap = s.contains("additionalProperties") ? s["additionalProperties"] : json(!opt_.strict);
  if (!(ap.is_boolean() && !ap.get<bool>())) {
    const std::string v = visit(ap, path + "/additionalProperties", name + "-additional", depth + 1);
    const std::string key = names.empty() ? string_generic()
                                          : "\"\\\"\" " + json_string_content_except(names, rules_, name + "-key") + " \"\\\"\"";
    additional = rules_.add(name + "-additional-kv", key + " " + sep(":") + " " + v);
  }
  --structure_depth_;

  // rest[i]: properties i.. after something was written (each with its comma); from[i]:
  // properties i.. when nothing was written yet (the first one without a comma). Linear in the
  // number of properties, however many are optional.
  const size_t n = props.size();
  std::string rest = additional.empty() ? "" : "(" + sep(",") + " " + additional + ")*";
  if (!rest.empty()) rest = rules_.add(name + "-rest" + std::to_string(n), rest);
  std::string from = additional.empty() ? "" : rules_.add(name + "-from" + std::to_string(n), additional + (rest.empty() ? "" : " " + rest));
  for (size_t i = n; i-- > 0;) {
    const std::string first = kv[i] + (rest.empty() ? "" : " " + rest);
    from = rules_.add(name + "-from" + std::to_string(i), props[i].required || from.empty() ? first : first + " | " + from);
    const std::string item = sep(",") + " " + kv[i];
    const std::string r = (props[i].required ? item : "(" + item + ")?") + (rest.empty() ? "" : " " + rest);
    rest = rules_.add(name + "-rest" + std::to_string(i), r);
  }
  const bool all_optional = std::none_of(props.begin(), props.end(), [](const Prop& p) { return p.required; });
  const std::string inner = from.empty() ? "" : from + (ws_.empty() ? "" : " " + ws_);
  std::string body = open("{");
  if (!inner.empty()) body += all_optional ? " (" + inner + ")?" : " " + inner;
  return body + " \"}\"";
}

std::string Converter::array(const json& s, const std::string& path, const std::string& name, int depth) {
  static const json kAny = true;
  std::vector<const json*> prefix;
  const json* rest = &kAny;
  std::string prefix_key = "prefixItems", rest_key = "items";
  if (s.contains("prefixItems")) {
    if (!s["prefixItems"].is_array()) error(path + "/prefixItems", "expected an array of schemas");
    for (const auto& x : s["prefixItems"]) prefix.push_back(&x);
    if (s.contains("items")) rest = &s["items"];
  } else if (s.contains("items") && s["items"].is_array()) {  // draft 4 tuples
    prefix_key = "items";
    rest_key = "additionalItems";
    for (const auto& x : s["items"]) prefix.push_back(&x);
    if (s.contains("additionalItems")) rest = &s["additionalItems"];
  } else if (s.contains("items")) {
    rest = &s["items"];
  }
  const size_t min = count_at(s, path, "minItems").value_or(0);
  std::optional<size_t> max = count_at(s, path, "maxItems");
  if (max && *max < min) error(path, "maxItems is below minItems");
  if (max && prefix.size() > *max) prefix.resize(*max);
  const size_t k = prefix.size();
  const bool rest_allowed = !(rest->is_boolean() && !rest->get<bool>());
  const size_t rest_min = min > k ? min - k : 0;
  std::optional<size_t> rest_max = rest_allowed ? (max ? std::optional<size_t>(*max - k) : std::nullopt) : std::optional<size_t>(0);
  if (rest_max && rest_min > *rest_max) error(path, "minItems cannot be met by the items allowed");
  if (rest_min > 100000 || (rest_max && *rest_max > 100000))
    error(path, "minItems / maxItems above 100000 (the grammar would be too large)");

  ++structure_depth_;
  std::vector<std::string> p;
  for (size_t j = 0; j < k; ++j)
    p.push_back(visit(*prefix[j], path + "/" + prefix_key + "/" + std::to_string(j), name + "-" + std::to_string(j), depth + 1));
  const std::string item = rest_max == std::optional<size_t>(0) ? "" : visit(*rest, path + "/" + rest_key, name + "-item", depth + 1);
  --structure_depth_;

  auto repeat = [](const std::string& e, size_t lo, std::optional<size_t> hi) -> std::string {
    if (hi && *hi == 0) return "";
    if (lo == 0 && !hi) return "(" + e + ")*";
    if (lo == 1 && hi == std::optional<size_t>(1)) return e;
    return "(" + e + "){" + std::to_string(lo) + "," + (hi ? std::to_string(*hi) : "") + "}";
  };
  auto join = [](const std::string& a, const std::string& b) { return a.empty() ? b : b.empty() ? a : a + " " + b; };
  // The elements after the first: prefix items (optional beyond minItems), then the rest.
  std::string tail = repeat(sep(",") + " " + item, rest_min, rest_max);
  if (item.empty()) tail = "";
  for (size_t j = k; j-- > 1;) {
    const std::string t = join(sep(",") + " " + p[j], tail);
    tail = j < min ? t : "(" + t + ")?";
  }
  std::string content;
  bool optional = min == 0;
  if (k > 0) {
    content = join(p[0], tail);
  } else if (!item.empty()) {
    std::optional<size_t> more;
    if (rest_max) more = *rest_max - 1;
    content = join(item, repeat(sep(",") + " " + item, rest_min > 0 ? rest_min - 1 : 0, more));
  }
  std::string body = open("[");
  if (!content.empty()) {
    const std::string inner = content + (ws_.empty() ? "" : " " + ws_);
    body += optional ? " (" + inner + ")?" : " " + inner;
  }
  return body + " \"]\"";
}

}  // namespace

std::string json_schema_to_gbnf(const nlohmann::ordered_json& schema, const JsonSchemaOptions& opt, WorkBudget* budget) {
  BudgetRef b(budget);
  return Converter(schema, opt, *b).run();
}

std::string json_schema_to_gbnf(const nlohmann::json& schema, const JsonSchemaOptions& opt, WorkBudget* budget) {
  return json_schema_to_gbnf(nlohmann::ordered_json::parse(schema.dump()), opt, budget);
}

std::string any_json_gbnf(bool any_whitespace) {
  JsonSchemaOptions opt;
  opt.any_whitespace = any_whitespace;
  const json none = json::object();
  WorkBudget budget;
  return Converter(none, opt, budget).any_object();
}

}  // namespace lfm::grammar
