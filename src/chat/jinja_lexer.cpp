// Jinja tokenizer; mirrors jinja2.lexer's rules for whitespace control. See jinja_lexer.h.
#include "chat/jinja_lexer.h"

#include <algorithm>
#include <cstring>
#include <optional>

#include "chat/jinja_strings.h"
#include "chat/jinja_value.h"

namespace lfm::jinja {

const char* tok_name(Tok t) {
  switch (t) {
    case Tok::Data: return "template data";
    case Tok::VarBegin: return "begin of print statement";
    case Tok::VarEnd: return "end of print statement";
    case Tok::BlockBegin: return "begin of statement block";
    case Tok::BlockEnd: return "end of statement block";
    case Tok::Name: return "name";
    case Tok::String: return "string";
    case Tok::Int: return "integer";
    case Tok::Float: return "float";
    case Tok::Op: return "operator";
    case Tok::Eof: return "end of template";
  }
  return "token";
}

namespace {

class Lexer {
 public:
  Lexer(std::string src, const LexOptions& opt) : s_(std::move(src)), opt_(opt) {}

  std::vector<Token> run() {
    while (pos_ < s_.size()) {
      const size_t p = next_opener(pos_);
      if (p == std::string::npos) {
        emit_data(s_.substr(pos_));
        break;
      }
      const char kind = s_[p + 1];
      const char sign = (p + 2 < s_.size() && (s_[p + 2] == '-' || s_[p + 2] == '+')) ? s_[p + 2] : 0;
      const size_t after = p + 2 + (sign ? 1 : 0);
      std::optional<size_t> raw_end;
      if (kind == '%') raw_end = match_raw_begin(after);
      emit_data(strip_text(s_.substr(pos_, p - pos_), sign, kind != '{'));
      if (kind == '#') {
        lex_comment(after);
      } else if (raw_end) {
        lex_raw(*raw_end);
      } else {
        push(kind == '{' ? Tok::VarBegin : Tok::BlockBegin, "");
        pos_ = after;
        lex_tag(kind == '{');
      }
    }
    push(Tok::Eof, "");
    return std::move(out_);
  }

 private:
  [[noreturn]] void error(const std::string& msg) const { template_fail("jinja: line ", line_, ": ", msg); }

  void push(Tok t, std::string v) { out_.push_back(Token{t, std::move(v), line_}); }

  // Advances pos_ to `to`, counting newlines for error messages.
  void advance(size_t to) {
    line_ += static_cast<int>(std::count(s_.begin() + pos_, s_.begin() + to, '\n'));
    pos_ = to;
  }

  void emit_data(const std::string& text) {
    if (!text.empty()) push(Tok::Data, text);
  }

  size_t next_opener(size_t from) const {
    for (size_t p = s_.find('{', from); p != std::string::npos && p + 1 < s_.size(); p = s_.find('{', p + 1)) {
      const char c = s_[p + 1];
      if (c == '{' || c == '%' || c == '#') return p;
    }
    return std::string::npos;
  }

  // Length in bytes of the code point at i, and whether it is whitespace.
  bool space_at(size_t i, size_t* len) const {
    const auto b = static_cast<unsigned char>(s_[i]);
    size_t n = b < 0x80 ? 1 : (b & 0xE0) == 0xC0 ? 2 : (b & 0xF0) == 0xE0 ? 3 : 4;
    n = std::min(n, s_.size() - i);
    *len = n;
    const std::u32string cp = utf8_decode(std::string_view(s_).substr(i, n));
    return !cp.empty() && py_isspace(cp[0]);
  }

  size_t skip_space(size_t i) const {
    size_t len;
    while (i < s_.size() && space_at(i, &len)) i += len;
    return i;
  }

