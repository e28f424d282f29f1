// Python semantics of the Jinja value model. See jinja_value.h.
#include "chat/jinja_value.h"

#include <algorithm>
#include <cmath>

#include "chat/jinja_strings.h"

namespace lfm::jinja {

void work_limit_exceeded() {
  template_fail("jinja: the template built or scanned more than ", t_work_meter.limit,
                " bytes in total (strings, lists, dicts, scopes; comparisons and scans count too): work limit exceeded");
}

std::shared_ptr<const LiveCharge> charge_value(uint64_t units) {
  charge_work(units);
  WorkMeter& m = t_work_meter;
  if (m.limit == UINT64_MAX) return nullptr;
  if (units > m.max_live - m.live)
    template_fail("jinja: the template holds more than ", m.max_live,
                  " bytes of strings, lists and dicts at once: memory limit exceeded");
  m.live += units;
  return std::make_shared<const LiveCharge>(units, m.epoch);
}

namespace {

// A string value of n bytes is being created: charged, and refused above kMaxStringBytes, while
// a render runs (values made from the input before it are not limited here).
std::shared_ptr<const LiveCharge> charge_string(size_t n) {
  if (t_work_meter.limit == UINT64_MAX) return nullptr;
  if (n > kMaxStringBytes)
    template_fail("jinja: a string of ", n, " bytes is too large: string size limit exceeded (", kMaxStringBytes, " bytes)");
  return charge_value(kBoxBytes + n);
}

}  // namespace

Value Value::undefined(std::string hint) {
  Value v;
  v.live_ = charge_string(hint.size());
  v.kind_ = Kind::Undefined;
  v.s_ = std::make_shared<const std::string>(std::move(hint));
  return v;
}
Value Value::none() {
  Value v;
  v.kind_ = Kind::None;
  return v;
}
Value Value::boolean(bool b) {
  Value v;
  v.kind_ = Kind::Bool;
  v.b_ = b;
  return v;
}
Value Value::integer(int64_t i) {
  Value v;
  v.kind_ = Kind::Int;
  v.i_ = i;
  return v;
}
Value Value::floating(double d) {
  Value v;
  v.kind_ = Kind::Float;
  v.f_ = d;
  return v;
}
Value Value::string(std::string s, bool markup) {
  Value v;
  v.live_ = charge_string(s.size());
  v.kind_ = Kind::String;
  v.markup_ = markup;
  v.s_ = std::make_shared<const std::string>(std::move(s));
  return v;
}
static uint16_t nested_depth(int child_depth) {
  if (child_depth + 1 > kMaxValueDepth) template_fail("jinja: value nesting too deep (limit ", kMaxValueDepth, ")");
  return static_cast<uint16_t>(child_depth + 1);
}

Value Value::list(ValueList items, bool tuple) {
  Value v;
  v.live_ = charge_value(sat_mul_add(items.size(), kValueBytes, kBoxBytes));
  int d = 0;
  for (const auto& it : items) d = std::max(d, it.depth());
  v.depth_ = nested_depth(d);
  v.kind_ = Kind::List;
  v.tuple_ = tuple;
  v.l_ = std::make_shared<const ValueList>(std::move(items));
  return v;
}
Value Value::view(ValueList items, View kind) {
  Value v = list(std::move(items));
  v.view_ = kind;
  if (kind == Generator) v.gen_pos_ = std::make_shared<size_t>(0);
  return v;
}

ValueList Value::take_generator(size_t n) const {
  const size_t begin = *gen_pos_, end = n >= l_->size() - begin ? l_->size() : begin + n;
  charge_work(sat_mul_add(end - begin, kValueBytes, kBoxBytes));  // before copying
  *gen_pos_ = end;
  return ValueList(l_->begin() + static_cast<std::ptrdiff_t>(begin), l_->begin() + static_cast<std::ptrdiff_t>(end));
}

Value Value::dict(std::shared_ptr<DictData> d) {
  Value v;
  v.kind_ = Kind::Dict;
  v.live_ = charge_value(sat_mul_add(d->entries.size(), 2 * kValueBytes, kBoxBytes));
  int depth = 0;
  for (const auto& [k, val] : d->entries) depth = std::max({depth, k.depth(), val.depth()});
  v.depth_ = nested_depth(depth);
  v.d_ = std::move(d);
  return v;
}
Value Value::ns(std::shared_ptr<NamespaceData> n) {
  Value v;
  v.kind_ = Kind::Namespace;
  v.n_ = std::move(n);
  return v;
}
Value Value::callable(std::shared_ptr<CallableData> c) {
  Value v;
  v.kind_ = Kind::Callable;
  v.c_ = std::move(c);
  return v;
}
Value Value::object(std::shared_ptr<ObjectData> o) {
  Value v;
  v.kind_ = Kind::Object;
  v.o_ = std::move(o);
  return v;
}

std::string Value::type_name() const {
  switch (kind_) {
    case Kind::Undefined: return "Undefined";
    case Kind::None: return "NoneType";
    case Kind::Bool: return "bool";
    case Kind::Int: return "int";
    case Kind::Float: return "float";
    case Kind::String: return markup_ ? "Markup" : "str";
    case Kind::List:
      if (view_ == Generator) return "generator";
      if (view_ == Range) return "range";
      if (view_ != NoView) return view_ == KeysView ? "dict_keys" : view_ == ValuesView ? "dict_values" : "dict_items";
      return tuple_ ? "tuple" : "list";
    case Kind::Dict: return "dict";
    case Kind::Namespace: return "Namespace";
    case Kind::Callable: return c_->kind == "macro" ? "Macro" : "builtin_function_or_method";
    case Kind::Object: return o_->type_name();
  }
  return "object";
}

static bool hashable(const Value& k) {
  charge_work(kVisitCost);  // recursive over (possibly shared) tuples
  if (k.is_tuple()) return std::all_of(k.items().begin(), k.items().end(), hashable);
  return k.kind() != Kind::List && k.kind() != Kind::Dict && k.kind() != Kind::Undefined;
}

const Value* DictData::find(const Value& key) const {
  for (const auto& [k, v] : entries)
    if (py_equal(k, key)) return &v;
  return nullptr;
}

void DictData::set(Value key, Value value) {
  if (!hashable(key))
    template_fail("unhashable type: '", key.type_name(), "'");
  for (auto& [k, v] : entries)
    if (py_equal(k, key)) {
      v = std::move(value);
      return;
    }
  entries.emplace_back(std::move(key), std::move(value));
}

const Value* NamespaceData::find(const std::string& name) const {
  charge_work(attrs.size());  // a namespace made from a long dict is scanned at every access
  for (const auto& [k, v] : attrs)
    if (k == name) return &v;
  return nullptr;
}

void NamespaceData::set(const std::string& name, Value value) {
  charge_work(attrs.size());
  for (auto& [k, v] : attrs)
    if (k == name) {
      v = std::move(value);
      return;
    }
  charge_work(sizeof(std::pair<std::string, Value>) + name.size());
  attrs.emplace_back(name, std::move(value));
}

Value CallArgs::get(size_t index, const char* name, const Value& def) const {
  const Value* by_kw = nullptr;
  for (const auto& [k, v] : kw)
    if (k == name) by_kw = &v;
  if (index < pos.size()) {
    if (by_kw) template_fail("got multiple values for argument '", name, "'");
    return pos[index];
  }
  return by_kw ? *by_kw : def;
}

bool CallArgs::has(size_t index, const char* name) const {
  if (index < pos.size()) return true;
  for (const auto& [k, v] : kw)
    if (k == name) return true;
  return false;
}

void CallArgs::check(const char* fn, size_t npos, std::initializer_list<const char*> kw_names) const {
  if (pos.size() > npos) template_fail(fn, "() takes at most ", npos, " positional argument(s) (", pos.size(), " given)");
  for (const auto& [k, v] : kw) {
    bool ok = false;
    for (const char* n : kw_names) ok = ok || k == n;
    if (!ok) template_fail(fn, "() got an unexpected keyword argument '", k, "'");
  }
}

Value make_callable(std::string name, std::string kind, std::function<Value(const CallArgs&)> fn) {
  auto c = std::make_shared<CallableData>();
  c->name = std::move(name);
  c->kind = std::move(kind);
  c->fn = std::move(fn);
  return Value::callable(std::move(c));
}

Value make_dict(std::vector<std::pair<Value, Value>> entries) {
  auto d = std::make_shared<DictData>();
  for (auto& [k, v] : entries) d->set(std::move(k), std::move(v));
  return Value::dict(std::move(d));
}

bool truthy(const Value& v) {
  switch (v.kind()) {
    case Kind::Undefined:
    case Kind::None: return false;
    case Kind::Bool: return v.as_bool();
    case Kind::Int: return v.as_int() != 0;
    case Kind::Float: return v.as_float() != 0.0;
    case Kind::String: return !v.str().empty();
    case Kind::List: return v.is_generator() || !v.items().empty();
    case Kind::Dict: return !v.dict_data().entries.empty();
    default: return true;
  }
}

namespace {

// Text written while walking a value (repr, json.dumps) is charged as it grows and refused past
// kMaxStringBytes: a structure shared many times over (l = [s] * 1000; [l] * 1000; ...) is small
// in memory but prints exponentially much, and must stop at the limits, not run for hours.
struct TextMeter {
  size_t charged = 0;
  // Called before each element is written (charged as a visit plus the text written since);
  // `next` is the size of a leaf about to be appended.
  void settle(const std::string& out, size_t next = 0) {
    if (out.size() + next > kMaxStringBytes)
      template_fail("jinja: printing a value would build a string of more than ", kMaxStringBytes,
                    " bytes: string size limit exceeded");
    charge_work(kVisitCost + out.size() - charged);
    charged = out.size();
    check_work(next);
  }
};

// repr() with CPython's recursion marker for a namespace that contains itself and a depth bound
// for chains built through namespaces (whose nesting is not tracked by Value::depth).
struct ReprState {
  std::vector<const NamespaceData*> active;
  int depth = 0;
  TextMeter meter;
};

void repr_at(const Value& v, ReprState& st, std::string& out) {
  if (++st.depth > 2 * kMaxValueDepth) template_fail("jinja: value nesting too deep to print");
  struct Leave {
    ReprState& s;
    ~Leave() { --s.depth; }
  } leave{st};
  st.meter.settle(out, v.is_string() ? v.str().size() : 0);
  switch (v.kind()) {
    case Kind::Undefined: out += "Undefined"; return;
    case Kind::String:
      if (v.is_markup()) out += "Markup(" + py_repr_str(v.str()) + ")";
      else out += py_repr_str(v.str());
      return;
    case Kind::List: {
      if (v.is_generator()) template_fail("unsupported: converting a generator to a string (CPython prints its address)");
      if (v.view_kind() == Value::Range) template_fail("unsupported: converting a range object to a string");
      if (v.view_kind() != Value::NoView) {
        // dict_keys([...]) etc.: reuse the list repr of the same items.
        out += v.type_name() + "(";
        repr_at(Value::list(v.items()), st, out);
        out += ")";
        return;
      }
      out += v.is_tuple() ? "(" : "[";
      const auto& items = v.items();
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += ", ";
        repr_at(items[i], st, out);
      }
      if (v.is_tuple() && items.size() == 1) out += ",";
      out += v.is_tuple() ? ")" : "]";
      return;
    }
    case Kind::Dict: {
      out += "{";
      bool first = true;
      for (const auto& [k, val] : v.dict_data().entries) {
        if (!first) out += ", ";
        repr_at(k, st, out);
        out += ": ";
        repr_at(val, st, out);
        first = false;
      }
      out += "}";
      return;
    }
    case Kind::Namespace: {
      const NamespaceData* self = v.ns_data().get();
      if (std::find(st.active.begin(), st.active.end(), self) != st.active.end()) {
        out += "<Namespace {...}>";
        return;
      }
      st.active.push_back(self);
      out += "<Namespace {";
      bool first = true;
      for (const auto& [k, val] : v.ns_data()->attrs) {
        out += (first ? "" : ", ") + py_repr_str(k) + ": ";
        repr_at(val, st, out);
        first = false;
      }
      st.active.pop_back();
      out += "}>";
      return;
    }
    case Kind::Callable:
      if (v.callable_data()->kind == "macro") {
        out += "<Macro " + py_repr_str(v.callable_data()->name) + ">";
        return;
      }
      // CPython prints a memory address here; we cannot reproduce it, so refuse.
      template_fail("unsupported: converting the callable '", v.callable_data()->name, "' to a string");
    case Kind::Object:
      template_fail("unsupported: converting a '", v.type_name(), "' object to a string");
    default: out += to_str(v); return;
  }
}

}  // namespace

