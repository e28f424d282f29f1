#include "grammar/regex_to_gbnf.h"

#include <optional>
#include <vector>

#include "core/error.h"
#include "core/utf8.h"
#include "grammar/work_budget.h"

namespace lfm::grammar {

namespace {

constexpr const char* kWho = "regex";
constexpr size_t kMaxPatternBytes = 8192;
constexpr int kMaxRepeat = 10000;  // {m,n} bounds above this are refused (the grammar would explode)
constexpr int kMaxDepth = 200;      // nesting of groups

struct Node {
  enum class Kind { kEmpty, kChars, kSeq, kAlt, kRepeat, kBegin, kEnd };
  Kind kind = Kind::kEmpty;
  CodeRanges set;           // kChars
  std::vector<Node> kids;   // kSeq, kAlt: the parts; kRepeat: the body
  int min = 0, max = -1;    // kRepeat; max -1 = unbounded
  size_t pos = 0;           // where in the pattern (for errors)
  mutable int8_t nullable = -1;  // memo of nullable() below: -1 unknown, else 0 / 1
};

Node chars(CodeRanges r, size_t pos) {
  Node n;
  n.kind = Node::Kind::kChars;
  n.set = normalize_ranges(std::move(r));
  n.pos = pos;
  return n;
}

const CodeRanges kDigit = {{'0', '9'}};
const CodeRanges kWord = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
// ECMAScript's WhiteSpace and LineTerminator.
const CodeRanges kSpace = {{'\t', '\r'}, {' ', ' '}, {0xA0, 0xA0}, {0x1680, 0x1680}, {0x2000, 0x200A},
                           {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F}, {0x3000, 0x3000},
                           {0xFEFF, 0xFEFF}};
const CodeRanges kDotExcluded = {{'\n', '\n'}, {'\r', '\r'}, {0x2028, 0x2029}};

class Parser {
 public:
  explicit Parser(std::string_view pattern) {
    LFM_CHECK(pattern.size() <= kMaxPatternBytes, "regex: pattern of ", pattern.size(), " bytes exceeds ",
              kMaxPatternBytes);
    LFM_CHECK(find_invalid_utf8(pattern) == std::string_view::npos, "regex: pattern is not valid UTF-8");
    for (size_t i = 0; i < pattern.size();) cps_.push_back(next_code_point(pattern, i));
  }

  Node parse() {
    Node n = alternation(0);
    if (i_ < cps_.size()) error("unmatched )");
    return n;
  }

 private:
  [[noreturn]] void error(const std::string& what) const { fail("regex: position ", i_, ": ", what); }
  bool more() const { return i_ < cps_.size(); }
  char32_t peek(size_t k = 0) const { return i_ + k < cps_.size() ? cps_[i_ + k] : 0; }

  Node alternation(int depth) {
    if (depth > kMaxDepth) error("groups nested too deeply");
    Node alt;
    alt.kind = Node::Kind::kAlt;
    alt.pos = i_;
    alt.kids.push_back(sequence(depth));
    while (more() && peek() == '|') {
      ++i_;
      alt.kids.push_back(sequence(depth));
    }
    return alt.kids.size() == 1 ? std::move(alt.kids[0]) : alt;
  }

  Node sequence(int depth) {
    Node seq;
    seq.kind = Node::Kind::kSeq;
    seq.pos = i_;
    while (more() && peek() != '|' && peek() != ')') {
      Node a = atom(depth);
      while (more()) {
        int lo = 0, hi = -1;
        const size_t qpos = i_;
        if (peek() == '*') ++i_;
        else if (peek() == '+') { lo = 1; ++i_; }
        else if (peek() == '?') { hi = 1; ++i_; }
        else if (!braces(lo, hi)) break;
        if (a.kind == Node::Kind::kBegin || a.kind == Node::Kind::kEnd) { i_ = qpos; error("nothing to repeat"); }
        if (more() && peek() == '?') ++i_;  // lazy: the same strings match
        Node r;
        r.kind = Node::Kind::kRepeat;
        r.min = lo;
        r.max = hi;
        r.pos = qpos;
        r.kids.push_back(std::move(a));
        a = std::move(r);
      }
      seq.kids.push_back(std::move(a));
    }
    return seq;
  }

