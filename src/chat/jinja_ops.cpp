// Python operators and jinja2's sandboxed attribute/item access. See jinja_builtins.h.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <unordered_set>

#include "chat/jinja_builtins.h"
#include "chat/jinja_strings.h"

namespace lfm::jinja {

namespace {

[[noreturn]] void type_error(const std::string& op, const Value& a, const Value& b) {
  template_fail("unsupported operand type(s) for ", op, ": '", a.type_name(), "' and '", b.type_name(), "'");
}

void check_defined(const Value& v) {
  if (v.is_undefined()) template_fail(undefined_message(v));
}

void check_not_markup(const Value& v, const char* what) {
  // Markup (from |safe or |escape) changes the meaning of + and % (it HTML-escapes the other
  // operand); rather than risk different output we refuse.
  if (v.is_markup()) template_fail("unsupported: ", what, " on a Markup string (from |safe or |escape)");
}

int64_t checked(bool overflow, int64_t v) {
  if (overflow) template_fail("unsupported: integer result exceeds 64 bits");
  return v;
}

Value repeat(const Value& seq, int64_t n) {
  if (n < 0) n = 0;
  // Sizes are multiplied without wrapping, and an empty sequence repeats in no time (not 2^62 loops).
  if (seq.is_string()) {
    if (seq.str().empty()) return Value::string("");
    check_string_bytes(sat_mul_add(seq.str().size(), static_cast<uint64_t>(n)), "string repetition");
    if (seq.str().size() == 1) return Value::string(std::string(static_cast<size_t>(n), seq.str()[0]));
    std::string out;
    out.reserve(seq.str().size() * static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) out += seq.str();
    return Value::string(std::move(out));
  }
  if (seq.items().empty()) return Value::list({}, seq.is_tuple());
  // n copies of each item, whatever the items hold: `[big] * n` shares `big` and costs n items.
  check_list_items(sat_mul_add(seq.items().size(), static_cast<uint64_t>(n)), "list repetition");
  ValueList out;
  out.reserve(seq.items().size() * static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) out.insert(out.end(), seq.items().begin(), seq.items().end());
  return Value::list(std::move(out), seq.is_tuple());
}

// Python's float floor division / modulo (sign follows the divisor).
double py_fmod(double a, double b) {
  double m = std::fmod(a, b);
  if (m != 0 && ((b < 0) != (m < 0))) m += b;
  else if (m == 0) m = std::copysign(0.0, b);
  return m;
}
double py_floordiv(double a, double b) {
  const double m = std::fmod(a, b);
  double div = (a - m) / b;
  if (m != 0 && ((b < 0) != (m < 0))) div -= 1.0;
  if (div != 0) {
    const double fl = std::floor(div);
    if (div - fl > 0.5) return fl + 1.0;
    return fl;
  }
  return std::copysign(0.0, a / b);
}

// printf-style `str % args` (CPython's PyUnicode_Format) for the conversions
// s r a d i u o x X e E f F g G c and %%, with flags, width and precision. Mapping keys and
// `*` widths are refused.
std::string pad_text(const std::string& s, const std::string& flags, int64_t width) {
  const auto len = static_cast<int64_t>(utf8_length(s));
  if (width <= len) return s;
  const std::string fill(static_cast<size_t>(width - len), ' ');
  return flags.find('-') != std::string::npos ? s + fill : fill + s;
}

Value percent_format(const std::string& fmt, const Value& arg) {
  const ValueList single{arg};
  const ValueList& args = arg.is_tuple() ? arg.items() : single;  // not copied: a tuple may be huge
  std::string out;
  size_t used = 0;
  for (size_t i = 0; i < fmt.size(); ++i) {
    if (fmt[i] != '%') { out.push_back(fmt[i]); continue; }
    if (++i >= fmt.size()) template_fail("incomplete format");
    if (fmt[i] == '%') { out.push_back('%'); continue; }
    if (fmt[i] == '(') template_fail("unsupported: %(name) mapping keys in string % formatting");
    std::string flags;
    while (i < fmt.size() && std::strchr("-+ #0", fmt[i]) && fmt[i]) flags.push_back(fmt[i++]);
    int64_t width = 0, prec = -1;
    if (i < fmt.size() && fmt[i] == '*') template_fail("unsupported: '*' width in string % formatting");
    // Digits accumulate saturated (a 30-digit width must not overflow before the check below).
    auto digit = [](int64_t v, char d) { return std::min<int64_t>(v * 10 + (d - '0'), 1'000'000); };
    while (i < fmt.size() && std::isdigit(static_cast<unsigned char>(fmt[i]))) width = digit(width, fmt[i++]);
    if (i < fmt.size() && fmt[i] == '.') {
      prec = 0;
      ++i;
      while (i < fmt.size() && std::isdigit(static_cast<unsigned char>(fmt[i]))) prec = digit(prec, fmt[i++]);
    }
    while (i < fmt.size() && (fmt[i] == 'h' || fmt[i] == 'l' || fmt[i] == 'L')) ++i;
    if (i >= fmt.size()) template_fail("incomplete format");
    if (width > 4096 || prec > 4096) template_fail("unsupported: width/precision above 4096 in string % formatting");
    const char c = fmt[i];
    // Each conversion adds at most width + precision + a few hundred bytes (a %s its text).
    check_string_bytes(out.size() + static_cast<uint64_t>(width + std::max<int64_t>(prec, 0) + 400), "string % formatting");
    if (!std::strchr("sradiuoxXeEfFgGc", c) || c == 0) template_fail("unsupported format character '", c, "'");
    if (used >= args.size()) template_fail("not enough arguments for format string");
    const Value& v = args[used++];
    if (v.is_undefined()) template_fail(undefined_message(v));
    std::string spec = cat('%', flags);
    if (width) spec += std::to_string(width);
    if (prec >= 0) spec += cat('.', prec);
    std::vector<char> buf(static_cast<size_t>(width + prec + 400));
    if (c == 's' || c == 'r' || c == 'a') {
      std::string text = c == 's' ? to_str(v) : repr(v);
      if (c == 'a')
        for (char ch : text)
          if (static_cast<unsigned char>(ch) >= 0x80) template_fail("unsupported: %a with non-ASCII text");
      if (prec >= 0) text = utf8_encode(utf8_decode(text).substr(0, static_cast<size_t>(prec)));
      // Many %s of one long string: the result is sized before each piece is added.
      check_string_bytes(sat_mul_add(1, out.size() + text.size(), static_cast<uint64_t>(width)), "string % formatting");
      out += pad_text(text, flags, width);
    } else if (c == 'c') {
      std::string ch;
      if (v.is_string() && utf8_length(v.str()) == 1) ch = v.str();
      else if (v.is_int() && v.as_int() >= 0 && v.as_int() <= 0x10FFFF) append_utf8(ch, static_cast<char32_t>(v.as_int()));
      else template_fail("%c requires int or char");
      out += pad_text(ch, flags, width);
    } else if (std::strchr("diuoxX", c)) {
      int64_t n;
      if (v.is_int() || v.is_bool()) n = v.as_int();
      else if (v.is_float() && (c == 'd' || c == 'i' || c == 'u')) {
        if (!std::isfinite(v.as_float()) || std::fabs(v.as_float()) >= 9.2e18) template_fail("unsupported: %d of ", to_str(v));
        n = static_cast<int64_t>(std::trunc(v.as_float()));
      } else {
        template_fail("%", c, " format: ", (c == 'd' || c == 'i' || c == 'u') ? "a real number" : "an integer",
                      " is required, not ", v.type_name());
      }
      if (c == 'o' && flags.find('#') != std::string::npos) template_fail("unsupported: %#o (Python prints 0o)");
      const char conv = c == 'i' || c == 'u' ? 'd' : c;
      if (conv == 'd') {
        std::snprintf(buf.data(), buf.size(), (spec + "lld").c_str(), static_cast<long long>(n));
      } else {
        // Python formats the sign and magnitude; C would print the two's complement.
        const unsigned long long mag = n < 0 ? 0ULL - static_cast<unsigned long long>(n) : static_cast<unsigned long long>(n);
        if (n < 0) template_fail("unsupported: %", c, " of a negative number");
        std::snprintf(buf.data(), buf.size(), (spec + "ll" + conv).c_str(), mag);
      }
      out += buf.data();
    } else {
      if (!v.is_number()) template_fail("must be real number, not ", v.type_name());
      std::snprintf(buf.data(), buf.size(), (spec + c).c_str(), v.as_float());
      out += buf.data();
    }
  }
  if (used < args.size()) template_fail("not all arguments converted during string formatting");
  check_string_bytes(out.size(), "string % formatting");
  return Value::string(std::move(out));
}

}  // namespace

std::string value_str_checked(const Value& v) { return to_str(v); }

int64_t to_index(const Value& v, const char* what) {
  if (v.is_int() || v.is_bool()) return v.as_int();
  template_fail(what, " must be an integer, not '", v.type_name(), "'");
}

Value binary_op(const std::string& op, const Value& a, const Value& b) {
  if (op == "~") {
    std::string l = to_str(a);
    const std::string r = to_str(b);
    check_string_bytes(l.size() + r.size(), "~ concatenation");
    return Value::string(std::move(l) + r);
  }
  check_defined(a);
  check_defined(b);
  const bool nums = a.is_number() && b.is_number();
  const bool floats = nums && (a.is_float() || b.is_float());
  if (op == "+") {
    if (nums) {
      if (floats) return Value::floating(a.as_float() + b.as_float());
      int64_t r = 0;
      const bool overflow = __builtin_add_overflow(a.as_int(), b.as_int(), &r);
      return Value::integer(checked(overflow, r));
    }
    if (a.is_string() && b.is_string()) {
      check_not_markup(a, "+");
      check_not_markup(b, "+");
      check_string_bytes(a.str().size() + b.str().size(), "string + (result too large)");
      return Value::string(a.str() + b.str());
    }
    if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple() && a.view_kind() == Value::NoView &&
        b.view_kind() == Value::NoView) {
      check_list_items(a.items().size() + b.items().size(), "list +");
      ValueList out;
      out.reserve(a.items().size() + b.items().size());
      out.insert(out.end(), a.items().begin(), a.items().end());
      out.insert(out.end(), b.items().begin(), b.items().end());
      return Value::list(std::move(out), a.is_tuple());
    }
    if (a.is_string() && !b.is_string()) template_fail("can only concatenate str (not \"", b.type_name(), "\") to str");
    if (a.is_list() && !a.is_tuple()) template_fail("can only concatenate list (not \"", b.type_name(), "\") to list");
    type_error("+", a, b);
  }
  if (op == "-") {
    if (!nums) type_error("-", a, b);
    if (floats) return Value::floating(a.as_float() - b.as_float());
    int64_t r = 0;
    const bool overflow = __builtin_sub_overflow(a.as_int(), b.as_int(), &r);
    return Value::integer(checked(overflow, r));
  }
  if (op == "*") {
    if (nums) {
      if (floats) return Value::floating(a.as_float() * b.as_float());
      int64_t r = 0;
      const bool overflow = __builtin_mul_overflow(a.as_int(), b.as_int(), &r);
      return Value::integer(checked(overflow, r));
    }
    const bool a_int = a.is_int() || a.is_bool(), b_int = b.is_int() || b.is_bool();
    if ((a.view_kind() != Value::NoView) || (b.view_kind() != Value::NoView)) type_error("*", a, b);
    if ((a.is_string() || a.is_list()) && b_int) {
      check_not_markup(a, "*");
      return repeat(a, b.as_int());
    }
    if ((b.is_string() || b.is_list()) && a_int) {
      check_not_markup(b, "*");
      return repeat(b, a.as_int());
    }
    type_error("*", a, b);
  }
  if (op == "/") {
    if (!nums) type_error("/", a, b);
    if (b.as_float() == 0) template_fail("division by zero");
    if (!floats) {
      // CPython divides ints exactly-rounded; doubles are exact for |values| < 2^53.
      const int64_t x = a.as_int(), y = b.as_int();
      if (std::llabs(x) > (int64_t(1) << 53) || std::llabs(y) > (int64_t(1) << 53))
        template_fail("unsupported: true division of integers beyond 2^53");
    }
    return Value::floating(a.as_float() / b.as_float());
  }
  if (op == "//" || op == "%") {
    if (op == "%" && a.is_string()) {
      check_not_markup(a, "%");
      return percent_format(a.str(), b);
    }
    if (!nums) type_error(op, a, b);
    if (b.as_float() == 0) template_fail(op == "%" ? "modulo by zero" : "integer division or modulo by zero");
    if (floats) {
      const double x = a.as_float(), y = b.as_float();
      return Value::floating(op == "%" ? py_fmod(x, y) : py_floordiv(x, y));
    }
    const int64_t x = a.as_int(), y = b.as_int();
    if (x == INT64_MIN && y == -1) template_fail("unsupported: integer result exceeds 64 bits");
    int64_t q = x / y, r = x % y;
    if (r != 0 && ((r < 0) != (y < 0))) {
      q -= 1;
      r += y;
    }
    return Value::integer(op == "%" ? r : q);
  }
  if (op == "**") {
    if (!nums) type_error("** or pow()", a, b);
    if (!floats && b.as_int() >= 0) {
      int64_t base = a.as_int(), e = b.as_int(), r = 1;
      while (e > 0) {
        if ((e & 1) && __builtin_mul_overflow(r, base, &r)) checked(true, 0);
        e >>= 1;
        if (e > 0 && __builtin_mul_overflow(base, base, &base)) checked(true, 0);
      }
      return Value::integer(r);
    }
    if (a.as_float() == 0 && b.as_float() < 0) template_fail("0.0 cannot be raised to a negative power");
    if (a.as_float() < 0 && std::floor(b.as_float()) != b.as_float())
      template_fail("unsupported: complex result of a negative number raised to a fractional power");
    const double r = std::pow(a.as_float(), b.as_float());
    if (std::isinf(r)) template_fail("(34, 'Numerical result out of range')");
    return Value::floating(r);
  }
  template_fail("jinja: unknown operator '", op, "'");
}