std::string repr(const Value& v) {
  ReprState st;
  std::string out;
  repr_at(v, st, out);
  st.meter.settle(out);
  return out;
}

std::string to_str(const Value& v) {
  switch (v.kind()) {
    case Kind::Undefined: return "";
    case Kind::None: return "None";
    case Kind::Bool: return v.as_bool() ? "True" : "False";
    case Kind::Int: return std::to_string(v.as_int());
    case Kind::Float: return py_float_repr(v.as_float());
    case Kind::String: return v.str();
    default: return repr(v);
  }
}

bool py_equal(const Value& a, const Value& b) {
  charge_work(kVisitCost);  // per element visited: nested (shared) containers compare in bounded time
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_float() == b.as_float();
    return a.as_int() == b.as_int();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Kind::Undefined:
    case Kind::None: return true;
    case Kind::String:
      if (a.str().size() != b.str().size()) return false;
      charge_work(a.str().size());
      return a.str() == b.str();
    case Kind::List: {
      if (a.is_generator() || b.is_generator()) return &a.items() == &b.items();
      // The same list object: CPython's identity shortcut (its elements are identical too).
      if (&a.items() == &b.items() && a.is_tuple() == b.is_tuple() && a.view_kind() == b.view_kind()) return true;
      if (a.is_tuple() != b.is_tuple() || a.view_kind() != b.view_kind() || a.items().size() != b.items().size())
        return false;
      for (size_t i = 0; i < a.items().size(); ++i)
        if (!py_equal(a.items()[i], b.items()[i])) return false;
      return true;
    }
    case Kind::Dict: {
      const auto& ea = a.dict_data().entries;
      if (&a.dict_data() == &b.dict_data()) return true;
      if (ea.size() != b.dict_data().entries.size()) return false;
      for (const auto& [k, val] : ea) {
        const Value* other = b.dict_data().find(k);
        if (!other || !py_equal(val, *other)) return false;
      }
      return true;
    }
    case Kind::Namespace: return a.ns_data() == b.ns_data();
    case Kind::Callable: return a.callable_data() == b.callable_data();
    case Kind::Object: return a.object_data() == b.object_data();
    default: return false;
  }
}