  // {m}, {m,}, {m,n} at i_: consumes it and returns true; anything else is a literal '{'
  // (ECMAScript Annex B).
  bool braces(int& lo, int& hi) {
    if (peek() != '{') return false;
    size_t j = i_ + 1;
    auto number = [&](int& out) {
      const size_t start = j;
      long v = 0;
      while (j < cps_.size() && cps_[j] >= '0' && cps_[j] <= '9') {
        v = std::min<long>(v * 10 + (cps_[j] - '0'), 1L << 40);
        ++j;
      }
      if (j == start) return false;
      if (v > kMaxRepeat) { i_ = start; error("repetition count above " + std::to_string(kMaxRepeat)); }
      out = static_cast<int>(v);
      return true;
    };
    int m = 0, n = -1;
    if (!number(m)) return false;
    if (j < cps_.size() && cps_[j] == ',') {
      ++j;
      if (j < cps_.size() && cps_[j] != '}' && !number(n)) return false;
    } else {
      n = m;
    }
    if (j >= cps_.size() || cps_[j] != '}') return false;
    if (n >= 0 && n < m) error("repetition {m,n} with n < m");
    i_ = j + 1;
    lo = m;
    hi = n;
    return true;
  }

  Node atom(int depth) {
    const size_t pos = i_;
    const char32_t c = cps_[i_++];
    switch (c) {
      case '(': {
        if (peek() == '?') {
          if (peek(1) == ':') i_ += 2;
          else if (peek(1) == '=' || peek(1) == '!') error("lookahead is not supported");
          else if (peek(1) == '<' && (peek(2) == '=' || peek(2) == '!')) error("lookbehind is not supported");
          else if (peek(1) == '<') {  // named group: a capturing group, the name does not matter
            i_ += 2;
            while (more() && peek() != '>') ++i_;
            if (!more()) error("unterminated group name");
            ++i_;
          } else {
            error("unsupported group (?" + std::string(1, static_cast<char>(peek(1))) + "");
          }
        }
        Node inner = alternation(depth + 1);
        if (!more() || peek() != ')') { i_ = pos; error("unmatched ("); }
        ++i_;
        return inner;
      }
      case ')': --i_; error("unmatched )");
      case '*': case '+': case '?': --i_; error("nothing to repeat");
      case '[': return char_class(pos);
      case '.': return chars(complement_ranges(kDotExcluded), pos);
      case '^': { Node n; n.kind = Node::Kind::kBegin; n.pos = pos; return n; }
      case '$': { Node n; n.kind = Node::Kind::kEnd; n.pos = pos; return n; }
      case '{': {
        int lo, hi;
        --i_;
        if (braces(lo, hi)) { i_ = pos; error("nothing to repeat"); }
        ++i_;
        return chars({{c, c}}, pos);
      }
      case '\\': return chars(escape(false), pos);
      default: return chars({{c, c}}, pos);
    }
  }

