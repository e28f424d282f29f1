// Jinja filters with jinja2 3.x semantics, plus transformers' tojson override.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <unordered_map>
#include <unordered_set>

#include "chat/jinja_builtins.h"
#include "chat/jinja_strings.h"

namespace lfm::jinja {
namespace {

using FilterFn = std::function<Value(const Value&, const CallArgs&)>;

// jinja's make_attrgetter: "a.b.0" walks with getitem (not getattr), integer parts as ints.
std::function<Value(const Value&)> attrgetter(const Value& attribute, bool lower_strings, const Value& def = Value()) {
  std::vector<Value> parts;
  if (attribute.is_string()) {
    for (const auto& p : py_split(attribute.str(), std::string("."), -1)) {
      const bool digits = !p.empty() && std::all_of(p.begin(), p.end(), [](char c) { return c >= '0' && c <= '9'; });
      // Up to 18 digits fit int64; a longer run of digits can match no item (and std::stoll would throw).
      parts.push_back(digits && p.size() <= 18 ? Value::integer(std::stoll(p)) : Value::string(p));
    }
  } else if (!attribute.is_undefined() && !attribute.is_none()) {
    parts.push_back(attribute);
  }
  return [parts, lower_strings, def](const Value& item) {
    Value v = item;
    for (const auto& p : parts) {
      v = get_item(v, p);
      if (v.is_undefined() && !def.is_undefined()) {
        v = def;
        break;
      }
    }
    if (lower_strings && v.is_string()) return Value::string(py_lower(v.str()));
    return v;
  };
}

Value generator(ValueList items) { return Value::view(std::move(items), Value::Generator); }

// Shared by sort/dictsort/unique/min/max: Python's sorted() with a key function (stable).
ValueList sorted_by(ValueList items, const std::function<Value(const Value&)>& key, bool reverse) {
  std::vector<std::pair<Value, Value>> keyed;
  for (auto& it : items) keyed.emplace_back(key(it), std::move(it));
  std::stable_sort(keyed.begin(), keyed.end(), [reverse](const auto& a, const auto& b) {
    return reverse ? py_compare(b.first, a.first, "<") < 0 : py_compare(a.first, b.first, "<") < 0;
  });
  ValueList out;
  for (auto& [k, v] : keyed) out.push_back(std::move(v));
  return out;
}

CallArgs rest_args(const CallArgs& a, size_t skip) {
  CallArgs r;
  if (a.pos.size() > skip) r.pos.assign(a.pos.begin() + static_cast<std::ptrdiff_t>(skip), a.pos.end());
  r.kw = a.kw;
  return r;
}

// select/reject/selectattr/rejectattr share jinja's select_or_reject.
Value select_or_reject(const Value& in, const CallArgs& a, bool attr, bool select) {
  size_t next = 0;
  std::function<Value(const Value&)> get = [](const Value& v) { return v; };
  if (attr) {
    if (a.pos.empty()) template_fail("Missing parameter for attribute name");
    get = attrgetter(a.pos[0], false);
    next = 1;
  }
  std::function<bool(const Value&)> pred = [](const Value& v) { return truthy(v); };
  if (a.pos.size() > next) {
    if (!a.pos[next].is_string()) template_fail("test name must be a string");
    const std::string test = a.pos[next].str();
    if (!has_test(test)) template_fail("No test named '", test, "'.");
    CallArgs targs = rest_args(a, next + 1);
    pred = [test, targs](const Value& v) { return call_test(test, v, targs); };
  }
  ValueList out;
  for (const auto& item : iterate(in))
    if (pred(get(item)) == select) out.push_back(item);
  return generator(std::move(out));
}

std::string html_escape(const std::string& s) {
  uint64_t size = s.size();  // sized before it is built (up to 5x the input)
  for (char c : s) size += c == '&' || c == '"' || c == '\'' ? 4 : (c == '<' || c == '>') ? 3 : 0;
  check_string_bytes(size, "|escape");
  std::string out;
  out.reserve(size);
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out.push_back(c);
    }
  }
  return out;
}

