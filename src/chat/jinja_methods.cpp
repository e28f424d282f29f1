// Python methods of str, dict and list/tuple as seen through jinja2's immutable sandbox.
#include <algorithm>
#include <unordered_set>

#include "chat/jinja_builtins.h"
#include "chat/jinja_strings.h"

namespace lfm::jinja {
namespace {

const std::unordered_set<std::string> kStrMethods = {
    "capitalize", "casefold", "center", "count", "encode", "endswith", "expandtabs", "find", "format",
    "format_map", "index", "isalnum", "isalpha", "isascii", "isdecimal", "isdigit", "isidentifier", "islower",
    "isnumeric", "isprintable", "isspace", "istitle", "isupper", "join", "ljust", "lower", "lstrip", "maketrans",
    "partition", "removeprefix", "removesuffix", "replace", "rfind", "rindex", "rjust", "rpartition", "rsplit",
    "rstrip", "split", "splitlines", "startswith", "strip", "swapcase", "title", "translate", "upper", "zfill"};
const std::unordered_set<std::string> kDictMethods = {"clear", "copy", "fromkeys", "get", "items", "keys",
                                                      "pop", "popitem", "setdefault", "update", "values"};
const std::unordered_set<std::string> kListMethods = {"append", "clear", "copy", "count", "extend", "index",
                                                      "insert", "pop", "remove", "reverse", "sort"};
// What jinja2.sandbox.ImmutableSandboxedEnvironment refuses (modifies_known_mutable).
const std::unordered_set<std::string> kUnsafeDict = {"clear", "pop", "popitem", "setdefault", "update"};
const std::unordered_set<std::string> kUnsafeList = {"append", "reverse", "insert", "sort", "extend", "remove"};

std::optional<std::string> opt_str(const Value& v, const char* fn) {
  if (v.is_undefined() || v.is_none()) return std::nullopt;
  if (!v.is_string()) template_fail(fn, " arg must be None or str");
  return v.str();
}

const std::string& need_str(const Value& v, const char* fn) {
  if (!v.is_string()) template_fail(fn, "() argument must be str, not ", v.type_name());
  return v.str();
}

int64_t opt_int(const Value& v, int64_t def) {
  if (v.is_undefined() || v.is_none()) return def;
  return to_index(v, "argument");
}

Value str_list(const std::vector<std::string>& parts) {
  check_list_items(parts.size(), "str.split()");  // the list is sized before it is built
  ValueList out;
  out.reserve(parts.size());
  for (const auto& p : parts) out.push_back(Value::string(p));
  return Value::list(std::move(out));
}

bool all_cp(const std::string& s, bool (*pred)(char32_t)) {
  const std::u32string u = utf8_decode(s);
  if (u.empty()) return false;
  for (char32_t c : u)
    if (!pred(c)) return false;
  return true;
}

// The is* predicates are exact for ASCII text; other text would need Unicode category tables.
bool ascii_only(const std::string& s, const std::string& name) {
  for (char c : s)
    if (static_cast<unsigned char>(c) >= 0x80) template_fail("unsupported: str.", name, "() on non-ASCII text");
  return true;
}

// str.startswith / endswith with a str or tuple of str, optional start/end.
bool affix(const std::string& s, const Value& what, const CallArgs& a, bool start) {
  std::string sub_text;
  const bool whole = !a.has(1, "start") && !a.has(2, "end");  // the common case: no copy, no decoding
  if (!whole) {
    std::u32string u = utf8_decode(s);
    const auto n = static_cast<int64_t>(u.size());
    auto clamp = [n](int64_t i) { return i < 0 ? std::max<int64_t>(0, i + n) : std::min(i, n); };
    const int64_t b = clamp(opt_int(a.get(1, "start"), 0)), e = clamp(opt_int(a.get(2, "end"), n));
    if (b > e) return false;
    sub_text = utf8_encode(u.substr(static_cast<size_t>(b), static_cast<size_t>(e - b)));
  }
  const std::string& sub = whole ? s : sub_text;
  const ValueList single{what};
  const ValueList& options = what.is_tuple() ? what.items() : single;
  for (const auto& o : options) {
    const std::string& p = need_str(o, start ? "startswith" : "endswith");
    if (p.size() > sub.size()) continue;
    if (start ? sub.compare(0, p.size(), p) == 0 : sub.compare(sub.size() - p.size(), p.size(), p) == 0) return true;
  }
  return false;
}

// str.format with {} / {0} / {name} fields and {{ }} escapes; specs and conversions are refused.
Value str_format(const std::string& fmt, const CallArgs& a) {
  std::string out;
  size_t auto_idx = 0;
  for (size_t i = 0; i < fmt.size(); ++i) {
    const char c = fmt[i];
    if (c == '}') {
      if (i + 1 < fmt.size() && fmt[i + 1] == '}') { out.push_back('}'); ++i; continue; }
      template_fail("Single '}' encountered in format string");
    }
    if (c != '{') { out.push_back(c); continue; }
    if (i + 1 < fmt.size() && fmt[i + 1] == '{') { out.push_back('{'); ++i; continue; }
    const size_t close = fmt.find('}', i);
    if (close == std::string::npos) template_fail("Single '{' encountered in format string");
    const std::string field = fmt.substr(i + 1, close - i - 1);
    if (field.find_first_of(":!.[{") != std::string::npos)
      template_fail("unsupported: str.format field '{", field, "}' (format specs and conversions)");
    const Value* v = nullptr;
    if (field.empty() || std::isdigit(static_cast<unsigned char>(field[0]))) {
      // Digits only, parsed without std::stoul ("1a" must not read as 1, 30 digits must not throw
      // out_of_range past the template's error handling).
      if (field.size() > 9 || field.find_first_not_of("0123456789") != std::string::npos)
        template_fail("unsupported: str.format field '{", field, "}'");
      const size_t idx = field.empty() ? auto_idx++ : static_cast<size_t>(std::stoul(field));
      if (idx >= a.pos.size()) template_fail("Replacement index ", idx, " out of range for positional args tuple");
      v = &a.pos[idx];
    } else {
      for (const auto& [k, val] : a.kw)
        if (k == field) v = &val;
      if (!v) template_fail("'", field, "'");
    }
    if (v->is_undefined()) template_fail(undefined_message(*v));
    const std::string text = to_str(*v);
    check_string_bytes(out.size() + text.size(), "str.format()");
    out += text;
    i = close;
  }
  return Value::string(std::move(out));
}

Value str_method(const std::string& s, const std::string& name, const CallArgs& a) {
  auto arg = [&](size_t i, const char* n) { return a.get(i, n); };
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    a.check(name.c_str(), 1, {});
    return Value::string(py_strip(s, opt_str(arg(0, "chars"), name.c_str()), name != "rstrip", name != "lstrip"));
  }
  if (name == "split" || name == "rsplit") {
    a.check(name.c_str(), 2, {"sep", "maxsplit"});
    const auto sep = opt_str(arg(0, "sep"), name.c_str());
    const int64_t maxsplit = opt_int(arg(1, "maxsplit"), -1);
    return str_list(name == "split" ? py_split(s, sep, maxsplit) : py_rsplit(s, sep, maxsplit));
  }
  if (name == "splitlines") {
    a.check("splitlines", 1, {"keepends"});
    return str_list(py_splitlines(s, truthy(arg(0, "keepends"))));
  }
  if (name == "startswith" || name == "endswith") {
    a.check(name.c_str(), 3, {});
    if (a.pos.empty()) template_fail(name, "() takes at least 1 argument (0 given)");
    return Value::boolean(affix(s, a.pos[0], a, name == "startswith"));
  }
  if (name == "replace") {
    a.check("replace", 3, {"count"});
    return Value::string(py_replace_bounded(s, need_str(arg(0, "old"), "replace"), need_str(arg(1, "new"), "replace"),
                                            opt_int(arg(2, "count"), -1)));
  }
  if (name == "lower") return Value::string(py_lower(s));
  if (name == "upper") return Value::string(py_upper(s));
  if (name == "title") return Value::string(py_title(s));
  if (name == "capitalize") return Value::string(py_capitalize(s));
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex") {
    a.check(name.c_str(), 1, {});
    const int64_t r = py_find(s, need_str(arg(0, "sub"), name.c_str()), name[0] == 'r');
    if (r < 0 && name.find("index") != std::string::npos) template_fail("substring not found");
    return Value::integer(r);
  }
  if (name == "count") {
    a.check("count", 1, {});
    return Value::integer(py_count(s, need_str(arg(0, "sub"), "count")));
  }
  if (name == "join") {
    a.check("join", 1, {});
    std::string out;
    bool first = true;
    for (const auto& v : iterate(arg(0, "iterable"))) {
      if (!v.is_string()) template_fail("sequence item: expected str instance, ", v.type_name(), " found");
      const size_t piece = (first ? 0 : s.size()) + v.str().size();
      check_string_bytes(out.size() + piece, "str.join()");
      if (!first) out += s;
      out += v.str();
      first = false;
    }
    return Value::string(std::move(out));
  }
  if (name == "removeprefix" || name == "removesuffix") {
    const std::string& x = need_str(arg(0, "prefix"), name.c_str());
    if (name == "removeprefix") return Value::string(s.compare(0, x.size(), x) == 0 ? s.substr(x.size()) : s);
    const bool ends = s.size() >= x.size() && s.compare(s.size() - x.size(), x.size(), x) == 0;
    return Value::string(ends && !x.empty() ? s.substr(0, s.size() - x.size()) : s);
  }
  if (name == "partition" || name == "rpartition") {
    const std::string& sep = need_str(arg(0, "sep"), name.c_str());
    if (sep.empty()) template_fail("empty separator");
    const size_t f = text_find(s, sep, name == "rpartition");
    if (f == std::string::npos)
      return name == "partition" ? str_list({s, "", ""}) : str_list({"", "", s});
    Value r = str_list({s.substr(0, f), sep, s.substr(f + sep.size())});
    return Value::list(r.items(), true);
  }
  if (name == "isspace") return Value::boolean(all_cp(s, py_isspace));
  if (name == "isdigit" || name == "isdecimal" || name == "isnumeric")
    return Value::boolean(ascii_only(s, name) && all_cp(s, [](char32_t c) { return c >= '0' && c <= '9'; }));
  if (name == "isalpha")
    return Value::boolean(ascii_only(s, name) && all_cp(s, [](char32_t c) { return std::isalpha(int(c)) != 0; }));
  if (name == "isalnum")
    return Value::boolean(ascii_only(s, name) && all_cp(s, [](char32_t c) { return std::isalnum(int(c)) != 0; }));
  if (name == "isascii") {
    for (char c : s)
      if (static_cast<unsigned char>(c) >= 0x80) return Value::boolean(false);
    return Value::boolean(true);
  }
  if (name == "islower" || name == "isupper") {
    // True when there is a cased character and no character of the other case.
    bool cased = false;
    for (char32_t c : utf8_decode(s)) {
      const std::string one = utf8_encode(std::u32string(1, c));
      const bool lo = py_upper(one) != one, up = py_lower(one) != one;
      if (name == "islower" ? up : lo) return Value::boolean(false);
      cased = cased || lo || up;
    }
    return Value::boolean(cased);
  }
  if (name == "zfill") {
    const int64_t width = to_index(arg(0, "width"), "zfill width");
    const int64_t len = static_cast<int64_t>(utf8_length(s));
    if (len >= width) return Value::string(s);
    check_string_bytes(sat_mul_add(1, static_cast<uint64_t>(width - len), s.size()), "str.zfill()");
    const std::string pad(static_cast<size_t>(width - len), '0');
    if (!s.empty() && (s[0] == '-' || s[0] == '+')) return Value::string(s.substr(0, 1) + pad + s.substr(1));
    return Value::string(pad + s);
  }
  if (name == "format") return str_format(s, a);
  template_fail("unsupported: str.", name, "()");
}