  // After a backslash: the set it denotes.
  CodeRanges escape(bool in_class) {
    if (!more()) error("pattern ends with a backslash");
    const size_t pos = i_ - 1;
    const char32_t c = cps_[i_++];
    auto hex = [&](int digits) {
      char32_t v = 0;
      for (int k = 0; k < digits; ++k) {
        const char32_t h = peek();
        int d = h >= '0' && h <= '9' ? int(h - '0') : h >= 'a' && h <= 'f' ? int(h - 'a' + 10)
              : h >= 'A' && h <= 'F' ? int(h - 'A' + 10) : -1;
        if (d < 0) { i_ = pos; error("bad hex escape"); }
        v = v * 16 + static_cast<char32_t>(d);
        ++i_;
      }
      return v;
    };
    auto one = [](char32_t v) { return CodeRanges{{v, v}}; };
    switch (c) {
      case 'd': return kDigit;
      case 'D': return complement_ranges(kDigit);
      case 'w': return kWord;
      case 'W': return complement_ranges(kWord);
      case 's': return kSpace;
      case 'S': return complement_ranges(kSpace);
      case 'n': return one('\n');
      case 'r': return one('\r');
      case 't': return one('\t');
      case 'f': return one('\f');
      case 'v': return one('\v');
      case 'x': return one(hex(2));
      case 'u': {
        char32_t v = hex(4);
        // A surrogate pair spelled as two escapes is one character.
        if (v >= 0xD800 && v <= 0xDBFF && peek() == '\\' && peek(1) == 'u') {
          const size_t save = i_;
          i_ += 2;
          const char32_t lo = hex(4);
          if (lo >= 0xDC00 && lo <= 0xDFFF) return one(0x10000 + ((v - 0xD800) << 10) + (lo - 0xDC00));
          i_ = save;
        }
        if (v >= 0xD800 && v <= 0xDFFF) { i_ = pos; error("lone surrogate escape"); }
        return one(v);
      }
      case 'c': {
        const char32_t l = peek();
        if (!((l >= 'a' && l <= 'z') || (l >= 'A' && l <= 'Z'))) { i_ = pos; error("bad \\c escape"); }
        ++i_;
        return one(l % 32);
      }
      case 'b':
        if (in_class) return one('\b');
        i_ = pos;
        error("word boundary \\b is not supported");
      case 'B': i_ = pos; error("word boundary \\B is not supported");
      case 'p': case 'P': i_ = pos; error("Unicode property escapes are not supported");
      case 'k': i_ = pos; error("backreferences are not supported");
      case '0':
        if (peek() >= '0' && peek() <= '9') { i_ = pos; error("octal escapes are not supported"); }
        return one(0);
      default:
        if (c >= '1' && c <= '9') { i_ = pos; error("backreferences are not supported"); }
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) { i_ = pos; error("unknown escape"); }
        return one(c);  // escaped punctuation stands for itself
    }
  }

  Node char_class(size_t pos) {
    bool negate = false;
    if (peek() == '^') { negate = true; ++i_; }
    CodeRanges set;
    while (true) {
      if (!more()) { i_ = pos; error("unterminated ["); }
      if (peek() == ']') { ++i_; break; }
      const size_t item = i_;
      CodeRanges lo = class_atom();
      if (peek() == '-' && peek(1) != ']' && i_ + 1 < cps_.size()) {
        ++i_;
        CodeRanges hi = class_atom();
        if (lo.size() != 1 || hi.size() != 1 || lo[0].first != lo[0].second || hi[0].first != hi[0].second) {
          i_ = item;
          error("class range with a class escape at an end");
        }
        if (hi[0].first < lo[0].first) { i_ = item; error("class range out of order"); }
        set.emplace_back(lo[0].first, hi[0].first);
      } else {
        set.insert(set.end(), lo.begin(), lo.end());
      }
    }
    if (negate) set = complement_ranges(set);
    set = normalize_ranges(set);
    if (set.empty()) { i_ = pos; error("the class matches no character"); }
    return chars(set, pos);
  }

  CodeRanges class_atom() {
    const char32_t c = cps_[i_++];
    if (c == '\\') return escape(true);
    return {{c, c}};
  }

