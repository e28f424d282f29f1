// The value model of the Jinja interpreter: Python's None/bool/int/float/str/list/tuple/dict,
// Jinja's Undefined and namespace, and callables (macros, globals, bound methods). Values are
// cheap to copy: containers are shared and immutable (the sandbox forbids mutating them), only a
// namespace is mutable and shared by reference, exactly like in Python.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace lfm::jinja {

// A template error (syntax, runtime, or raise_exception); what() is the message jinja2 would give.
class TemplateError : public lfm::Error {
 public:
  explicit TemplateError(const std::string& msg) : lfm::Error(msg) {}
};

template <typename... Args>
[[noreturn]] void template_fail(Args&&... args) {
  throw TemplateError(cat(std::forward<Args>(args)...));
}

class Value;
using ValueList = std::vector<Value>;
struct DictData;
struct NamespaceData;
struct CallableData;
struct ObjectData;

// a * b + c, saturating at UINT64_MAX: sizes are computed without wrapping before anything is built.
inline uint64_t sat_mul_add(uint64_t a, uint64_t b, uint64_t c = 0) {
  uint64_t r;
  if (__builtin_mul_overflow(a, b, &r) || __builtin_add_overflow(r, c, &r)) return UINT64_MAX;
  return r;
}

// ---- the per-render work and memory meters ----
// Template::render sets them on its thread (RenderLimits::max_built_bytes, ::max_live_bytes);
// outside a render they are unlimited. The work meter bounds a render's time (and, since nothing
// is freed from it, memory as well, loosely):
// - every value built is charged when it is created, whatever built it: a string its bytes, a
//   list kValueBytes per item, a dict twice that per entry, each plus kBoxBytes (Value::string,
//   ::list, ::view, ::dict, ::undefined; scopes, bindings, closures, loops and namespaces in the
//   evaluator). Builders whose size is known in advance check it before building (check_work).
// - work that builds nothing charges too: comparisons and hashing per element visited
//   (kVisitCost), text scans (UTF-8 decoding, searching) per byte read, name lookups per entry.
// Shared containers (`[x] * n`) cost their n items, not x's size, which is also what they occupy;
// walking the sharing (tojson, repr, ==) charges per byte written or element visited, so
// exponential blow-ups through sharing stop at the limit too.
// The memory meter bounds what a render holds at once: the same charge for each string, list and
// dict value is added to `live` when the value is created and given back when its last copy is
// destroyed (a LiveCharge shared by the copies), so a list doubled in a namespace stops at
// max_live_bytes held, far below the work limit.
struct WorkMeter {
  uint64_t left = UINT64_MAX;
  uint64_t limit = UINT64_MAX;
  uint64_t live = 0;
  uint64_t max_live = UINT64_MAX;
  uint64_t epoch = 0;  // the render these counts belong to (values outliving it give nothing back)
};
inline thread_local WorkMeter t_work_meter;

// The memory charge of one value's contents, given back when the last copy lets go of it.
struct LiveCharge {
  uint64_t bytes;
  uint64_t epoch;
  LiveCharge(uint64_t b, uint64_t e) : bytes(b), epoch(e) {}
  ~LiveCharge() {
    if (t_work_meter.epoch == epoch) t_work_meter.live -= bytes;
  }
  LiveCharge(const LiveCharge&) = delete;
  LiveCharge& operator=(const LiveCharge&) = delete;
};

[[noreturn]] void work_limit_exceeded();
// Charges `units` of work and holds as much memory until the returned charge is released (null
// outside a render). Fails when either meter would go over its limit.
std::shared_ptr<const LiveCharge> charge_value(uint64_t units);
// Fails unless `units` more fit the meter (nothing charged): for builders that know their size.
inline void check_work(uint64_t units) {
  if (units > t_work_meter.left) work_limit_exceeded();
}
// Charges `units`, failing when the meter would go below zero.
inline void charge_work(uint64_t units) {
  check_work(units);
  t_work_meter.left -= units;
}

// Largest string a template may build (keeps hostile templates from eating memory); enforced
// where a string value is created and checked in advance by builders that know their size.
constexpr size_t kMaxStringBytes = size_t(64) << 20;
// Bytes charged for one shared allocation (control block and object header) and per element
// compared, hashed or scanned without being copied.
constexpr uint64_t kBoxBytes = 48;
constexpr uint64_t kVisitCost = 8;

// Deepest nesting of lists/dicts a value may have. Keeps repr/json/destruction recursion bounded
// (CPython would raise RecursionError somewhere around here too).
constexpr int kMaxValueDepth = 512;

enum class Kind : uint8_t { Undefined, None, Bool, Int, Float, String, List, Dict, Namespace, Callable, Object };

