// Jinja tests (`x is defined`, `x is string`, ...) with jinja2 3.x semantics.
#include <functional>
#include <unordered_map>

#include "chat/jinja_builtins.h"
#include "chat/jinja_strings.h"

namespace lfm::jinja {

namespace {

using TestFn = std::function<bool(const Value&, const CallArgs&)>;

Value arg0(const CallArgs& a, const char* name) {
  if (!a.has(0, name)) template_fail("test requires an argument '", name, "'");
  return a.get(0, name);
}

bool is_integer(const Value& v) { return v.is_int(); }

const std::unordered_map<std::string, TestFn>& tests() {
  static const std::unordered_map<std::string, TestFn> t = [] {
    std::unordered_map<std::string, TestFn> m;
    m["defined"] = [](const Value& v, const CallArgs&) { return !v.is_undefined(); };
    m["undefined"] = [](const Value& v, const CallArgs&) { return v.is_undefined(); };
    m["none"] = [](const Value& v, const CallArgs&) { return v.is_none(); };
    m["boolean"] = [](const Value& v, const CallArgs&) { return v.is_bool(); };
    m["true"] = [](const Value& v, const CallArgs&) { return v.is_bool() && v.as_bool(); };
    m["false"] = [](const Value& v, const CallArgs&) { return v.is_bool() && !v.as_bool(); };
    m["integer"] = [](const Value& v, const CallArgs&) { return is_integer(v); };
    m["float"] = [](const Value& v, const CallArgs&) { return v.is_float(); };
    m["number"] = [](const Value& v, const CallArgs&) { return v.is_number(); };  // bool is a Number
    m["string"] = [](const Value& v, const CallArgs&) { return v.is_string(); };
    m["mapping"] = [](const Value& v, const CallArgs&) { return v.is_dict(); };
    // Undefined defines __iter__, __len__ and __getitem__, so it is both iterable and a sequence.
    m["iterable"] = [](const Value& v, const CallArgs&) {
      return v.is_undefined() || v.is_string() || v.is_list() || v.is_dict();
    };
    m["sequence"] = [](const Value& v, const CallArgs&) {
      return v.is_undefined() || v.is_string() || v.is_dict() ||
             (v.is_list() && (v.view_kind() == Value::NoView || v.view_kind() == Value::Range));
    };
    // Undefined defines __call__ (to raise), so callable(undefined) is True in jinja2.
    m["callable"] = [](const Value& v, const CallArgs&) { return v.kind() == Kind::Callable || v.is_undefined(); };
    m["escaped"] = [](const Value& v, const CallArgs&) { return v.is_markup(); };
    m["sameas"] = [](const Value& v, const CallArgs& a) {
      const Value o = arg0(a, "other");
      if ((v.is_none() || v.is_bool()) || (o.is_none() || o.is_bool()))
        return v.kind() == o.kind() && (v.is_none() || v.as_bool() == o.as_bool());
      template_fail("unsupported: 'sameas' test on ", v.type_name(), " (object identity)");
    };
    m["in"] = [](const Value& v, const CallArgs& a) { return contains(arg0(a, "seq"), v); };
    auto eq = [](const Value& v, const CallArgs& a) { return py_equal(v, arg0(a, "other")); };
    auto ne = [](const Value& v, const CallArgs& a) { return !py_equal(v, arg0(a, "other")); };
    auto lt = [](const Value& v, const CallArgs& a) { return py_compare(v, arg0(a, "other"), "<") < 0; };
    auto le = [](const Value& v, const CallArgs& a) { return py_compare(v, arg0(a, "other"), "<=") <= 0; };
    auto gt = [](const Value& v, const CallArgs& a) { return py_compare(v, arg0(a, "other"), ">") > 0; };
    auto ge = [](const Value& v, const CallArgs& a) { return py_compare(v, arg0(a, "other"), ">=") >= 0; };
    for (const char* n : {"eq", "equalto", "=="}) m[n] = eq;
    for (const char* n : {"ne", "!="}) m[n] = ne;
    for (const char* n : {"lt", "lessthan", "<"}) m[n] = lt;
    for (const char* n : {"le", "<="}) m[n] = le;
    for (const char* n : {"gt", "greaterthan", ">"}) m[n] = gt;
    for (const char* n : {"ge", ">="}) m[n] = ge;
    m["odd"] = [](const Value& v, const CallArgs&) {
      return truthy(binary_op("%", v, Value::integer(2)));
    };
    m["even"] = [](const Value& v, const CallArgs&) {
      return !truthy(binary_op("%", v, Value::integer(2)));
    };
    m["divisibleby"] = [](const Value& v, const CallArgs& a) {
      return !truthy(binary_op("%", v, arg0(a, "num")));
    };
    m["lower"] = [](const Value& v, const CallArgs&) {
      const std::string s = to_str(v);
      return py_lower(s) == s && py_upper(s) != s;
    };
    m["upper"] = [](const Value& v, const CallArgs&) {
      const std::string s = to_str(v);
      return py_upper(s) == s && py_lower(s) != s;
    };
    m["filter"] = [](const Value& v, const CallArgs&) { return v.is_string() && has_filter(v.str()); };
    m["test"] = [](const Value& v, const CallArgs&) { return v.is_string() && has_test(v.str()); };
    return m;
  }();
  return t;
}

}  // namespace

bool has_test(const std::string& name) { return tests().count(name) > 0; }

bool call_test(const std::string& name, const Value& input, const CallArgs& args) {
  auto it = tests().find(name);
  if (it == tests().end()) template_fail("No test named '", name, "'.");
  return it->second(input, args);
}

}  // namespace lfm::jinja