  std::vector<char32_t> cps_;
  size_t i_ = 0;
};

// Whether n matches the empty string; remembered in the node, so asking at every level of a
// deep pattern stays linear.
bool nullable(const Node& n) {
  if (n.nullable >= 0) return n.nullable;
  bool result = true;
  switch (n.kind) {
    case Node::Kind::kChars: result = false; break;
    case Node::Kind::kSeq:
      for (const auto& k : n.kids)
        if (!nullable(k)) result = false;
      break;
    case Node::Kind::kAlt:
      result = false;
      for (const auto& k : n.kids)
        if (nullable(k)) result = true;
      break;
    case Node::Kind::kRepeat: result = n.min == 0 || nullable(n.kids[0]); break;
    default: break;
  }
  n.nullable = result;
  return result;
}

// Charges copying a node and everything under it, before the copy (star_generator's parts).
void charge_copy(const Node& n, WorkBudget& budget) {
  budget.items(kWho, 1, sizeof(Node) + n.set.size() * sizeof(n.set[0]));
  for (const auto& k : n.kids) charge_copy(k, budget);
}

// A language G with G* = n* and without the empty string (nullopt: n* is just ""), in linear
// work: a star of nullable parts a b c is a star of their alternatives (each string of (a b c)*
// splits into non-empty pieces of a, b or c, and any such piece is itself in a b c).
std::optional<Node> star_generator(const Node& n, WorkBudget& budget) {
  budget.steps(kWho);
  if (!nullable(n)) {
    charge_copy(n, budget);
    return n;
  }
  switch (n.kind) {
    case Node::Kind::kSeq:
    case Node::Kind::kAlt: {
      Node alt;
      alt.kind = Node::Kind::kAlt;
      alt.pos = n.pos;
      for (const auto& k : n.kids)
        if (auto g = star_generator(k, budget)) {
          if (g->kind == Node::Kind::kAlt) {
            for (auto& x : g->kids) alt.kids.push_back(std::move(x));
          } else {
            alt.kids.push_back(std::move(*g));
          }
        }
      if (alt.kids.empty()) return std::nullopt;
      return alt.kids.size() == 1 ? std::move(alt.kids[0]) : alt;
    }
    case Node::Kind::kRepeat:
      // (x{m,n})* with x nullable, or x{0,n} (n > 0): both are x*.
      if (n.max == 0) return std::nullopt;
      return star_generator(n.kids[0], budget);
    default: return std::nullopt;
  }
}

// Writes nodes as GBNF; in JSON mode each character is written as it appears in a JSON string.
// Helper rules (the shared tails of nonempty_sequence) go into `rules`, named after `base`.
class Writer {
 public:
  Writer(bool json, WorkBudget& budget, RuleSet& rules, std::string base)
      : json_(json), budget_(budget), rules_(rules), base_(std::move(base)) {}

  std::string expr(const Node& n) {
    std::string out = write(n);
    // The text as it grows, level by level: a step per 16 bytes, and the bytes (items() would
    // charge count x size, quadratic in the text).
    budget_.steps(kWho, out.size() / 16 + 1);
    budget_.bytes(kWho, out.size());
    return out;
  }

 private:
  std::string write(const Node& n) {
    switch (n.kind) {
      case Node::Kind::kChars: return char_set(n.set);
      case Node::Kind::kSeq: return sequence(n.kids);
      case Node::Kind::kAlt: {
        std::string out;
        bool optional = false;
        for (const auto& k : n.kids) {
          auto e = nonempty_expr(k);  // empty branches become a trailing ?
          if (nullable(k)) optional = true;
          if (e) out += (out.empty() ? "" : " | ") + *e;
        }
        if (out.empty()) return "\"\"";
        return "(" + out + ")" + (optional ? "?" : "");
      }
      case Node::Kind::kRepeat: {
        // GBNF refuses x* with a nullable x (left recursion through an empty prefix), and a
        // nullable x{m,n} would match one text many ways: the body is written without "".
        const auto body = nonempty_body(n);
        if (!body) return "\"\"";
        return "(" + *body + ")" + suffix(nullable(n.kids[0]) ? 0 : n.min, n.max);
      }
      case Node::Kind::kBegin:
      case Node::Kind::kEnd:
        fail("regex: position ", n.pos, ": anchors are supported only at the start and end of the pattern");
      default: return "\"\"";
    }
  }

 public:
  // The language of n without the empty string, as GBNF; nullopt when nothing is left.
  std::optional<std::string> nonempty_expr(const Node& n) {
    budget_.steps(kWho);
    if (!nullable(n)) return expr(n);
    switch (n.kind) {
      case Node::Kind::kSeq: return nonempty_sequence(n.kids);
      case Node::Kind::kAlt: {
        std::string out;
        int count = 0;
        for (const auto& k : n.kids)
          if (auto e = nonempty_expr(k)) {
            out += (out.empty() ? "" : " | ") + *e;
            ++count;
          }
        if (count == 0) return std::nullopt;
        return count == 1 ? out : "(" + out + ")";
      }
      case Node::Kind::kRepeat: {
        // x{m,n} with x nullable = (ne x){0,n}; then without "" = (ne x){1,n}.
        const auto body = nonempty_body(n);
        if (!body) return std::nullopt;
        return "(" + *body + ")" + suffix(1, n.max);
      }
      case Node::Kind::kBegin:
      case Node::Kind::kEnd: return write(n);  // refused: an anchor inside the pattern
      default: return std::nullopt;
    }
  }

