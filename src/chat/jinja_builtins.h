// Operators, attribute/item access, Python methods, filters, tests and globals of the Jinja
// interpreter, with the semantics of jinja2's ImmutableSandboxedEnvironment on CPython.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "chat/jinja_value.h"

namespace lfm::jinja {

// Largest string or list a template may build (keeps hostile templates from eating memory).
constexpr size_t kMaxStringBytes = size_t(64) << 20;
constexpr size_t kMaxListItems = size_t(1) << 22;

// a * b + c, saturating at UINT64_MAX: sizes are computed without wrapping before anything is built.
inline uint64_t sat_mul_add(uint64_t a, uint64_t b, uint64_t c = 0) {
  uint64_t r;
  if (__builtin_mul_overflow(a, b, &r) || __builtin_add_overflow(r, c, &r)) return UINT64_MAX;
  return r;
}

// Bytes of strings the current render may still build (RenderLimits::max_built_bytes), set by
// Template::render on its thread. The step budget counts statements and iterations; this meter
// makes the cost of a step proportional to the bytes it builds, so the render's time is bounded
// whatever each step does.
struct WorkMeter {
  uint64_t left = UINT64_MAX;
  uint64_t limit = UINT64_MAX;
};
inline thread_local WorkMeter t_work_meter;

// Fails before a string of `bytes` is built. Every intermediate counts (repetition, zfill, indent,
// replace, join, format, concatenation), not only the final output: a template must not reach
// multi-GB strings on the way to a small result, nor build small ones forever. Builders that grow
// a string piece by piece pass its new total as `bytes` and only the piece as `added` (charged).
inline void check_string_bytes(uint64_t bytes, const char* what, uint64_t added = UINT64_MAX) {
  if (bytes > kMaxStringBytes)
    template_fail("jinja: ", what, " would build a string of ", bytes, " bytes, too large: string size limit exceeded (",
                  kMaxStringBytes, " bytes)");
  if (added == UINT64_MAX) added = bytes;
  if (added > t_work_meter.left)
    template_fail("jinja: the template built more than ", t_work_meter.limit,
                  " bytes of strings in total: work limit exceeded");
  t_work_meter.left -= added;
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
