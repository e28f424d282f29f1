#include "chat/pythonic_call_parser.h"

#include <charconv>
#include <cmath>
#include <cstdint>
#include <string>

#include "core/error.h"

namespace lfm::chat {
namespace {

using ojson = nlohmann::ordered_json;

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_ident_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_ident_char(char c) { return is_ident_start(c) || is_digit(c) || c == '-'; }
bool is_bare_key_char(char c) { return is_ident_char(c) || c == '.' || c == '+'; }

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

constexpr uint32_t kReplacementChar = 0xFFFD;

class CallParser {
 public:
  CallParser(std::string_view text, int max_depth) : text_(text), max_depth_(max_depth) {}

  std::vector<ParsedToolCall> parse_block() {
    std::vector<ParsedToolCall> calls;
    skip_ws();
    if (at_end()) error("empty tool call block");
    if (peek() == '[') {
      ++pos_;
      while (true) {
        skip_ws();
        if (consume(']')) break;
        calls.push_back(parse_call_item(1));
        skip_ws();
        if (consume(',')) continue;
        expect(']');
        break;
      }
    } else {
      while (true) {
        calls.push_back(parse_call_item(1));
        skip_ws();
        if (!consume(',')) break;
        skip_ws();
        if (at_end()) break;  // tolerate a trailing comma
      }
    }
    skip_ws();
    if (!at_end()) error("unexpected text after the tool calls");
    return calls;
  }

  // Parses the whole text as one value (used for "arguments" given as a JSON string).
  ojson parse_whole_value(int depth) {
    ojson value = parse_value(depth);
    skip_ws();
    if (!at_end()) error("unexpected text after the value");
    return value;
  }

 private:
  [[noreturn]] void error(const char* what) const { fail("tool call parser: ", what, " at offset ", pos_); }

  bool at_end() const { return pos_ >= text_.size(); }
  char peek(size_t ahead = 0) const { return pos_ + ahead < text_.size() ? text_[pos_ + ahead] : '\0'; }
  void skip_ws() {
    while (!at_end() && is_space(text_[pos_])) ++pos_;
  }
  bool consume(char c) {
    if (at_end() || text_[pos_] != c) return false;
    ++pos_;
    return true;
  }
  void expect(char c) {
    if (!consume(c)) fail("tool call parser: expected '", c, "' at offset ", pos_);
  }
  void check_depth(int depth) const {
    if (depth > max_depth_) error("nesting too deep");
  }

  // One element of the top-level list: a Pythonic call or a JSON {"name", "arguments"} object.
  ParsedToolCall parse_call_item(int depth) {
    skip_ws();
    if (peek() == '{') return call_from_object(parse_dict(depth), depth);
    if (is_ident_start(peek())) return parse_call(depth);
    error("expected a function call");
  }

  ParsedToolCall parse_call(int depth) {
    check_depth(depth);
    ParsedToolCall call;
    call.name = parse_dotted_name();
    skip_ws();
    expect('(');
    call.arguments = parse_arguments(depth);
    return call;
  }

  std::string parse_identifier() {
    if (!is_ident_start(peek())) error("expected an identifier");
    size_t start = pos_;
    while (!at_end() && is_ident_char(text_[pos_])) ++pos_;
    return std::string(text_.substr(start, pos_ - start));
  }

  std::string parse_dotted_name() {
    std::string name = parse_identifier();
    while (peek() == '.' && is_ident_start(peek(1))) {
      ++pos_;
      name += '.';
      name += parse_identifier();
    }
    return name;
  }

  // Arguments after the opening '(' up to and including the closing ')'.
  ojson parse_arguments(int depth) {
    ojson args = ojson::object();
    size_t positional_count = 0;
    bool seen_keyword = false;
    while (true) {
      skip_ws();
      if (consume(')')) return args;
      std::string key;
      if (is_ident_start(peek())) {
        size_t before_name = pos_;
        key = parse_identifier();
        skip_ws();
        if (peek() == '=' && peek(1) != '=') {
          ++pos_;
        } else {
          key.clear();  // a value that starts with a name (a nested call or a constant)
          pos_ = before_name;
        }
      }
      if (key.empty()) {
        if (seen_keyword) error("positional argument after keyword argument");
        key = "arg" + std::to_string(positional_count++);
      } else {
        seen_keyword = true;
      }
      if (args.contains(key)) error("repeated argument name");
      args[key] = parse_value(depth + 1);
      skip_ws();
      if (consume(',')) continue;
      expect(')');
      return args;
    }
  }