  // Text before a tag: "-" strips all trailing whitespace; otherwise lstrip_blocks removes the
  // indentation before a block/comment tag that starts its line (jinja's OptionalLStrip).
  std::string strip_text(std::string text, char sign, bool not_variable) {
    const size_t consumed = text.size();
    if (sign == '-') {
      text = py_strip(text, std::nullopt, false, true);
    } else if (sign != '+' && opt_.lstrip_blocks && not_variable) {
      const size_t nl = text.rfind('\n');
      const size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
      if ((l_pos > 0 || line_starting_) && l_pos < text.size()) {
        const std::u32string rest = utf8_decode(std::string_view(text).substr(l_pos));
        if (std::all_of(rest.begin(), rest.end(), py_isspace)) text.resize(l_pos);
      }
    }
    advance(pos_ + consumed);
    return text;
  }

  // Matches "\s*raw\s*(-%}\s*|%})" at i; returns the position after it.
  std::optional<size_t> match_raw_begin(size_t i) const {
    i = skip_space(i);
    if (s_.compare(i, 3, "raw") != 0) return std::nullopt;
    i = skip_space(i + 3);
    if (s_.compare(i, 3, "-%}") == 0) return skip_space(i + 3);
    if (s_.compare(i, 2, "%}") == 0) return i + 2;
    return std::nullopt;
  }

  // After "%}", "#}" (and the matched text ending in a newline) a new line starts.
  void finish_end(size_t end) {
    advance(end);
    line_starting_ = end > 0 && s_[end - 1] == '\n';
  }

  size_t end_after(size_t q, const char* close, char sign) const {
    const size_t e = q + std::strlen(close);
    if (sign == '-') return skip_space(e);
    if (sign == 0 && opt_.trim_blocks && e < s_.size() && s_[e] == '\n') return e + 1;
    return e;
  }

  void lex_comment(size_t from) {
    for (size_t q = from; q + 1 < s_.size(); ++q) {
      if ((s_[q] == '-' || s_[q] == '+') && s_.compare(q + 1, 2, "#}") == 0) {
        finish_end(end_after(q + 1, "#}", s_[q]));
        return;
      }
      if (s_.compare(q, 2, "#}") == 0) {
        finish_end(end_after(q, "#}", 0));
        return;
      }
    }
    error("Missing end of comment tag");
  }

  void lex_raw(size_t body_start) {
    advance(body_start);
    line_starting_ = body_start > 0 && s_[body_start - 1] == '\n';
    for (size_t q = s_.find("{%", body_start); q != std::string::npos; q = s_.find("{%", q + 1)) {
      size_t i = q + 2;
      const char sign = (i < s_.size() && (s_[i] == '-' || s_[i] == '+')) ? s_[i] : 0;
      if (sign) ++i;
      i = skip_space(i);
      if (s_.compare(i, 6, "endraw") != 0) continue;
      i = skip_space(i + 6);
      char esign = 0;
      if (i < s_.size() && (s_[i] == '-' || s_[i] == '+') && s_.compare(i + 1, 2, "%}") == 0) esign = s_[i++];
      if (s_.compare(i, 2, "%}") != 0) continue;
      emit_data(strip_text(s_.substr(pos_, q - pos_), sign, true));
      finish_end(end_after(i, "%}", esign));
      return;
    }
    error("Missing end of raw directive");
  }