// Python int(str) accepting surrounding whitespace, a sign and single underscores between digits.
std::optional<int64_t> parse_py_int(const std::string& text, int base) {
  std::string s = py_strip(text, std::nullopt, true, true);
  bool neg = false;
  if (!s.empty() && (s[0] == '+' || s[0] == '-')) {
    neg = s[0] == '-';
    s.erase(0, 1);
  }
  if (base == 16 && s.size() > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) s.erase(0, 2);
  std::string digits;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '_' && i > 0 && i + 1 < s.size() && s[i - 1] != '_') continue;
    digits.push_back(s[i]);
  }
  if (digits.empty()) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(digits.c_str(), &end, base);
  if (*end != 0 || digits[0] == '-' || digits[0] == '+' || py_isspace(static_cast<unsigned char>(digits[0])))
    return std::nullopt;
  if (errno == ERANGE) template_fail("unsupported: integer ", text, " exceeds 64 bits");
  return neg ? -v : v;
}

std::optional<double> parse_py_float(const std::string& text) {
  const std::string s = py_strip(text, std::nullopt, true, true);
  if (s.empty() || s.find('_') != std::string::npos) {
    if (s.find('_') != std::string::npos) template_fail("unsupported: float('", text, "') with underscores");
    return std::nullopt;
  }
  const std::string low = py_lower(s);
  for (const char* special : {"inf", "+inf", "-inf", "infinity", "+infinity", "-infinity", "nan", "+nan", "-nan"})
    if (low == special) return std::strtod(low.c_str(), nullptr);
  char* end = nullptr;
  if (std::isalpha(static_cast<unsigned char>(s.back())) && s.back() != 'e' && s.back() != 'E') return std::nullopt;
  if (s.find_first_of("xXpP") != std::string::npos) return std::nullopt;  // strtod accepts hex, Python does not
  const double d = std::strtod(s.c_str(), &end);
  if (*end != 0) return std::nullopt;
  return d;
}

Value do_tojson(const Value& in, const CallArgs& a) {
  a.check("tojson", 4, {"ensure_ascii", "indent", "separators", "sort_keys"});
  // transformers: tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False).
  JsonDumpOptions opt;
  opt.ensure_ascii = truthy(a.get(0, "ensure_ascii", Value::boolean(false)));
  const Value indent = a.get(1, "indent", Value::none());
  if (indent.is_int() || indent.is_bool()) {
    if (indent.as_int() > 4096) template_fail("unsupported: tojson indent above 4096");
    opt.has_indent = true;
    opt.indent = std::string(static_cast<size_t>(std::max<int64_t>(0, indent.as_int())), ' ');
  } else if (indent.is_string()) {
    opt.has_indent = true;
    opt.indent = indent.str();
  } else if (!indent.is_none() && !indent.is_undefined()) {
    template_fail("unsupported: tojson indent of type ", indent.type_name());
  }
  if (opt.has_indent) opt.item_sep.assign(1, ',');
  const Value seps = a.get(2, "separators", Value::none());
  if (seps.is_list() && seps.items().size() == 2 && seps.items()[0].is_string() && seps.items()[1].is_string()) {
    opt.item_sep = seps.items()[0].str();
    opt.key_sep = seps.items()[1].str();
  } else if (!seps.is_none() && !seps.is_undefined()) {
    template_fail("unsupported: tojson separators must be a pair of strings");
  }
  opt.sort_keys = truthy(a.get(3, "sort_keys", Value::boolean(false)));
  return Value::string(to_json_text(in, opt));
}