  std::string sequence(const std::vector<Node>& kids) {
    std::string out, run;  // run: consecutive single characters, written as one literal
    auto flush = [&] {
      if (run.empty()) return;
      out += (out.empty() ? "" : " ") + gbnf_literal(run);
      run.clear();
    };
    for (const auto& k : kids) {
      if (k.kind == Node::Kind::kChars && k.set.size() == 1 && k.set[0].first == k.set[0].second) {
        run += json_ ? json_text(k.set[0].first) : utf8(k.set[0].first);
        continue;
      }
      flush();
      const std::string e = expr(k);
      if (e != "\"\"") out += (out.empty() ? "" : " ") + e;
    }
    flush();
    return out.empty() ? "\"\"" : out;
  }

 private:
  // A repetition's body without "" (nullopt: the repetition matches only ""). x* with x nullable
  // uses star_generator (a star of the parts' alternatives), which is simpler than ne(x)*.
  std::optional<std::string> nonempty_body(const Node& n) {
    if (n.max == 0) return std::nullopt;
    if (n.max >= 0) return nonempty_expr(n.kids[0]);
    const auto g = star_generator(n.kids[0], budget_);
    if (!g) return std::nullopt;
    return expr(*g);
  }

  // ne(a_0 ... a_k) for parts that are all nullable: a string of it has a first non-empty part,
  // so it is ne(a_0) T_1 | ne(a_1) T_2 | ... | ne(a_k), where T_i = a_i ... a_k. Writing each T_i
  // out costs a copy of the rest per part (quadratic); T_i = a_i T_{i+1} as helper rules keeps
  // the text linear in the pattern.
  std::optional<std::string> nonempty_sequence(const std::vector<Node>& kids) {
    std::vector<std::string> alts;  // from the last part back
    std::string tail;               // T_{i+1}: text, or a helper rule's name; "" = nothing left
    for (size_t i = kids.size(); i-- > 0;) {
      budget_.steps(kWho);
      if (auto head = nonempty_expr(kids[i])) alts.push_back(*head + (tail.empty() ? "" : " " + tail));
      if (i == 0) break;
      const std::string part = expr(kids[i]);
      if (part == "\"\"") continue;
      tail = part + (tail.empty() ? "" : " " + tail);
      if (tail.size() > kInlineTailBytes) {
        budget_.items(kWho, 1, tail.size());
        tail = rules_.add(base_ + "-tail", tail);
      }
    }
    if (alts.empty()) return std::nullopt;
    if (alts.size() == 1) return alts[0];
    std::string out = "(";
    for (size_t k = alts.size(); k-- > 0;) out += alts[k] + (k ? " | " : ")");
    return out;
  }

  // The GBNF quantifier for {lo,max} (max -1: unbounded).
  static std::string suffix(int lo, int max) {
    if (lo == 1 && max == 1) return "";
    if (lo == 0 && max == 1) return "?";
    if (lo == 0 && max < 0) return "*";
    if (lo == 1 && max < 0) return "+";
    if (lo == max) return "{" + std::to_string(lo) + "}";
    if (max < 0) return "{" + std::to_string(lo) + ",}";
    return "{" + std::to_string(lo) + "," + std::to_string(max) + "}";
  }

  static std::string utf8(char32_t c) {
    std::string s;
    append_utf8(s, c);
    return s;
  }

  // How nlohmann/json and Python's json.dumps write a character inside a string.
  static std::string json_text(char32_t c) {
    switch (c) {
      case '"': return "\\\"";
      case '\\': return "\\\\";
      case '\b': return "\\b";
      case '\f': return "\\f";
      case '\n': return "\\n";
      case '\r': return "\\r";
      case '\t': return "\\t";
      default: break;
    }
    if (c < 0x20) {
      static const char* hex = "0123456789abcdef";
      return std::string("\\u00") + hex[c >> 4] + hex[c & 15];
    }
    return utf8(c);
  }

