// Operators, attribute/item access, Python methods, filters, tests and globals of the Jinja
// interpreter, with the semantics of jinja2's ImmutableSandboxedEnvironment on CPython.
#pragma once

#include <optional>
#include <string>

#include "chat/jinja_value.h"

namespace lfm::jinja {

// Largest string or list a template may build (keeps hostile templates from eating memory).
constexpr size_t kMaxStringBytes = size_t(64) << 20;
constexpr size_t kMaxListItems = size_t(1) << 22;

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