int py_compare(const Value& a, const Value& b, const char* op) {
  charge_work(kVisitCost);
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) {
      const double x = a.as_float(), y = b.as_float();
      return x < y ? -1 : (x > y ? 1 : 0);
    }
    const int64_t x = a.as_int(), y = b.as_int();
    return x < y ? -1 : (x > y ? 1 : 0);
  }
  if (a.is_undefined() || b.is_undefined()) template_fail(undefined_message(a.is_undefined() ? a : b));
  if (a.is_string() && b.is_string()) {
    charge_work(std::min(a.str().size(), b.str().size()));
    return a.str().compare(b.str()) < 0 ? -1 : (a.str() == b.str() ? 0 : 1);
  }
  if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple()) {
    const auto &x = a.items(), &y = b.items();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (py_equal(x[i], y[i])) continue;
      return py_compare(x[i], y[i], op);
    }
    return x.size() < y.size() ? -1 : (x.size() > y.size() ? 1 : 0);
  }
  template_fail("'", op, "' not supported between instances of '", a.type_name(), "' and '", b.type_name(), "'");
}

int64_t py_len(const Value& v) {
  switch (v.kind()) {
    case Kind::Undefined: return 0;
    case Kind::String: return static_cast<int64_t>(utf8_length(v.str()));
    case Kind::List:
      if (v.is_generator()) template_fail("object of type 'generator' has no len()");
      return static_cast<int64_t>(v.items().size());
    case Kind::Dict: return static_cast<int64_t>(v.dict_data().entries.size());
    default: template_fail("object of type '", v.type_name(), "' has no len()");
  }
}