  std::string char_set(const CodeRanges& set) {
    if (!json_) {
      if (set.size() == 1 && set[0].first == set[0].second) return gbnf_literal(utf8(set[0].first));
      return gbnf_class(set);
    }
    std::vector<std::string> parts;
    const CodeRanges raw = subtract_ranges(set, {{0, 0x1F}, {'"', '"'}, {'\\', '\\'}});
    if (!raw.empty())
      parts.push_back(raw.size() == 1 && raw[0].first == raw[0].second ? gbnf_literal(utf8(raw[0].first))
                                                                        : gbnf_class(raw));
    auto has = [&](char32_t c) {
      for (auto [lo, hi] : set)
        if (c >= lo && c <= hi) return true;
      return false;
    };
    for (char32_t c : {U'"', U'\\', U'\b', U'\f', U'\n', U'\r', U'\t'})
      if (has(c)) parts.push_back(gbnf_literal(json_text(c)));
    // The other controls as \u00XX, grouped by their upper hex digit.
    for (char32_t hi = 0; hi < 2; ++hi) {
      std::string low;
      for (char32_t lo = 0; lo < 16; ++lo) {
        const char32_t c = hi * 16 + lo;
        if (!has(c) || c == '\b' || c == '\f' || c == '\n' || c == '\r' || c == '\t') continue;
        low += "0123456789abcdef"[lo];
        if (lo >= 10) low += "0123456789ABCDEF"[lo];
      }
      if (!low.empty()) parts.push_back("\"\\\\u00" + std::to_string(hi) + "\" [" + low + "]");
    }
    if (parts.size() == 1) return parts[0];
    std::string out = "(";
    for (size_t k = 0; k < parts.size(); ++k) out += (k ? " | " : "") + parts[k];
    return out + ")";
  }

  static constexpr size_t kInlineTailBytes = 32;  // longer shared tails become helper rules

  bool json_;
  WorkBudget& budget_;
  RuleSet& rules_;
  std::string base_;
};

// The top-level alternatives with their anchors removed: (node, anchored at start, at end).
struct Branch {
  Node node;
  bool begin = false, end = false;
};

std::vector<Branch> branches(Node top) {
  std::vector<Node> alts;
  if (top.kind == Node::Kind::kAlt) alts = std::move(top.kids);
  else alts.push_back(std::move(top));
  std::vector<Branch> out;
  for (auto& a : alts) {
    Branch b;
    if (a.kind != Node::Kind::kSeq) {
      Node s;
      s.kind = Node::Kind::kSeq;
      s.kids.push_back(std::move(a));
      a = std::move(s);
    }
    auto& k = a.kids;
    if (!k.empty() && k.front().kind == Node::Kind::kBegin) { b.begin = true; k.erase(k.begin()); }
    if (!k.empty() && k.back().kind == Node::Kind::kEnd) { b.end = true; k.pop_back(); }
    b.node = std::move(a);
    out.push_back(std::move(b));
  }
  return out;
}

}  // namespace

std::string regex_to_gbnf(std::string_view pattern, WorkBudget* budget) {
  BudgetRef b(budget);
  RuleSet rules;
  Writer w(false, *b, rules, "root");
  std::string body;
  for (auto& b : branches(Parser(pattern).parse())) body += (body.empty() ? "" : " | ") + w.expr(b.node);
  rules.add("root", body);
  return rules.text();
}

std::string regex_json_string_content(std::string_view pattern, RuleSet& rules, std::string_view name,
                                      WorkBudget* budget) {
  BudgetRef b(budget);
  Writer w(true, *b, rules, std::string(name));
  const std::string any = rules.add("char", json_char_body());
  std::string body;
  for (auto& b : branches(Parser(pattern).parse())) {
    std::string e = w.expr(b.node);
    // Unanchored: anything may come before / after the match.
    if (e == "\"\"" && (!b.begin || !b.end)) e = any + "*";
    else {
      if (!b.begin) e = any + "* " + e;
      if (!b.end) e += " " + any + "*";
    }
    body += (body.empty() ? "" : " | ") + e;
  }
  return rules.add(std::string(name), body);
}

}  // namespace lfm::grammar