Value do_indent(const Value& in, const CallArgs& a) {
  a.check("indent", 3, {"width", "first", "blank"});
  const Value width = a.get(0, "width", Value::integer(4));
  const int64_t n_spaces = width.is_string() ? 0 : std::max<int64_t>(0, to_index(width, "width"));
  check_string_bytes(static_cast<uint64_t>(n_spaces), "|indent width");
  const std::string ind = width.is_string() ? width.str() : std::string(static_cast<size_t>(n_spaces), ' ');
  const bool first = truthy(a.get(1, "first")), blank = truthy(a.get(2, "blank"));
  const std::string text = to_str(in);
  const std::vector<std::string> lines = py_splitlines(text + "\n", false);
  // At most one indent per line plus the first: sized before anything is built.
  check_string_bytes(sat_mul_add(ind.size(), lines.size() + 1, text.size() + lines.size()), "|indent");
  std::string rv;
  if (blank) {
    for (size_t i = 0; i < lines.size(); ++i) rv += (i ? "\n" + ind : "") + lines[i];
  } else {
    rv = lines.empty() ? "" : lines[0];
    for (size_t i = 1; i < lines.size(); ++i) rv += "\n" + (lines[i].empty() ? lines[i] : ind + lines[i]);
  }
  if (first) rv = ind + rv;
  return Value::string(rv, in.is_markup());
}

Value do_round(const Value& in, const CallArgs& a) {
  a.check("round", 2, {"precision", "method"});
  const int64_t prec = to_index(a.get(0, "precision", Value::integer(0)), "precision");
  const Value method = a.get(1, "method", Value::string("common"));
  if (!in.is_number()) template_fail("type ", in.type_name(), " doesn't define __round__ method");
  const std::string m = method.is_string() ? method.str() : "";
  if (m != "common" && m != "ceil" && m != "floor") template_fail("method must be common, ceil or floor");
  if (m == "common" && !in.is_float()) {
    if (prec >= 0) return Value::integer(in.as_int());
    template_fail("unsupported: round() of an integer to negative precision");
  }
  if (prec < -308 || prec > 300) template_fail("unsupported: round() precision ", prec);
  if (m == "common" && prec < 0) {
    // CPython: round x / 10**-n half-to-even, then scale back.
    const double pow1 = std::pow(10.0, static_cast<double>(-prec));
    return Value::floating(std::nearbyint(in.as_float() / pow1) * pow1);
  }
  if (m == "common") {
    // CPython rounds the exact binary value half-to-even; printf does the same.
    char buf[512];
    std::snprintf(buf, sizeof buf, "%.*f", static_cast<int>(prec), in.as_float());
    return Value::floating(std::strtod(buf, nullptr));
  }
  const double scale = std::pow(10.0, static_cast<double>(prec));
  const double r = m == "ceil" ? std::ceil(in.as_float() * scale) : std::floor(in.as_float() * scale);
  return Value::floating(r / scale);
}

Value min_max(const Value& in, const CallArgs& a, bool want_max) {
  a.check(want_max ? "max" : "min", 2, {"case_sensitive", "attribute"});
  const auto key = attrgetter(a.get(1, "attribute"), !truthy(a.get(0, "case_sensitive")));
  const ValueList items = iterate(in);
  if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
  size_t best = 0;
  Value best_key = key(items[0]);
  for (size_t i = 1; i < items.size(); ++i) {
    Value k = key(items[i]);
    const int c = py_compare(k, best_key, want_max ? ">" : "<");
    if (want_max ? c > 0 : c < 0) {
      best = i;
      best_key = std::move(k);
    }
  }
  return items[best];
}