Value dict_method(const Value& d, const std::string& name, const CallArgs& a) {
  if (name == "get") {
    a.check("get", 2, {});
    if (a.pos.empty()) template_fail("get expected at least 1 argument, got 0");
    const Value* v = d.dict_data().find(a.pos[0]);
    return v ? *v : (a.pos.size() > 1 ? a.pos[1] : Value::none());
  }
  a.check(name.c_str(), 0, {});
  if (name == "copy") return d;
  check_list_items(d.dict_data().entries.size() * (name == "items" ? 3 : 1), "dict view");
  ValueList out;
  for (const auto& [k, v] : d.dict_data().entries) {
    if (name == "keys") out.push_back(k);
    else if (name == "values") out.push_back(v);
    else out.push_back(Value::list({k, v}, true));
  }
  return Value::view(std::move(out), name == "keys" ? Value::KeysView : name == "values" ? Value::ValuesView : Value::ItemsView);
}

Value list_method(const Value& l, const std::string& name, const CallArgs& a) {
  if (name == "copy") return Value::list(l.items());
  if (name == "count" || name == "index") {
    a.check(name.c_str(), 1, {});
    const Value x = a.get(0, "value");
    int64_t n = 0;
    for (size_t i = 0; i < l.items().size(); ++i) {
      if (!py_equal(l.items()[i], x)) continue;
      if (name == "index") return Value::integer(static_cast<int64_t>(i));
      ++n;
    }
    if (name == "index") template_fail(repr(x), " is not in list");
    return Value::integer(n);
  }
  template_fail("unsupported: list.", name, "() (it would modify the list)");
}