class Value {
 public:
  Value() : kind_(Kind::Undefined) {}
  static Value undefined(std::string hint = {});
  static Value none();
  static Value boolean(bool b);
  static Value integer(int64_t i);
  static Value floating(double d);
  static Value string(std::string s, bool markup = false);
  static Value list(ValueList items, bool tuple = false);
  // dict.keys()/values()/items() results: iterate like lists, print like dict_keys([...]).
  // Generator: the lazy results of |map, |select, |reverse, ...: always true, no len(), no
  // indexing, and consumed by iteration (a second loop sees nothing), as in CPython.
  // Range: range() results; indexable and re-iterable, but printing one is refused because
  // CPython prints "range(a, b)" rather than the items.
  enum View : uint8_t { NoView = 0, KeysView, ValuesView, ItemsView, Generator, Range };
  static Value view(ValueList items, View kind);
  bool is_generator() const { return view_kind() == Generator; }
  // Takes up to n not-yet-consumed items of a generator, advancing its position.
  ValueList take_generator(size_t n) const;
  static Value dict(std::shared_ptr<DictData> d);
  static Value ns(std::shared_ptr<NamespaceData> n);
  static Value callable(std::shared_ptr<CallableData> c);
  static Value object(std::shared_ptr<ObjectData> o);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::Undefined; }
  bool is_none() const { return kind_ == Kind::None; }
  bool is_bool() const { return kind_ == Kind::Bool; }
  bool is_int() const { return kind_ == Kind::Int; }
  bool is_float() const { return kind_ == Kind::Float; }
  bool is_number() const { return kind_ == Kind::Int || kind_ == Kind::Float || kind_ == Kind::Bool; }
  bool is_string() const { return kind_ == Kind::String; }
  bool is_list() const { return kind_ == Kind::List; }
  bool is_tuple() const { return kind_ == Kind::List && tuple_; }
  bool is_dict() const { return kind_ == Kind::Dict; }
  bool is_markup() const { return kind_ == Kind::String && markup_; }
  View view_kind() const { return kind_ == Kind::List ? view_ : NoView; }

  bool as_bool() const { return b_; }
  int64_t as_int() const { return kind_ == Kind::Bool ? (b_ ? 1 : 0) : i_; }  // bool is an int in Python
  double as_float() const { return kind_ == Kind::Float ? f_ : static_cast<double>(as_int()); }
  const std::string& str() const { return *s_; }
  const ValueList& items() const { return *l_; }
  const DictData& dict_data() const { return *d_; }
  const std::shared_ptr<NamespaceData>& ns_data() const { return n_; }
  const std::shared_ptr<CallableData>& callable_data() const { return c_; }
  const std::shared_ptr<ObjectData>& object_data() const { return o_; }
  const std::string& undefined_hint() const { return *s_; }
  int depth() const { return depth_; }

  // Python's type name, for error messages ("str", "list", "dict", "NoneType", ...).
  std::string type_name() const;

 private:
  Kind kind_;
  bool b_ = false, tuple_ = false, markup_ = false;
  View view_ = NoView;
  uint16_t depth_ = 0;  // container nesting below this value
  std::shared_ptr<size_t> gen_pos_;  // shared by copies, like a Python generator object
  int64_t i_ = 0;
  double f_ = 0;
  std::shared_ptr<const std::string> s_;  // string text or undefined hint
  std::shared_ptr<const ValueList> l_;
  std::shared_ptr<const DictData> d_;
  std::shared_ptr<NamespaceData> n_;
  std::shared_ptr<CallableData> c_;
  std::shared_ptr<ObjectData> o_;
  std::shared_ptr<const LiveCharge> live_;  // the memory its string, list or dict holds
};

// Charged per list item built (a dict entry costs two).
constexpr uint64_t kValueBytes = sizeof(Value);

// An insertion-ordered dict (Python 3.7+ semantics).
struct DictData {
  std::vector<std::pair<Value, Value>> entries;
  const Value* find(const Value& key) const;
  void set(Value key, Value value);  // used only while building a dict
};

// namespace(): the one mutable object a sandboxed template may change (via set ns.attr = ...).
struct NamespaceData {
  std::vector<std::pair<std::string, Value>> attrs;
  const Value* find(const std::string& name) const;
  void set(const std::string& name, Value value);
};

// Positional and keyword arguments of a call.
struct CallArgs {
  ValueList pos;
  std::vector<std::pair<std::string, Value>> kw;
  // Fetches parameter `name` at position `index`, or `def` when absent. Throws on duplicates.
  Value get(size_t index, const char* name, const Value& def = Value()) const;
  bool has(size_t index, const char* name) const;
  // Throws unless every argument was one of the first `npos` positionals or a listed keyword.
  void check(const char* fn, size_t npos, std::initializer_list<const char*> kw_names) const;
};

struct CallableData {
  std::string name;
  std::string kind;  // "macro", "function", "method"
  std::function<Value(const CallArgs&)> fn;
};

// A read-only object with computed attributes (the `loop` variable, cycler, ...).
struct ObjectData {
  virtual ~ObjectData() = default;
  virtual std::string type_name() const = 0;
  virtual Value get_attr(const std::string& name) = 0;  // undefined when missing
};

Value make_callable(std::string name, std::string kind, std::function<Value(const CallArgs&)> fn);
Value make_dict(std::vector<std::pair<Value, Value>> entries);

// Python semantics.
bool truthy(const Value& v);
std::string to_str(const Value& v);  // str(v)
std::string repr(const Value& v);    // repr(v)
bool py_equal(const Value& a, const Value& b);
int py_compare(const Value& a, const Value& b, const char* op);  // <0, 0, >0; throws on TypeError
int64_t py_len(const Value& v);       // len(); throws for unsized values
ValueList iterate(const Value& v);    // iter(); undefined iterates as empty; throws otherwise
std::string undefined_message(const Value& v);

// JSON interop. from_json keeps key order (ordered_json); to_json_text is json.dumps.
Value from_json(const nlohmann::ordered_json& j);
struct JsonDumpOptions {
  bool ensure_ascii = false;
  bool has_indent = false;
  std::string indent;                 // one level of indentation
  std::string item_sep = ", ", key_sep = ": ";
  bool sort_keys = false;
};
std::string to_json_text(const Value& v, const JsonDumpOptions& opt);

}  // namespace lfm::jinja