const std::unordered_map<std::string, FilterFn>& filters() {
  static const std::unordered_map<std::string, FilterFn> f = [] {
    std::unordered_map<std::string, FilterFn> m;
    m["default"] = [](const Value& in, const CallArgs& a) {
      a.check("default", 2, {"default_value", "boolean"});
      const bool boolean = truthy(a.get(1, "boolean"));
      if (in.is_undefined() || (boolean && !truthy(in))) return a.get(0, "default_value", Value::string(""));
      return in;
    };
    m["d"] = m["default"];
    m["length"] = [](const Value& in, const CallArgs&) { return Value::integer(py_len(in)); };
    m["count"] = m["length"];
    m["string"] = [](const Value& in, const CallArgs&) { return Value::string(to_str(in), in.is_markup()); };
    m["upper"] = [](const Value& in, const CallArgs&) { return Value::string(py_upper(to_str(in)), in.is_markup()); };
    m["lower"] = [](const Value& in, const CallArgs&) { return Value::string(py_lower(to_str(in)), in.is_markup()); };
    m["capitalize"] = [](const Value& in, const CallArgs&) { return Value::string(py_capitalize(to_str(in)), in.is_markup()); };
    m["title"] = [](const Value& in, const CallArgs&) { return Value::string(jinja_title(to_str(in)), in.is_markup()); };
    m["trim"] = [](const Value& in, const CallArgs& a) {
      a.check("trim", 1, {"chars"});
      const Value chars = a.get(0, "chars", Value::none());
      std::optional<std::string> cs;
      if (chars.is_string()) cs = chars.str();
      return Value::string(py_strip(to_str(in), cs, true, true), in.is_markup());
    };
    m["replace"] = [](const Value& in, const CallArgs& a) {
      a.check("replace", 3, {"old", "new", "count"});
      const Value cnt = a.get(2, "count", Value::none());
      return Value::string(py_replace_bounded(to_str(in), to_str(a.get(0, "old")), to_str(a.get(1, "new")),
                                              cnt.is_none() ? -1 : to_index(cnt, "count")));
    };
    m["first"] = [](const Value& in, const CallArgs&) {
      if (in.is_list() && !in.is_generator())  // no copy of a long list for its first item
        return in.items().empty() ? Value::undefined("No first item, sequence was empty.") : in.items().front();
      const ValueList items = in.is_generator() ? in.take_generator(1) : iterate(in);
      return items.empty() ? Value::undefined("No first item, sequence was empty.") : items.front();
    };
    m["last"] = [](const Value& in, const CallArgs&) {
      if (in.is_generator()) template_fail("'generator' object is not reversible");
      const ValueList items = iterate(in);
      return items.empty() ? Value::undefined("No last item, sequence was empty.") : items.back();
    };
    m["list"] = [](const Value& in, const CallArgs&) { return Value::list(iterate(in)); };
    m["join"] = [](const Value& in, const CallArgs& a) {
      a.check("join", 2, {"d", "attribute"});
      const Value sep = a.get(0, "d", Value::string(""));
      const auto get = attrgetter(a.get(1, "attribute"), false);
      std::string out;
      bool first = true;
      const std::string sep_text = to_str(sep);
      for (const auto& v : iterate(in)) {
        const std::string text = to_str(get(v));
        const size_t piece = (first ? 0 : sep_text.size()) + text.size();
        check_string_bytes(out.size() + piece, "|join");
        if (!first) out += sep_text;
        out += text;
        first = false;
      }
      return Value::string(std::move(out));
    };
    m["tojson"] = do_tojson;
    m["int"] = [](const Value& in, const CallArgs& a) {
      a.check("int", 2, {"default", "base"});
      const Value def = a.get(0, "default", Value::integer(0));
      const int base = static_cast<int>(to_index(a.get(1, "base", Value::integer(10)), "base"));
      if (in.is_undefined()) template_fail(undefined_message(in));
      if (in.is_string()) {
        if (auto v = parse_py_int(in.str(), base)) return Value::integer(*v);
        if (auto d = parse_py_float(in.str()); d && !std::isnan(*d)) {
          if (std::isinf(*d) || std::fabs(*d) >= 9.2e18) template_fail("cannot convert float ", *d, " to a 64-bit integer");
          return Value::integer(static_cast<int64_t>(std::trunc(*d)));
        }
        return def;
      }
      if (in.is_int() || in.is_bool()) return Value::integer(in.as_int());
      if (in.is_float()) {
        if (std::isnan(in.as_float())) return def;
        if (std::fabs(in.as_float()) >= 9.2e18) template_fail("cannot convert float ", in.as_float(), " to a 64-bit integer");
        return Value::integer(static_cast<int64_t>(std::trunc(in.as_float())));
      }
      return def;
    };
    m["float"] = [](const Value& in, const CallArgs& a) {
      a.check("float", 1, {"default"});
      const Value def = a.get(0, "default", Value::floating(0.0));
      if (in.is_undefined()) template_fail(undefined_message(in));
      if (in.is_number()) return Value::floating(in.as_float());
      if (in.is_string())
        if (auto d = parse_py_float(in.str())) return Value::floating(*d);
      return def;
    };
    m["abs"] = [](const Value& in, const CallArgs&) {
      if (in.is_float()) return Value::floating(std::fabs(in.as_float()));
      if (in.is_int() || in.is_bool()) return in.as_int() < 0 ? unary_op("-", in) : Value::integer(in.as_int());
      template_fail("bad operand type for abs(): '", in.type_name(), "'");
    };
    m["round"] = do_round;
    m["items"] = [](const Value& in, const CallArgs&) {
      if (in.is_undefined()) return generator({});
      if (!in.is_dict()) template_fail("Can only get item pairs from a mapping.");
      check_list_items(in.dict_data().entries.size() * 3, "|items");  // the list and each pair
      ValueList out;
      for (const auto& [k, v] : in.dict_data().entries) out.push_back(Value::list({k, v}, true));
      return generator(std::move(out));
    };
    m["dictsort"] = [](const Value& in, const CallArgs& a) {
      a.check("dictsort", 3, {"case_sensitive", "by", "reverse"});
      if (!in.is_dict()) template_fail("'", in.type_name(), "' object has no attribute 'items'");
      const bool cs = truthy(a.get(0, "case_sensitive"));
      const Value by = a.get(1, "by", Value::string("key"));
      const size_t pos = (by.is_string() && by.str() == "value") ? 1 : 0;
      if (!by.is_string() || (by.str() != "key" && by.str() != "value"))
        template_fail("You can only sort by either \"key\" or \"value\"");
      check_list_items(in.dict_data().entries.size() * 3, "|dictsort");  // the list and each pair
      ValueList items;
      for (const auto& [k, v] : in.dict_data().entries) items.push_back(Value::list({k, v}, true));
      return Value::list(sorted_by(std::move(items), [pos, cs](const Value& it) {
        const Value& v = it.items()[pos];
        return (!cs && v.is_string()) ? Value::string(py_lower(v.str())) : v;
      }, truthy(a.get(2, "reverse"))));
    };
    m["sort"] = [](const Value& in, const CallArgs& a) {
      a.check("sort", 3, {"reverse", "case_sensitive", "attribute"});
      const auto key = attrgetter(a.get(2, "attribute"), !truthy(a.get(1, "case_sensitive")));
      return Value::list(sorted_by(iterate(in), key, truthy(a.get(0, "reverse"))));
    };
    m["unique"] = [](const Value& in, const CallArgs& a) {
      a.check("unique", 2, {"case_sensitive", "attribute"});
      const auto key = attrgetter(a.get(1, "attribute"), !truthy(a.get(0, "case_sensitive")));
      ValueList out, seen;
      for (const auto& v : iterate(in)) {
        const Value k = key(v);
        if (std::any_of(seen.begin(), seen.end(), [&](const Value& s) { return py_equal(s, k); })) continue;
        seen.push_back(k);
        out.push_back(v);
      }
      return generator(std::move(out));
    };
    m["reverse"] = [](const Value& in, const CallArgs&) {
      if (in.is_string()) {
        std::u32string u = utf8_decode(in.str());
        std::reverse(u.begin(), u.end());
        return Value::string(utf8_encode(u));
      }
      ValueList items = iterate(in);
      std::reverse(items.begin(), items.end());
      return generator(std::move(items));
    };
    m["map"] = [](const Value& in, const CallArgs& a) {
      ValueList out;
      if (a.pos.empty()) {
        bool has_attr = false;
        for (const auto& [k, v] : a.kw) has_attr = has_attr || k == "attribute";
        if (!has_attr) template_fail("map requires a filter argument");
        a.check("map", 0, {"attribute", "default"});
        const auto get = attrgetter(a.get(99, "attribute"), false, a.get(99, "default"));
        for (const auto& v : iterate(in)) out.push_back(get(v));
      } else {
        if (!a.pos[0].is_string()) template_fail("map filter name must be a string");
        const std::string name = a.pos[0].str();
        if (!has_filter(name)) template_fail("No filter named '", name, "'.");
        const CallArgs fargs = rest_args(a, 1);
        for (const auto& v : iterate(in)) out.push_back(call_filter(name, v, fargs));
      }
      return generator(std::move(out));
    };
    m["select"] = [](const Value& in, const CallArgs& a) { return select_or_reject(in, a, false, true); };
    m["reject"] = [](const Value& in, const CallArgs& a) { return select_or_reject(in, a, false, false); };
    m["selectattr"] = [](const Value& in, const CallArgs& a) { return select_or_reject(in, a, true, true); };
    m["rejectattr"] = [](const Value& in, const CallArgs& a) { return select_or_reject(in, a, true, false); };
    m["sum"] = [](const Value& in, const CallArgs& a) {
      a.check("sum", 2, {"attribute", "start"});
      const auto get = attrgetter(a.get(0, "attribute"), false);
      Value acc = a.get(1, "start", Value::integer(0));
      for (const auto& v : iterate(in)) acc = binary_op("+", acc, get(v));
      return acc;
    };
    m["min"] = [](const Value& in, const CallArgs& a) { return min_max(in, a, false); };
    m["max"] = [](const Value& in, const CallArgs& a) { return min_max(in, a, true); };
    m["indent"] = do_indent;
    m["batch"] = [](const Value& in, const CallArgs& a) {
      a.check("batch", 2, {"linecount", "fill_with"});
      const int64_t n = to_index(a.get(0, "linecount"), "linecount");
      if (n <= 0) template_fail("unsupported: batch size ", n);
      const bool fill = a.has(1, "fill_with");
      const Value filler = a.get(1, "fill_with", Value::none());
      if (fill && !filler.is_none()) check_list_items(static_cast<uint64_t>(n), "|batch fill_with");  // pads to n
      ValueList out, cur;
      for (const auto& v : iterate(in)) {
        cur.push_back(v);
        if (static_cast<int64_t>(cur.size()) == n) {
          out.push_back(Value::list(std::move(cur)));
          cur.clear();
        }
      }
      if (!cur.empty()) {
        if (fill && !filler.is_none())
          while (static_cast<int64_t>(cur.size()) < n) cur.push_back(filler);
        out.push_back(Value::list(std::move(cur)));
      }
      return generator(std::move(out));
    };
    m["safe"] = [](const Value& in, const CallArgs&) { return Value::string(to_str(in), true); };
    m["escape"] = [](const Value& in, const CallArgs&) {
      return in.is_markup() ? in : Value::string(html_escape(to_str(in)), true);
    };
    m["e"] = m["escape"];
    m["forceescape"] = [](const Value& in, const CallArgs&) { return Value::string(html_escape(to_str(in)), true); };
    m["format"] = [](const Value& in, const CallArgs& a) {
      if (!a.kw.empty()) template_fail("unsupported: |format with keyword arguments");
      return binary_op("%", Value::string(to_str(in)), Value::list(a.pos, true));
    };
    m["attr"] = [](const Value& in, const CallArgs& a) {
      a.check("attr", 1, {});
      const Value name = a.get(0, "name");
      if (!name.is_string()) template_fail("attribute name must be a string");
      // Python attribute only (no item fallback), as jinja's do_attr.
      if (in.is_dict()) {
        if (auto m = bound_method(in, name.str())) return *m;
        return Value::undefined("'dict object' has no attribute '" + name.str() + "'");
      }
      return get_attr(in, name.str());
    };
    return m;
  }();
  return f;
}

// Filters jinja2 has but this interpreter does not; using one is a clear error.
const std::unordered_set<std::string> kUnsupportedFilters = {
    "center", "filesizeformat", "groupby", "pprint", "random", "slice", "striptags", "truncate",
    "urlencode", "urlize", "wordcount", "wordwrap", "xmlattr"};

}  // namespace

bool has_filter(const std::string& name) { return filters().count(name) > 0; }

Value call_filter(const std::string& name, const Value& input, const CallArgs& args) {
  auto it = filters().find(name);
  if (it == filters().end()) {
    if (kUnsupportedFilters.count(name)) template_fail("unsupported filter '", name, "'");
    template_fail("No filter named '", name, "'.");
  }
  return it->second(input, args);
}

}  // namespace lfm::jinja