Value unary_op(const std::string& op, const Value& a) {
  check_defined(a);
  if (!a.is_number()) template_fail("bad operand type for unary ", op, ": '", a.type_name(), "'");
  if (op == "+") return a.is_float() ? a : Value::integer(a.as_int());
  if (a.is_float()) return Value::floating(-a.as_float());
  if (a.as_int() == INT64_MIN) template_fail("unsupported: integer result exceeds 64 bits");
  return Value::integer(-a.as_int());
}

bool contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Kind::String:
      if (!item.is_string()) template_fail("'in <string>' requires string as left operand, not ", item.type_name());
      return text_find(container.str(), item.str()) != std::string::npos;
    case Kind::List:
      if (container.is_generator()) {  // `in` consumes a generator up to the match
        for (ValueList one = container.take_generator(1); !one.empty(); one = container.take_generator(1))
          if (py_equal(one[0], item)) return true;
        return false;
      }
      for (const auto& v : container.items())
        if (py_equal(v, item)) return true;
      return false;
    case Kind::Dict: return container.dict_data().find(item) != nullptr;
    case Kind::Undefined: return false;  // Undefined iterates as empty
    default: template_fail("argument of type '", container.type_name(), "' is not iterable");
  }
}

namespace {

std::string object_type_repr(const Value& obj) {
  if (obj.is_none()) return "None";
  return obj.type_name() + " object";
}

Value missing_attr(const Value& obj, const std::string& name) {
  return Value::undefined(cat("'", object_type_repr(obj), "' has no attribute '", name, "'"));
}

// Python attributes of a value (methods, namespace attributes, loop fields).
std::optional<Value> python_attr(const Value& obj, const std::string& name) {
  if (!name.empty() && name[0] == '_')
    return Value::undefined("access to attribute '" + name + "' of '" + obj.type_name() + "' object is unsafe.");
  switch (obj.kind()) {
    case Kind::Namespace:
      if (const Value* v = obj.ns_data()->find(name)) return *v;
      return std::nullopt;
    case Kind::Object: {
      Value v = obj.object_data()->get_attr(name);
      if (v.is_undefined()) return std::nullopt;
      return v;
    }
    case Kind::Int:
    case Kind::Float:
    case Kind::Bool: {
      static const std::unordered_set<std::string> num_attrs = {
          "real", "imag", "numerator", "denominator", "conjugate", "bit_length", "bit_count", "to_bytes",
          "from_bytes", "as_integer_ratio", "is_integer", "hex", "fromhex"};
      if (num_attrs.count(name)) template_fail("unsupported: attribute '", name, "' of ", obj.type_name());
      return std::nullopt;
    }
    default: return bound_method(obj, name);
  }
}

}  // namespace