  void lex_tag(bool variable) {
    std::vector<char> balance;
    while (true) {
      if (pos_ >= s_.size()) error(variable ? "unexpected end of template, expected '}}'" : "unexpected end of template, expected '%}'");
      if (balance.empty()) {
        if (variable) {
          if (s_.compare(pos_, 3, "-}}") == 0) return end_tag(Tok::VarEnd, skip_space(pos_ + 3));
          if (s_.compare(pos_, 2, "}}") == 0) return end_tag(Tok::VarEnd, pos_ + 2);
        } else {
          if (s_.compare(pos_, 3, "+%}") == 0) return end_tag(Tok::BlockEnd, pos_ + 3);
          if (s_.compare(pos_, 3, "-%}") == 0) return end_tag(Tok::BlockEnd, skip_space(pos_ + 3));
          if (s_.compare(pos_, 2, "%}") == 0) return end_tag(Tok::BlockEnd, end_after(pos_, "%}", 0));
        }
      }
      size_t len;
      if (space_at(pos_, &len)) {
        advance(skip_space(pos_));
        continue;
      }
      const char c = s_[pos_];
      if (std::isdigit(static_cast<unsigned char>(c))) {
        lex_number();
      } else if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t e = pos_;
        while (e < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[e])) || s_[e] == '_')) ++e;
        push(Tok::Name, s_.substr(pos_, e - pos_));
        pos_ = e;
      } else if (c == '\'' || c == '"') {
        lex_string(c);
      } else {
        lex_operator(balance);
      }
    }
  }

  void end_tag(Tok t, size_t end) {
    push(t, "");
    finish_end(end);
  }

  void lex_number() {
    size_t e = pos_;
    auto digits = [&](auto pred) {
      while (e < s_.size() && (pred(s_[e]) || (s_[e] == '_' && e + 1 < s_.size() && pred(s_[e + 1])))) ++e;
    };
    auto dec = [](char ch) { return std::isdigit(static_cast<unsigned char>(ch)) != 0; };
    auto clean = [&](size_t b, size_t en) {
      std::string r;
      for (size_t i = b; i < en; ++i)
        if (s_[i] != '_') r.push_back(s_[i]);
      return r;
    };
    if (s_[pos_] == '0' && pos_ + 1 < s_.size() && std::strchr("xXoObB", s_[pos_ + 1]) && s_[pos_ + 1] != 0) {
      const char b = static_cast<char>(std::tolower(static_cast<unsigned char>(s_[pos_ + 1])));
      e = pos_ + 2;
      if (e < s_.size() && s_[e] == '_') ++e;
      auto pred = [b](char ch) {
        if (b == 'x') return std::isxdigit(static_cast<unsigned char>(ch)) != 0;
        if (b == 'o') return ch >= '0' && ch <= '7';
        return ch == '0' || ch == '1';
      };
      const size_t start = e;
      digits(pred);
      if (e == start) error("invalid integer literal");
      push(Tok::Int, std::string("0") + b + clean(start, e));
      pos_ = e;
      return;
    }
    digits(dec);
    bool is_float = false;
    if (e + 1 < s_.size() && s_[e] == '.' && dec(s_[e + 1])) {
      ++e;
      digits(dec);
      is_float = true;
    }
    if (e < s_.size() && (s_[e] == 'e' || s_[e] == 'E')) {
      size_t k = e + 1;
      if (k < s_.size() && (s_[k] == '+' || s_[k] == '-')) ++k;
      if (k < s_.size() && dec(s_[k])) {
        e = k;
        digits(dec);
        is_float = true;
      }
    }
    push(is_float ? Tok::Float : Tok::Int, clean(pos_, e));
    pos_ = e;
  }

  // Python's unicode-escape decoding of the literal's body (jinja encodes non-ASCII text with
  // backslashreplace first, which is why a backslash before a non-ASCII character stays literal).
  void lex_string(char quote) {
    size_t e = pos_ + 1;
    while (e < s_.size() && s_[e] != quote) e += (s_[e] == '\\') ? 2 : 1;
    if (e >= s_.size()) error("unexpected end of string");
    const std::string body = s_.substr(pos_ + 1, e - pos_ - 1);
    std::string out;
    for (size_t i = 0; i < body.size(); ++i) {
      if (body[i] != '\\') { out.push_back(body[i]); continue; }
      if (i + 1 >= body.size()) error("invalid escape at end of string");
      const char c = body[++i];
      auto hex = [&](size_t n) {
        if (i + n >= body.size()) error("truncated \\x/\\u escape in string");
        uint32_t v = 0;
        for (size_t k = 1; k <= n; ++k) {
          const char h = body[i + k];
          if (!std::isxdigit(static_cast<unsigned char>(h))) error("truncated \\x/\\u escape in string");
          v = v * 16 + static_cast<uint32_t>(std::isdigit(static_cast<unsigned char>(h)) ? h - '0' : (std::tolower(h) - 'a' + 10));
        }
        i += n;
        if (v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) error("unsupported escape: surrogate or out-of-range code point");
        append_utf8(out, v);
      };
      switch (c) {
        case '\n': break;
        case '\\': out.push_back('\\'); break;
        case '\'': out.push_back('\''); break;
        case '"': out.push_back('"'); break;
        case 'a': out.push_back('\a'); break;
        case 'b': out.push_back('\b'); break;
        case 'f': out.push_back('\f'); break;
        case 'n': out.push_back('\n'); break;
        case 'r': out.push_back('\r'); break;
        case 't': out.push_back('\t'); break;
        case 'v': out.push_back('\v'); break;
        case 'x': hex(2); break;
        case 'u': hex(4); break;
        case 'U': hex(8); break;
        case 'N': error("unsupported escape \\N{...} in string");
        default:
          if (c >= '0' && c <= '7') {
            uint32_t v = static_cast<uint32_t>(c - '0');
            for (int k = 0; k < 2 && i + 1 < body.size() && body[i + 1] >= '0' && body[i + 1] <= '7'; ++k)
              v = v * 8 + static_cast<uint32_t>(body[++i] - '0');
            append_utf8(out, v);
          } else if (static_cast<unsigned char>(c) >= 0x80) {
            // "\é" → backslashreplace gives "\\xe9" → decodes to the 5 characters "\xe9".
            size_t n = 1;
            while (i + n < body.size() && (static_cast<unsigned char>(body[i + n]) & 0xC0) == 0x80) ++n;
            const char32_t cp = utf8_decode(std::string_view(body).substr(i, n))[0];
            char buf[16];
            if (cp <= 0xFF) std::snprintf(buf, sizeof buf, "\\x%02x", unsigned(cp));
            else if (cp <= 0xFFFF) std::snprintf(buf, sizeof buf, "\\u%04x", unsigned(cp));
            else std::snprintf(buf, sizeof buf, "\\U%08x", unsigned(cp));
            out += buf;
            i += n - 1;
          } else {
            out.push_back('\\');  // unknown escapes are kept verbatim
            out.push_back(c);
          }
      }
    }
    push(Tok::String, out);
    advance(e + 1);
  }

  void lex_operator(std::vector<char>& balance) {
    static const char* const kTwo[] = {"//", "**", "==", "!=", "<=", ">="};
    for (const char* op : kTwo)
      if (s_.compare(pos_, 2, op) == 0) {
        push(Tok::Op, op);
        pos_ += 2;
        return;
      }
    const char c = s_[pos_];
    if (!std::strchr("+-/*%~[](){}<>=.:|,;", c) || c == 0) error(cat("unexpected char '", c, "'"));
    if (c == '(' || c == '[' || c == '{') balance.push_back(c);
    if (c == ')' || c == ']' || c == '}') {
      const char open = c == ')' ? '(' : c == ']' ? '[' : '{';
      if (balance.empty()) error(cat("unexpected '", c, "'"));
      if (balance.back() != open) error(cat("unexpected '", c, "', expected closing for '", balance.back(), "'"));
      balance.pop_back();
    }
    push(Tok::Op, std::string(1, c));
    ++pos_;
  }

  std::string s_;
  LexOptions opt_;
  size_t pos_ = 0;
  int line_ = 1;
  bool line_starting_ = true;
  std::vector<Token> out_;
};

}  // namespace

std::vector<Token> tokenize(std::string_view source, const LexOptions& opt) {
  // jinja normalizes \r\n and \r to \n before lexing and drops one trailing newline.
  std::string src;
  src.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      src.push_back('\n');
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      src.push_back(source[i]);
    }
  }
  if (!opt.keep_trailing_newline && !src.empty() && src.back() == '\n') src.pop_back();
  utf8_decode(src);  // validates the encoding up front
  return Lexer(std::move(src), opt).run();
}

}  // namespace lfm::jinja