  ojson parse_value(int depth) {
    check_depth(depth);
    skip_ws();
    char c = peek();
    if (c == '"' || c == '\'') return ojson(parse_string());
    if (c == '[') {
      ++pos_;
      return parse_sequence(']', depth);
    }
    if (c == '(') {
      ++pos_;
      return parse_parenthesized(depth);
    }
    if (c == '{') return parse_dict(depth);
    if (is_digit(c) || c == '-' || c == '+' || c == '.') return parse_number();
    if (is_ident_start(c)) {
      size_t before_name = pos_;
      std::string name = parse_dotted_name();
      if ((peek() == '"' || peek() == '\'') && is_string_prefix(name)) return ojson(parse_string(is_raw_prefix(name)));
      if (name == "True" || name == "true") return ojson(true);
      if (name == "False" || name == "false") return ojson(false);
      if (name == "None" || name == "null") return ojson(nullptr);
      skip_ws();
      if (peek() != '(') error("bare name is not a literal");
      pos_ = before_name;
      ParsedToolCall nested = parse_call(depth);
      ojson object = ojson::object();
      object["name"] = std::move(nested.name);
      object["arguments"] = std::move(nested.arguments);
      return object;
    }
    error(at_end() ? "missing value" : "unexpected character");
  }

  // Elements after the opening bracket up to and including `close`.
  ojson parse_sequence(char close, int depth) {
    ojson array = ojson::array();
    while (true) {
      skip_ws();
      if (consume(close)) return array;
      array.push_back(parse_value(depth + 1));
      skip_ws();
      if (consume(',')) continue;
      expect(close);
      return array;
    }
  }

  // After '(': `()` and `(a, b)` are tuples (arrays), `(a)` is only grouping, as in Python.
  ojson parse_parenthesized(int depth) {
    skip_ws();
    if (consume(')')) return ojson::array();
    ojson first = parse_value(depth + 1);
    skip_ws();
    if (consume(')')) return first;
    expect(',');
    ojson rest = parse_sequence(')', depth);
    rest.insert(rest.begin(), std::move(first));
    return rest;
  }

  ojson parse_dict(int depth) {
    check_depth(depth);
    expect('{');
    ojson object = ojson::object();
    while (true) {
      skip_ws();
      if (consume('}')) return object;
      std::string key = parse_dict_key();
      skip_ws();
      expect(':');
      object[key] = parse_value(depth + 1);  // a repeated key keeps its first position, last value
      skip_ws();
      if (consume(',')) continue;
      expect('}');
      return object;
    }
  }

  // JSON needs string keys; numbers and bare words are kept as written (like json.dumps for
  // numeric keys, and lenient for the JavaScript-style {key: 1} that models sometimes emit).
  std::string parse_dict_key() {
    if (peek() == '"' || peek() == '\'') return parse_string();
    size_t start = pos_;
    while (!at_end() && is_bare_key_char(text_[pos_])) ++pos_;
    if (pos_ == start) error("expected a dictionary key");
    return std::string(text_.substr(start, pos_ - start));
  }

  ojson parse_number() {
    size_t start = pos_;
    if (peek() == '+' || peek() == '-') ++pos_;
    size_t mantissa_digits = 0;
    bool is_float = false;
    while (is_digit(peek())) ++pos_, ++mantissa_digits;
    if (peek() == '.') {
      is_float = true;
      ++pos_;
      while (is_digit(peek())) ++pos_, ++mantissa_digits;
    }
    if (mantissa_digits == 0) error("malformed number");
    if (peek() == 'e' || peek() == 'E') {
      is_float = true;
      ++pos_;
      if (peek() == '+' || peek() == '-') ++pos_;
      if (!is_digit(peek())) error("malformed exponent");
      while (is_digit(peek())) ++pos_;
    }
    if (is_ident_char(peek())) error("malformed number");
    std::string_view token = text_.substr(start, pos_ - start);
    if (token.front() == '+') token.remove_prefix(1);  // from_chars does not accept '+'
    const char* first = token.data();
    const char* last = token.data() + token.size();
    if (!is_float) {
      int64_t as_signed = 0;
      auto [end, ec] = std::from_chars(first, last, as_signed);
      if (ec == std::errc() && end == last) return ojson(as_signed);
      uint64_t as_unsigned = 0;
      auto [end_u, ec_u] = std::from_chars(first, last, as_unsigned);
      if (ec_u == std::errc() && end_u == last) return ojson(as_unsigned);
      // Larger than 64 bits: keep the magnitude as a double, as JSON readers would.
    }
    double as_double = 0;
    auto [end, ec] = std::from_chars(first, last, as_double);
    if (ec != std::errc() || end != last || !std::isfinite(as_double)) error("number out of range");
    return ojson(as_double);
  }

  // Python string prefixes: u/b change nothing here, r turns escape processing off.
  static bool is_string_prefix(std::string_view name) {
    return name == "r" || name == "R" || name == "u" || name == "U" || name == "b" || name == "B";
  }
  static bool is_raw_prefix(std::string_view name) { return name == "r" || name == "R"; }