Value get_attr(const Value& obj, const std::string& name) {
  if (obj.is_undefined()) template_fail(undefined_message(obj));
  if (auto v = python_attr(obj, name)) return *v;
  if (obj.is_dict())
    if (const Value* v = obj.dict_data().find(Value::string(name))) return *v;
  return missing_attr(obj, name);
}

Value get_item(const Value& obj, const Value& key) {
  if (obj.is_undefined()) template_fail(undefined_message(obj));
  if (obj.is_dict()) {
    const bool hashable = !key.is_list() || key.is_tuple();
    if (hashable && !key.is_dict() && !key.is_undefined())
      if (const Value* v = obj.dict_data().find(key)) return *v;
  } else if (((obj.is_list() && (obj.view_kind() == Value::NoView || obj.view_kind() == Value::Range)) || obj.is_string()) &&
             (key.is_int() || key.is_bool())) {
    int64_t i = key.as_int();
    if (obj.is_list()) {
      const auto n = static_cast<int64_t>(obj.items().size());
      if (i < 0) i += n;
      if (i >= 0 && i < n) return obj.items()[static_cast<size_t>(i)];
    } else {
      const std::u32string u = utf8_decode(obj.str());
      const auto n = static_cast<int64_t>(u.size());
      if (i < 0) i += n;
      if (i >= 0 && i < n) return Value::string(utf8_encode(u.substr(static_cast<size_t>(i), 1)));
    }
    return Value::undefined(cat("'", object_type_repr(obj), "' has no element ", key.as_int()));
  }
  if (key.is_string())
    if (auto v = python_attr(obj, key.str())) return *v;
  if (key.is_string()) return missing_attr(obj, key.str());
  return Value::undefined(cat("'", object_type_repr(obj), "' has no element ", repr(key)));
}

