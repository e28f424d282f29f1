// Operators, attribute/item access, Python methods, filters, tests and globals of the Jinja
// interpreter, with the semantics of jinja2's ImmutableSandboxedEnvironment on CPython.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "chat/jinja_value.h"

namespace lfm::jinja {

// Largest list a template may build (kMaxStringBytes, for strings, is in jinja_value.h).
constexpr size_t kMaxListItems = size_t(1) << 22;

// Fails before a string of `bytes` is built: over kMaxStringBytes, or more than the work meter
// has left (see WorkMeter in jinja_value.h). Nothing is charged here: the string is charged when
// it becomes a value (or, for output, when appended). Every intermediate counts (repetition,
// zfill, indent, replace, join, format, concatenation), not only the final output: a template
// must not reach multi-GB strings on the way to a small result, nor build small ones forever.
// Builders that grow a string piece by piece pass its new total.
inline void check_string_bytes(uint64_t bytes, const char* what) {
  if (bytes > kMaxStringBytes)
    template_fail("jinja: ", what, " would build a string of ", bytes, " bytes, too large: string size limit exceeded (",
                  kMaxStringBytes, " bytes)");
  check_work(bytes);
}

// Fails before a list of `items` values is built: over kMaxListItems or the work meter.
inline void check_list_items(uint64_t items, const char* what) {
  if (items > kMaxListItems)
    template_fail("jinja: ", what, " would build a list of ", items, " items, too large: list size limit exceeded (",
                  kMaxListItems, " items)");
  check_work(sat_mul_add(items, kValueBytes, kBoxBytes));
}

// str.replace / |replace with the result's size checked before it is built.
std::string py_replace_bounded(const std::string& s, const std::string& old, const std::string& repl, int64_t count);

// ---- jinja_ops.cpp ----
Value binary_op(const std::string& op, const Value& a, const Value& b);  // + - * / // % ** ~
Value unary_op(const std::string& op, const Value& a);                   // - +
bool contains(const Value& container, const Value& item);                // `item in container`
// Sandboxed getattr (obj.name): Python attribute (methods) first, then item. Undefined when
// missing; mutating methods give an undefined that fails when called (SecurityError in jinja2).
Value get_attr(const Value& obj, const std::string& name);
// Sandboxed getitem (obj[key]): item first, then attribute for string keys.
Value get_item(const Value& obj, const Value& key);
Value slice_value(const Value& obj, const Value& start, const Value& stop, const Value& step);
// Calls a callable value; undefined and non-callables raise like jinja2.
Value call_value(const Value& fn, const CallArgs& args);

// ---- jinja_methods.cpp ----
// A bound Python method of str/dict/list (e.g. "abc".split), or nullopt when the type has no
// such attribute. Throws for real Python methods this interpreter does not implement.
std::optional<Value> bound_method(const Value& obj, const std::string& name);

// ---- jinja_filters.cpp / jinja_tests.cpp ----
bool has_filter(const std::string& name);
bool has_test(const std::string& name);
Value call_filter(const std::string& name, const Value& input, const CallArgs& args);
bool call_test(const std::string& name, const Value& input, const CallArgs& args);

// Python helpers shared by the builtins.
std::string value_str_checked(const Value& v);  // str(v), refusing markup (see jinja_ops.cpp)
int64_t to_index(const Value& v, const char* what);

}  // namespace lfm::jinja
