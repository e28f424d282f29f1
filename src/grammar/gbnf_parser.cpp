// GBNF text → Grammar (the dialect is described in grammar/grammar.h).
#include <cctype>
#include <string>

#include "core/error.h"
#include "core/utf8.h"
#include "grammar/grammar.h"
#include "grammar/grammar_builder.h"

namespace lfm::grammar {

namespace {

bool is_word(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_'; }

class Parser {
 public:
  Parser(std::string_view text, WorkBudget& budget) : s_(text), budget_(budget), b_(&budget) {}

  Grammar parse(std::string_view root) {
    LFM_CHECK(find_invalid_utf8(s_) == std::string_view::npos, "grammar: the text is not valid UTF-8");
    skip_space(true);
    while (i_ < s_.size()) {
      parse_rule();
      skip_space(true);
    }
    return b_.finish(std::string(root));
  }

 private:
  [[noreturn]] void error(const std::string& what) const {
    size_t line = 1, col = 1;
    for (size_t k = 0; k < i_ && k < s_.size(); ++k) {
      if (s_[k] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
    fail("grammar: line ", line, ", column ", col, ": ", what);
  }
  bool at_end() const { return i_ >= s_.size(); }
  char peek(size_t k = 0) const { return i_ + k < s_.size() ? s_[i_ + k] : '\0'; }

  // Spaces, tabs and comments; newlines too when `newlines` (inside groups, after ::= and |).
  void skip_space(bool newlines) {
    while (!at_end()) {
      const char c = peek();
      if (c == ' ' || c == '\t' || (newlines && (c == '\n' || c == '\r'))) {
        ++i_;
      } else if (c == '#') {
        while (!at_end() && peek() != '\n') ++i_;
      } else {
        break;
      }
    }
  }

  std::string parse_name() {
    const size_t start = i_;
    while (!at_end() && is_word(peek())) ++i_;
    if (i_ == start) error(cat("expected a rule name, found '", std::string(1, peek()), "'"));
    return std::string(s_.substr(start, i_ - start));
  }

  // At a newline ending a rule's line: whether the next line continues it with `|`.
  bool continues_on_next_line() {
    size_t k = i_;
    while (k < s_.size()) {
      const char c = s_[k];
      if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
        ++k;
      } else if (c == '#') {
        while (k < s_.size() && s_[k] != '\n') ++k;
      } else {
        break;
      }
    }
    if (k < s_.size() && s_[k] == '|') {
      i_ = k;
      return true;
    }
    return false;
  }

  void parse_rule() {
    const std::string name = parse_name();
    skip_space(false);
    if (s_.substr(i_, 3) != "::=") error(cat("expected '::=' after rule name '", name, "'"));
    i_ += 3;
    skip_space(true);
    const int32_t r = b_.rule(name);
    if (b_.defined(r)) error(cat("rule '", name, "' is defined twice"));
    b_.define(r, parse_alternatives(name, false));
    if (!at_end() && peek() != '\n' && peek() != '\r') error(cat("unexpected '", std::string(1, peek()), "'"));
  }

  std::vector<Sequence> parse_alternatives(const std::string& rule_name, bool nested) {
    std::vector<Sequence> alts;
    alts.push_back(parse_sequence(rule_name, nested));
    for (;;) {
      if (peek() == '|' || (!nested && (peek() == '\n' || peek() == '\r') && continues_on_next_line())) {
        ++i_;
        skip_space(true);
        alts.push_back(parse_sequence(rule_name, nested));
      } else {
        return alts;
      }
    }
  }

  char32_t parse_char(bool in_class) {
    if (at_end()) error("unexpected end of text");
    if (peek() != '\\') {
      size_t k = i_;
      const char32_t cp = next_code_point(s_, k);
      i_ = k;
      return cp;
    }
    ++i_;
    const char e = peek();
    ++i_;
    auto hex = [&](int digits) {
      char32_t v = 0;
      for (int d = 0; d < digits; ++d) {
        const char c = peek();
        if (!std::isxdigit(static_cast<unsigned char>(c))) error(cat("expected ", digits, " hex digits after \\", e));
        v = v * 16 + static_cast<char32_t>(std::isdigit(static_cast<unsigned char>(c)) ? c - '0'
                                                                                      : std::tolower(c) - 'a' + 10);
        ++i_;
      }
      if (v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) error(cat("escape \\", e, " names no character"));
      return v;
    };
    switch (e) {
      case 'n': return '\n';
      case 'r': return '\r';
      case 't': return '\t';
      case '0': return 0;
      case 'x': return hex(2);
      case 'u': return hex(4);
      case 'U': return hex(8);
      case '\\': case '"': case '\'': case '[': case ']': case '-': case '^': case '/': case '.': case '|':
      case '(': case ')': case '*': case '+': case '?': case '{': case '}': case '#': case ' ':
        return static_cast<unsigned char>(e);
      default:
        (void)in_class;
        --i_;
        error(cat("unknown escape '\\", std::string(1, e), "'"));
    }
  }

  // One item with its postfix operators, appended to seq.
  void parse_item(Sequence& seq, const std::string& rule_name) {
    budget_.steps("grammar");
    const size_t start = seq.size();
    const char c = peek();
    if (c == '"') {
      ++i_;
      while (peek() != '"') {
        if (at_end() || peek() == '\n') error("unterminated literal");
        b_.append_code_point(seq, parse_char(false));
      }
      ++i_;
    } else if (c == '[') {
      ++i_;
      bool negate = false;
      if (peek() == '^') {
        negate = true;
        ++i_;
      }
      CodePointRanges ranges;
      while (peek() != ']') {
        if (at_end() || peek() == '\n') error("unterminated character class");
        const char32_t lo = parse_char(true);
        char32_t hi = lo;
        if (peek() == '-' && peek(1) != ']') {
          ++i_;
          hi = parse_char(true);
          if (hi < lo) error("character range out of order");
        }
        ranges.push_back({lo, hi});
      }
      ++i_;
      auto norm = normalize_ranges(ranges, negate);
      if (norm.empty()) error("character class matches nothing");
      seq.push_back(b_.code_points(norm, rule_name));
    } else if (c == '.') {
      ++i_;
      seq.push_back(b_.code_points(normalize_ranges({{0, 0x10FFFF}}, false), rule_name));
    } else if (c == '(') {
      if (++depth_ > kMaxNesting) error(cat("groups nested deeper than ", kMaxNesting));
      ++i_;
      skip_space(true);
      auto alts = parse_alternatives(rule_name, true);
      --depth_;
      if (peek() != ')') error("expected ')'");
      ++i_;
      if (alts.size() == 1 && !alts[0].empty()) {
        seq.push_back(b_.group(std::move(alts[0]), rule_name));  // (x) is x
      } else {
        const int32_t r = b_.helper_rule(rule_name);
        b_.define(r, std::move(alts));
        seq.push_back({Element::Kind::kRule, r});
      }
    } else if (c == '<') {
      // A token named by its text: <|im_end|>, <think>, </think>.
      const bool bars = peek(1) == '|';
      const size_t end = bars ? s_.find("|>", i_ + 2) : s_.find('>', i_ + 1);
      const size_t stop = end == std::string_view::npos ? end : end + (bars ? 2 : 1);
      if (end == std::string_view::npos || s_.substr(i_, stop - i_).find_first_of(" \t\r\n") != std::string_view::npos)
        error("unterminated token reference <...>");
      seq.push_back(b_.token(std::string(s_.substr(i_, stop - i_))));
      i_ = stop;
    } else if (is_word(c)) {
      seq.push_back({Element::Kind::kRule, b_.rule(parse_name())});
    } else {
      error(cat("unexpected '", std::string(1, c), "'"));
    }
    // Postfix operators apply to the whole item (a literal's every byte, a group).
    for (;;) {
      skip_space(false);
      const char op = peek();
      int64_t min = 0, max = -1;
      if (op == '*') {
        ++i_;
      } else if (op == '+') {
        ++i_;
        min = 1;
      } else if (op == '?') {
        ++i_;
        max = 1;
      } else if (op == '{') {
        ++i_;
        skip_space(false);
        min = parse_int();
        skip_space(false);
        if (peek() == ',') {
          ++i_;
          skip_space(false);
          max = std::isdigit(static_cast<unsigned char>(peek())) ? parse_int() : -1;
          skip_space(false);
        } else {
          max = min;
        }
        if (peek() != '}') error("expected '}'");
        ++i_;
        if (max >= 0 && max < min) error(cat("repetition {", min, ",", max, "} has max below min"));
      } else {
        return;
      }
      const Element x = b_.group(Sequence(seq.begin() + static_cast<std::ptrdiff_t>(start), seq.end()), rule_name);
      seq.resize(start);
      Sequence rep = b_.repeat(x, min, max, rule_name);
      seq.insert(seq.end(), rep.begin(), rep.end());  // a further postfix wraps all of it
    }
  }

  int64_t parse_int() {
    const size_t start = i_;
    int64_t v = 0;
    while (std::isdigit(static_cast<unsigned char>(peek()))) {
      v = v * 10 + (peek() - '0');
      if (v > 1000000) error("repetition bound too large");
      ++i_;
    }
    if (i_ == start) error("expected a number");
    return v;
  }

  Sequence parse_sequence(const std::string& rule_name, bool nested) {
    Sequence seq;
    skip_space(nested);
    while (!at_end()) {
      const char c = peek();
      if (c == '|' || c == ')' || c == '\n' || c == '\r') break;
      // The next rule's "name ::=" ends this one (rules usually sit one per line; this also
      // accepts a missing newline).
      if (is_word(c)) {
        size_t k = i_;
        while (k < s_.size() && is_word(s_[k])) ++k;
        while (k < s_.size() && (s_[k] == ' ' || s_[k] == '\t')) ++k;
        if (s_.substr(k, 3) == "::=") {
          if (nested) error("'::=' inside a group");
          break;
        }
      }
      parse_item(seq, rule_name);
      skip_space(nested);
    }
    return seq;
  }

  static constexpr int kMaxNesting = 256;  // parentheses (the parser recurses per level)
  std::string_view s_;
  size_t i_ = 0;
  int depth_ = 0;
  WorkBudget& budget_;
  GrammarBuilder b_;
};

}  // namespace

std::shared_ptr<const Grammar> parse_gbnf(std::string_view text, std::string_view root, WorkBudget* budget) {
  BudgetRef b(budget);
  return std::make_shared<const Grammar>(Parser(text, *b).parse(root));
}

}  // namespace lfm::grammar