  std::string parse_string(bool raw = false) {
    const char quote = text_[pos_];
    const bool triple = peek(1) == quote && peek(2) == quote;
    pos_ += triple ? 3 : 1;
    std::string out;
    while (true) {
      if (at_end()) error("unterminated string");
      char c = text_[pos_];
      if (c == quote) {
        if (!triple) {
          ++pos_;
          return out;
        }
        if (peek(1) == quote && peek(2) == quote) {
          pos_ += 3;
          return out;
        }
      }
      if (c == '\\' && raw) {  // the backslash stays, but still keeps the next quote from ending it
        out += c;
        if (++pos_ < text_.size()) out += text_[pos_++];
        continue;
      }
      if (c == '\\') {
        ++pos_;
        parse_escape(out);
        continue;
      }
      out += c;
      ++pos_;
    }
  }

  uint32_t parse_hex_digits(int count) {
    uint32_t value = 0;
    for (int i = 0; i < count; ++i) {
      int digit = hex_value(peek());
      if (digit < 0) error("malformed hex escape");
      value = value * 16 + static_cast<uint32_t>(digit);
      ++pos_;
    }
    return value;
  }

  // Called after the backslash.
  void parse_escape(std::string& out) {
    if (at_end()) error("unterminated string");
    char e = text_[pos_++];
    switch (e) {
      case 'n': out += '\n'; return;
      case 't': out += '\t'; return;
      case 'r': out += '\r'; return;
      case 'b': out += '\b'; return;
      case 'f': out += '\f'; return;
      case 'v': out += '\v'; return;
      case 'a': out += '\a'; return;
      case '\\': out += '\\'; return;
      case '\'': out += '\''; return;
      case '"': out += '"'; return;
      case '/': out += '/'; return;  // JSON escape; Python would keep the backslash
      case '\n': return;             // line continuation
      case '\r':
        consume('\n');
        return;
      case 'x': append_utf8(out, parse_hex_digits(2)); return;  // Python str semantics: a code point
      case 'u': append_utf8(out, parse_utf16_escape()); return;
      case 'U': {
        uint32_t cp = parse_hex_digits(8);
        if (cp > 0x10FFFF) error("code point out of range");
        append_utf8(out, (cp >= 0xD800 && cp <= 0xDFFF) ? kReplacementChar : cp);
        return;
      }
      default:
        break;
    }
    if (e >= '0' && e <= '7') {
      uint32_t cp = static_cast<uint32_t>(e - '0');
      for (int i = 0; i < 2 && peek() >= '0' && peek() <= '7'; ++i) cp = cp * 8 + static_cast<uint32_t>(text_[pos_++] - '0');
      append_utf8(out, cp);
      return;
    }
    out += '\\';  // unknown escape: Python keeps it verbatim
    out += e;
  }

  // \uXXXX, combining a UTF-16 surrogate pair when the low half follows; lone halves cannot be
  // encoded as UTF-8 and become U+FFFD.
  uint32_t parse_utf16_escape() {
    uint32_t unit = parse_hex_digits(4);
    if (unit >= 0xDC00 && unit <= 0xDFFF) return kReplacementChar;
    if (unit < 0xD800 || unit > 0xDBFF) return unit;
    if (peek() == '\\' && peek(1) == 'u') {
      size_t before_low = pos_;
      pos_ += 2;
      uint32_t low = parse_hex_digits(4);
      if (low >= 0xDC00 && low <= 0xDFFF) return 0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00);
      pos_ = before_low;  // not a pair: the next escape stands on its own
    }
    return kReplacementChar;
  }

  ParsedToolCall call_from_object(const ojson& object, int depth) {
    const ojson* function = &object;
    if (auto it = object.find("function"); it != object.end() && it->is_object()) function = &*it;
    ParsedToolCall call;
    auto name = function->find("name");
    if (name == function->end() || !name->is_string() || name->get_ref<const std::string&>().empty())
      error("tool call object without a \"name\" string");
    call.name = name->get<std::string>();
    auto args = function->find("arguments");
    if (args == function->end()) args = function->find("parameters");
    if (args == function->end() || args->is_null()) {
      call.arguments = ojson::object();
    } else if (args->is_object()) {
      call.arguments = *args;
    } else if (args->is_string()) {
      CallParser inner(args->get_ref<const std::string&>(), max_depth_);
      call.arguments = inner.parse_whole_value(depth + 1);
      if (!call.arguments.is_object()) error("\"arguments\" string does not hold an object");
    } else {
      error("\"arguments\" is not an object");
    }
    return call;
  }

  std::string_view text_;
  size_t pos_ = 0;
  int max_depth_;
};

}  // namespace

std::vector<ParsedToolCall> parse_tool_call_block(std::string_view body, int max_depth) {
  return CallParser(body, max_depth).parse_block();
}

}  // namespace lfm::chat