Value slice_value(const Value& obj, const Value& start, const Value& stop, const Value& step) {
  if (obj.is_undefined()) template_fail(undefined_message(obj));
  auto opt_index = [](const Value& v, int64_t def) {
    if (v.is_undefined() || v.is_none()) return std::optional<int64_t>();
    return std::optional<int64_t>(to_index(v, "slice indices"));
    (void)def;
  };
  if ((!obj.is_list() && !obj.is_string()) || (obj.view_kind() != Value::NoView && obj.view_kind() != Value::Range))
    return Value::undefined(cat("'", object_type_repr(obj), "' is not sliceable"));
  const std::optional<int64_t> st = opt_index(step, 1);
  const int64_t stp = st.value_or(1);
  if (stp == 0) template_fail("slice step cannot be zero");
  std::u32string u;
  int64_t n;
  if (obj.is_string()) {
    u = utf8_decode(obj.str());
    n = static_cast<int64_t>(u.size());
  } else {
    n = static_cast<int64_t>(obj.items().size());
  }
  // CPython's PySlice_AdjustIndices.
  auto adjust = [&](std::optional<int64_t> v, bool is_start) {
    if (!v) return stp > 0 ? (is_start ? int64_t(0) : n) : (is_start ? n - 1 : int64_t(-1));
    int64_t i = *v;
    if (i < 0) {
      i += n;
      if (i < 0) i = stp < 0 ? -1 : 0;
    } else if (i >= n) {
      i = stp < 0 ? n - 1 : n;
    }
    return i;
  };
  const int64_t b = adjust(opt_index(start, 0), true), e = adjust(opt_index(stop, 0), false);
  // The result's length is known: checked before the index list and the result are built.
  const __int128 span = stp > 0 ? static_cast<__int128>(e) - b : static_cast<__int128>(b) - e;
  const __int128 astep = stp > 0 ? stp : -static_cast<__int128>(stp);
  const uint64_t len = span <= 0 ? 0 : static_cast<uint64_t>((span + astep - 1) / astep);
  if (obj.is_string()) check_string_bytes(sat_mul_add(len, 4), "slice");
  else check_list_items(len, "slice");
  std::vector<int64_t> idx;
  idx.reserve(len);
  for (uint64_t k = 0; k < len; ++k) idx.push_back(b + static_cast<int64_t>(k) * stp);  // never past the end
  if (obj.is_string()) {
    std::u32string out;
    for (int64_t i : idx) out.push_back(u[static_cast<size_t>(i)]);
    return Value::string(utf8_encode(out));
  }
  ValueList out;
  for (int64_t i : idx) out.push_back(obj.items()[static_cast<size_t>(i)]);
  if (obj.view_kind() == Value::Range) return Value::view(std::move(out), Value::Range);
  return Value::list(std::move(out), obj.is_tuple());
}

Value call_value(const Value& fn, const CallArgs& args) {
  if (fn.is_undefined()) template_fail(undefined_message(fn));
  if (fn.kind() != Kind::Callable) template_fail("'", fn.type_name(), "' object is not callable");
  return fn.callable_data()->fn(args);
}

}  // namespace lfm::jinja