ValueList iterate(const Value& v) {
  switch (v.kind()) {
    case Kind::Undefined: return {};
    case Kind::List:
      if (v.is_generator()) return v.take_generator(SIZE_MAX);
      charge_work(sat_mul_add(v.items().size(), kValueBytes, kBoxBytes));  // the copy, before it is made
      return v.items();
    case Kind::String: {
      charge_work(sat_mul_add(utf8_length(v.str()), kValueBytes, kBoxBytes));  // each character is charged as a string too
      ValueList out;
      for (char32_t c : utf8_decode(v.str())) {
        std::string s;
        append_utf8(s, c);
        out.push_back(Value::string(std::move(s)));
      }
      return out;
    }
    case Kind::Dict: {
      charge_work(sat_mul_add(v.dict_data().entries.size(), kValueBytes, kBoxBytes));
      ValueList out;
      for (const auto& [k, val] : v.dict_data().entries) out.push_back(k);
      return out;
    }
    default: template_fail("'", v.type_name(), "' object is not iterable");
  }
}

std::string undefined_message(const Value& v) {
  const std::string& hint = v.undefined_hint();
  return hint.empty() ? std::string("value is undefined") : hint;
}

static Value from_json_at(const nlohmann::ordered_json& j, int depth);

Value from_json(const nlohmann::ordered_json& j) { return from_json_at(j, 0); }