Value unsafe(const Value& obj, const std::string& name) {
  return Value::undefined("access to attribute '" + name + "' of '" + obj.type_name() + "' object is unsafe.");
}

}  // namespace

std::optional<Value> bound_method(const Value& obj, const std::string& name) {
  switch (obj.kind()) {
    case Kind::String: {
      if (!kStrMethods.count(name)) return std::nullopt;
      if (obj.is_markup()) template_fail("unsupported: method '", name, "' on a Markup string");
      // The bound method holds the value (shared), not a copy of its text: `s.strip` in a loop
      // must not copy a long string at every step.
      return make_callable(name, "method", [obj, name](const CallArgs& a) { return str_method(obj.str(), name, a); });
    }
    case Kind::Dict: {
      if (!kDictMethods.count(name)) return std::nullopt;
      if (kUnsafeDict.count(name)) return unsafe(obj, name);
      if (name == "fromkeys") template_fail("unsupported: dict.fromkeys()");
      return make_callable(name, "method", [obj, name](const CallArgs& a) { return dict_method(obj, name, a); });
    }
    case Kind::List: {
      if (obj.view_kind() != Value::NoView) {
        if (name == "mapping" || name == "isdisjoint") template_fail("unsupported: ", obj.type_name(), ".", name);
        return std::nullopt;
      }
      const bool tuple_ok = name == "count" || name == "index";
      if (obj.is_tuple() && !tuple_ok) return std::nullopt;
      if (!kListMethods.count(name)) return std::nullopt;
      if (kUnsafeList.count(name)) return unsafe(obj, name);
      return make_callable(name, "method", [obj, name](const CallArgs& a) { return list_method(obj, name, a); });
    }
    default: return std::nullopt;
  }
}

std::string py_replace_bounded(const std::string& s, const std::string& old, const std::string& repl, int64_t count) {
  // Python inserts `repl` at every code point boundary when `old` is empty.
  uint64_t n = old.empty() ? utf8_length(s) + 1 : static_cast<uint64_t>(py_count(s, old));
  if (count >= 0) n = std::min<uint64_t>(n, static_cast<uint64_t>(count));
  if (repl.size() > old.size()) check_string_bytes(sat_mul_add(n, repl.size() - old.size(), s.size()), "replace()");
  return py_replace(s, old, repl, count);
}

}  // namespace lfm::jinja