static Value from_json_at(const nlohmann::ordered_json& j, int depth) {
  if (depth > kMaxValueDepth) fail("jinja: input JSON nesting too deep (limit ", kMaxValueDepth, ")");
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null: return Value::none();
    case nlohmann::ordered_json::value_t::boolean: return Value::boolean(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer: return Value::integer(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      const uint64_t u = j.get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX)) fail("jinja: integer ", u, " in the input is too large (limit 2^63-1)");
      return Value::integer(static_cast<int64_t>(u));
    }
    case nlohmann::ordered_json::value_t::number_float: return Value::floating(j.get<double>());
    case nlohmann::ordered_json::value_t::string: return Value::string(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      ValueList items;
      items.reserve(j.size());
      for (const auto& e : j) items.push_back(from_json_at(e, depth + 1));
      return Value::list(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      auto d = std::make_shared<DictData>();
      d->entries.reserve(j.size());
      // JSON objects have unique string keys, so entries can be appended directly.
      for (auto it = j.begin(); it != j.end(); ++it) d->entries.emplace_back(Value::string(it.key()), from_json_at(it.value(), depth + 1));
      return Value::dict(std::move(d));
    }
    default: fail("jinja: unsupported JSON value of type ", j.type_name());
  }
}

namespace {

std::string json_key(const Value& k) {
  switch (k.kind()) {
    case Kind::String: return k.str();
    case Kind::Int: return std::to_string(k.as_int());
    case Kind::Bool: return k.as_bool() ? "true" : "false";
    case Kind::None: return "null";
    case Kind::Float: return py_float_repr(k.as_float());  // json uses float.__repr__ for keys
    default: template_fail("keys must be str, int, float, bool or None, not ", k.type_name());
  }
}

void dump(const Value& v, const JsonDumpOptions& opt, int level, std::string& out, TextMeter& meter) {
  if (level > 2 * kMaxValueDepth) template_fail("jinja: value nesting too deep to print");
  meter.settle(out, v.is_string() ? v.str().size() : 0);
  auto newline = [&](int lvl) {
    meter.settle(out, sat_mul_add(static_cast<uint64_t>(lvl), opt.indent.size(), 1));  // a long indent string
    out.push_back('\n');
    for (int i = 0; i < lvl; ++i) out += opt.indent;
  };
  switch (v.kind()) {
    case Kind::None: out += "null"; return;
    case Kind::Bool: out += v.as_bool() ? "true" : "false"; return;
    case Kind::Int: out += std::to_string(v.as_int()); return;
    case Kind::Float: {
      const double d = v.as_float();
      if (std::isnan(d)) out += "NaN";
      else if (std::isinf(d)) out += d > 0 ? "Infinity" : "-Infinity";
      else out += py_float_repr(d);
      return;
    }
    case Kind::String: out += json_quote(v.str(), opt.ensure_ascii); return;
    case Kind::List: {
      if (v.view_kind() != Value::NoView) template_fail("Object of type ", v.type_name(), " is not JSON serializable");
      const auto& items = v.items();
      if (items.empty()) { out += "[]"; return; }
      out.push_back('[');
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += opt.item_sep;
        if (opt.has_indent) newline(level + 1);
        dump(items[i], opt, level + 1, out, meter);
      }
      if (opt.has_indent) newline(level);
      out.push_back(']');
      return;
    }
    case Kind::Dict: {
      std::vector<const std::pair<Value, Value>*> entries;
      for (const auto& e : v.dict_data().entries) entries.push_back(&e);
      if (entries.empty()) { out += "{}"; return; }
      if (opt.sort_keys)
        std::stable_sort(entries.begin(), entries.end(),
                         [](const auto* a, const auto* b) { return py_compare(a->first, b->first, "<") < 0; });
      out.push_back('{');
      for (size_t i = 0; i < entries.size(); ++i) {
        if (i) out += opt.item_sep;
        if (opt.has_indent) newline(level + 1);
        out += json_quote(json_key(entries[i]->first), opt.ensure_ascii);
        out += opt.key_sep;
        dump(entries[i]->second, opt, level + 1, out, meter);
      }
      if (opt.has_indent) newline(level);
      out.push_back('}');
      return;
    }
    default: template_fail("Object of type ", v.type_name(), " is not JSON serializable");
  }
}

}  // namespace

std::string to_json_text(const Value& v, const JsonDumpOptions& opt) {
  std::string out;
  TextMeter meter;
  dump(v, opt, 0, out, meter);
  meter.settle(out);
  return out;
}

}  // namespace lfm::jinja
