#include "grammar/grammar_builder.h"

#include <algorithm>

#include "core/error.h"
#include "core/utf8.h"

namespace lfm::grammar {

namespace {

constexpr const char* kWho = "grammar";
constexpr char32_t kMaxCodePoint = 0x10FFFF;

// Encodes cp (< 0x110000, not a surrogate) into out; returns the byte count.
int encode(char32_t cp, uint8_t out[4]) {
  if (cp < 0x80) {
    out[0] = static_cast<uint8_t>(cp);
    return 1;
  }
  if (cp < 0x800) {
    out[0] = static_cast<uint8_t>(0xC0 | (cp >> 6));
    out[1] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
    return 2;
  }
  if (cp < 0x10000) {
    out[0] = static_cast<uint8_t>(0xE0 | (cp >> 12));
    out[1] = static_cast<uint8_t>(0x80 | ((cp >> 6) & 0x3F));
    out[2] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
    return 3;
  }
  out[0] = static_cast<uint8_t>(0xF0 | (cp >> 18));
  out[1] = static_cast<uint8_t>(0x80 | ((cp >> 12) & 0x3F));
  out[2] = static_cast<uint8_t>(0x80 | ((cp >> 6) & 0x3F));
  out[3] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
  return 4;
}

// Splits [lo, hi] into ranges whose UTF-8 encodings are byte-wise ranges (each byte position an
// independent range), the classic construction of UTF-8 automata: same encoded length, and for
// each continuation level either the whole 6-bit span or one fixed prefix.
void utf8_sequences(char32_t lo, char32_t hi, std::vector<std::vector<std::pair<uint8_t, uint8_t>>>& out) {
  static constexpr char32_t kLengthEnds[] = {0x7F, 0x7FF, 0xFFFF, kMaxCodePoint};
  for (char32_t end : kLengthEnds) {
    if (lo <= end && hi > end) {
      utf8_sequences(lo, end, out);
      utf8_sequences(end + 1, hi, out);
      return;
    }
  }
  for (int i = 1; i < 4; ++i) {
    const char32_t m = (char32_t{1} << (6 * i)) - 1;
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        utf8_sequences(lo, lo | m, out);
        utf8_sequences((lo | m) + 1, hi, out);
        return;
      }
      if ((hi & m) != m) {
        utf8_sequences(lo, (hi & ~m) - 1, out);
        utf8_sequences(hi & ~m, hi, out);
        return;
      }
    }
  }
  uint8_t a[4], b[4];
  const int n = encode(lo, a);
  encode(hi, b);
  std::vector<std::pair<uint8_t, uint8_t>> seq;
  for (int i = 0; i < n; ++i) seq.push_back({a[i], b[i]});
  out.push_back(std::move(seq));
}

}  // namespace

CodePointRanges normalize_ranges(CodePointRanges r, bool negate) {
  // Surrogates have no UTF-8 encoding: cut them out before sorting.
  CodePointRanges cut;
  for (auto [lo, hi] : r) {
    if (lo > hi) std::swap(lo, hi);
    hi = std::min(hi, kMaxCodePoint);
    if (lo > kMaxCodePoint) continue;
    if (lo < 0xD800 && hi >= 0xD800) cut.push_back({lo, 0xD7FF});
    if (hi > 0xDFFF && lo <= 0xDFFF) cut.push_back({0xE000, hi});
    if (hi < 0xD800 || lo > 0xDFFF) cut.push_back({lo, hi});
  }
  std::sort(cut.begin(), cut.end());
  CodePointRanges merged;
  for (const auto& x : cut) {
    if (!merged.empty() && x.first <= merged.back().second + 1)
      merged.back().second = std::max(merged.back().second, x.second);
    else
      merged.push_back(x);
  }
  if (!negate) return merged;
  CodePointRanges inv;
  char32_t next = 0;
  for (const auto& [lo, hi] : merged) {
    if (lo > next) inv.push_back({next, lo - 1});
    next = hi + 1;
  }
  if (next <= kMaxCodePoint) inv.push_back({next, kMaxCodePoint});
  return normalize_ranges(inv, false);
}

int32_t GrammarBuilder::new_rule(const std::string& name) {
  // A rule costs far more than an element: its name is built, compared in the name index and
  // stored twice, and its vectors allocated (~1 µs where an element step is ~10 ns); charged as
  // such, or ten thousand helper rules of a counted repetition pass for cheap work.
  budget_->steps(kWho, kRuleSteps + name.size() / 4);
  budget_->bytes(kWho, kRuleBytes + 2 * name.size());
  const auto id = static_cast<int32_t>(names_.size());
  names_.push_back(name);
  alts_.emplace_back();
  defined_.push_back(false);
  by_name_[name] = id;
  return id;
}

int32_t GrammarBuilder::rule(const std::string& name) {
  auto it = by_name_.find(name);
  return it != by_name_.end() ? it->second : new_rule(name);
}

int32_t GrammarBuilder::helper_rule(const std::string& base) {
  for (;;) {
    budget_->steps(kWho);
    std::string name = cat(base, "_", ++helper_count_[base]);
    if (!by_name_.count(name)) {
      const int32_t id = new_rule(name);
      defined_[id] = true;  // defined by the caller right away
      return id;
    }
  }
}

void GrammarBuilder::count(size_t n) {
  LFM_CHECK(n <= kMaxElements && elements_ + n <= kMaxElements, "grammar: more than ", kMaxElements,
            " elements (a repetition bound or a schema too large)");
  elements_ += n;
  budget_->items(kWho, n, kElementBytes);
}

void GrammarBuilder::define(int32_t rule, std::vector<Sequence> alts) {
  size_t n = 0;
  for (const auto& a : alts) n += a.size() + 1;
  count(n);
  budget_->bytes(kWho, alts.size() * (sizeof(Sequence) + sizeof(int32_t)));
  alts_[rule] = std::move(alts);
  defined_[rule] = true;
}

// Looked up in maps: a linear search per set made grammars with many distinct classes quadratic.
Element GrammarBuilder::byte_set(const ByteSet& s) {
  budget_->steps(kWho);
  const std::array<uint64_t, 4> key{s.bits[0], s.bits[1], s.bits[2], s.bits[3]};
  auto [it, added] = set_index_.try_emplace(key, static_cast<int32_t>(sets_.size()));
  if (added) {
    budget_->bytes(kWho, 2 * sizeof(ByteSet) + 64);
    sets_.push_back(s);
  }
  return {Element::Kind::kBytes, it->second};
}

Element GrammarBuilder::token(const std::string& text) {
  budget_->steps(kWho);
  auto [it, added] = token_index_.try_emplace(text, static_cast<int32_t>(tokens_.size()));
  if (added) {
    budget_->bytes(kWho, 3 * text.size() + 96);
    tokens_.push_back(text);
  }
  return {Element::Kind::kToken, it->second};
}

void GrammarBuilder::append_code_point(Sequence& seq, char32_t cp) {
  uint8_t b[4];
  const int n = encode(cp, b);
  for (int i = 0; i < n; ++i) {
    ByteSet s;
    s.add(b[i]);
    seq.push_back(byte_set(s));
  }
}

Element GrammarBuilder::code_points(const CodePointRanges& ranges, const std::string& base) {
  LFM_CHECK(!ranges.empty(), "grammar: a character class that matches nothing");
  std::vector<std::vector<std::pair<uint8_t, uint8_t>>> seqs;
  budget_->steps(kWho, ranges.size());
  for (const auto& [lo, hi] : ranges) utf8_sequences(lo, hi, seqs);
  budget_->items(kWho, seqs.size(), 4 * sizeof(Element) + sizeof(Sequence));
  // All one-byte sequences share one set; longer ones become alternatives of a helper rule.
  ByteSet ascii;
  bool has_ascii = false;
  std::vector<Sequence> alts;
  for (const auto& s : seqs) {
    if (s.size() == 1) {
      ascii.add_range(s[0].first, s[0].second);
      has_ascii = true;
      continue;
    }
    Sequence alt;
    for (const auto& [lo, hi] : s) {
      ByteSet b;
      b.add_range(lo, hi);
      alt.push_back(byte_set(b));
    }
    alts.push_back(std::move(alt));
  }
  if (alts.empty()) return byte_set(ascii);
  if (has_ascii) alts.insert(alts.begin(), Sequence{byte_set(ascii)});
  const int32_t r = helper_rule(base);
  define(r, std::move(alts));
  return {Element::Kind::kRule, r};
}

int32_t GrammarBuilder::star_rule(const Element& x, const std::string& base) {
  const std::pair<int64_t, int32_t> key{static_cast<int64_t>(x.kind), x.index};
  if (auto it = star_cache_.find(key); it != star_cache_.end()) return it->second;
  const int32_t r = helper_rule(base);
  const Element self{Element::Kind::kRule, r};
  std::vector<Sequence> alts;
  size_t inlined = 0;
  if (x.kind == Element::Kind::kRule && defined_[x.index] && x.index != r) {
    for (const auto& a : alts_[x.index]) inlined += a.size() + 1;
    if (inlined <= 64 && !alts_[x.index].empty()) {
      for (Sequence a : alts_[x.index]) {
        a.push_back(self);
        alts.push_back(std::move(a));
      }
    }
  }
  if (alts.empty()) alts.push_back({x, self});
  alts.push_back({});
  define(r, std::move(alts));
  star_cache_[key] = r;
  star_of_[r] = x;
  return r;
}

Element GrammarBuilder::group(Sequence seq, const std::string& base) {
  if (seq.size() == 1) return seq[0];
  const int32_t r = helper_rule(base);
  if (seq.size() == 2 && seq[1].kind == Element::Kind::kRule) {
    auto it = star_of_.find(seq[1].index);
    if (it != star_of_.end() && it->second.kind == seq[0].kind && it->second.index == seq[0].index)
      plus_of_[r] = seq[0];
  }
  define(r, {std::move(seq)});
  return {Element::Kind::kRule, r};
}

Sequence GrammarBuilder::repeat(const Element& x, int64_t min, int64_t max, const std::string& base) {
  LFM_CHECK(min >= 0 && (max < 0 || max >= min), "grammar: bad repetition bounds {", min, ",", max, "}");
  LFM_CHECK(min <= 100000 && max <= 100000, "grammar: repetition bound {", min, ",", max,
            "} is above the limit of 100000");
  if (x.kind == Element::Kind::kRule && max != 0) {
    if (star_of_.count(x.index)) return {x};  // (y*){m,n} = y*
    if (auto it = plus_of_.find(x.index); it != plus_of_.end())  // (y+){m,n} = y+, or y* when m = 0
      return min == 0 ? Sequence{{Element::Kind::kRule, star_rule(it->second, base)}} : Sequence{x};
  }
  // Charged before anything is made: x{100000} nested in another {100000} must be refused here.
  count(static_cast<size_t>(min));
  if (max > min) {
    budget_->expect_items(kWho, static_cast<uint64_t>(max - min), kRuleBytes + 2 * base.size() + 4 * kElementBytes);
    budget_->expect_items(kWho, static_cast<uint64_t>(max - min) * (kRuleSteps + 1), 0);  // their steps too
  }
  Sequence out(static_cast<size_t>(min), x);
  if (max < 0) {
    out.push_back({Element::Kind::kRule, star_rule(x, base)});
    return out;
  }
  // x{0,k} as nested optionals: opt_k ::= x opt_{k-1} | "" (one way to match each count, so
  // the matcher never holds two stacks for the same text).
  int32_t next = -1;
  for (int64_t k = 1; k <= max - min; ++k) {
    const int32_t r = helper_rule(base);
    Sequence first{x};
    if (next >= 0) first.push_back({Element::Kind::kRule, next});
    define(r, {std::move(first), {}});
    next = r;
  }
  if (next >= 0) out.push_back({Element::Kind::kRule, next});
  return out;
}

void GrammarBuilder::inline_leaf_rules() {
  auto is_leaf = [&](int32_t r) {
    if (alts_[r].empty() || alts_[r].size() > 16) return false;
    for (const auto& a : alts_[r])
      for (const auto& e : a)
        if (e.kind == Element::Kind::kRule) return false;
    return true;
  };
  std::vector<bool> leaf(names_.size());
  for (size_t r = 0; r < names_.size(); ++r) leaf[r] = is_leaf(static_cast<int32_t>(r));
  // Each leaf's total length over its alternatives, for sizing an expansion before making it.
  std::vector<size_t> leaf_elements(names_.size(), 0);
  for (size_t r = 0; r < names_.size(); ++r)
    if (leaf[r])
      for (const auto& a : alts_[r]) leaf_elements[r] += a.size();
  for (size_t r = 0; r < names_.size(); ++r) {
    std::vector<Sequence> out;
    for (const auto& alt : alts_[r]) {
      std::vector<Sequence> expanded = {{}};
      for (const auto& e : alt) {
        const bool inline_it = e.kind == Element::Kind::kRule && leaf[e.index] && e.index != static_cast<int32_t>(r) &&
                               expanded.size() * alts_[e.index].size() <= 64;
        if (!inline_it) {
          count(expanded.size());
          for (auto& s : expanded) s.push_back(e);
          continue;
        }
        // The expansion's size (every current sequence copied once per alternative, each copy
        // growing by that alternative) is charged before it is built.
        size_t total = 0;
        for (const auto& s : expanded) total += s.size();
        count(total * (alts_[e.index].size() - 1) + expanded.size() * leaf_elements[e.index]);
        if (alts_[e.index].size() == 1) {  // appended in place: copying would be quadratic
          const Sequence& a = alts_[e.index][0];
          for (auto& s : expanded) s.insert(s.end(), a.begin(), a.end());
          continue;
        }
        budget_->steps(kWho, total * alts_[e.index].size());  // the copies
        std::vector<Sequence> next;
        for (const auto& s : expanded)
          for (const auto& a : alts_[e.index]) {
            next.push_back(s);
            next.back().insert(next.back().end(), a.begin(), a.end());
          }
        expanded = std::move(next);
      }
      count(expanded.size());  // the ends
      for (auto& s : expanded) out.push_back(std::move(s));
    }
    alts_[r] = std::move(out);
  }
}

std::vector<bool> GrammarBuilder::nullable_rules() {
  // Worklist, linear in the grammar: each alternative made only of rule references counts the
  // references not yet known nullable; a rule found nullable decrements the alternatives that
  // use it, and one reaching zero makes its rule nullable. (A fixpoint of passes over every rule
  // took one pass per link of a chain r0 ::= r1, r1 ::= r2, ...: quadratic.)
  const size_t n = names_.size();
  std::vector<bool> nullable(n, false);
  std::vector<int32_t> alt_rule, pending, work;
  std::vector<std::vector<int32_t>> users(n);  // rule → alternatives (ids) referencing it, once per use
  for (size_t r = 0; r < n; ++r)
    for (const auto& a : alts_[r]) {
      budget_->steps(kWho, a.size() + 1);
      if (!std::all_of(a.begin(), a.end(), [](const Element& e) { return e.kind == Element::Kind::kRule; })) continue;
      const auto id = static_cast<int32_t>(alt_rule.size());
      alt_rule.push_back(static_cast<int32_t>(r));
      pending.push_back(static_cast<int32_t>(a.size()));
      budget_->bytes(kWho, (a.size() + 2) * sizeof(int32_t));
      for (const auto& e : a) users[e.index].push_back(id);
      if (a.empty()) work.push_back(static_cast<int32_t>(r));
    }
  while (!work.empty()) {
    const int32_t r = work.back();
    work.pop_back();
    if (nullable[r]) continue;
    nullable[r] = true;
    budget_->steps(kWho, users[r].size() + 1);
    for (int32_t id : users[r])
      if (--pending[id] == 0) work.push_back(alt_rule[id]);
  }
  return nullable;
}

Grammar GrammarBuilder::finish(const std::string& root) {
  auto it = by_name_.find(root);
  LFM_CHECK(it != by_name_.end() && defined_[it->second], "grammar: no rule named '", root, "' (the start rule)");
  for (size_t r = 0; r < names_.size(); ++r)
    LFM_CHECK(defined_[r], "grammar: rule '", names_[r], "' is used but never defined");
  const size_t n = names_.size();
  const std::vector<bool> nullable = nullable_rules();
  // Left recursion: a rule reaching itself through leftmost references (past nullable ones)
  // would make the matcher's closure loop forever.
  std::vector<std::vector<int32_t>> left(n);
  for (size_t r = 0; r < n; ++r)
    for (const auto& a : alts_[r])
      for (const auto& e : a) {
        budget_->steps(kWho);
        if (e.kind != Element::Kind::kRule) break;
        left[r].push_back(e.index);
        if (!nullable[e.index]) break;
      }
  // Depth-first search for a cycle, with an explicit stack (rule chains can be long).
  std::vector<uint8_t> state(n, 0);  // 0 unseen, 1 on the path, 2 done
  std::vector<std::pair<int32_t, size_t>> path;  // (rule, next edge)
  for (size_t start = 0; start < n; ++start) {
    if (state[start]) continue;
    path.push_back({static_cast<int32_t>(start), 0});
    state[start] = 1;
    while (!path.empty()) {
      auto& [r, edge] = path.back();
      if (edge == left[r].size()) {
        state[r] = 2;
        path.pop_back();
        continue;
      }
      budget_->steps(kWho);
      const int32_t c = left[r][edge++];
      LFM_CHECK(state[c] != 1, "grammar: rule '", names_[c],
                "' is left-recursive (it can reach itself before matching any byte)");
      if (state[c] == 0) {
        state[c] = 1;
        path.push_back({c, 0});
      }
    }
  }

  inline_leaf_rules();
  Grammar g;
  g.rule_names = names_;
  g.byte_sets = sets_;
  g.token_texts = tokens_;
  g.root = it->second;
  g.rule_alts.resize(n);
  for (size_t r = 0; r < n; ++r)
    for (const auto& a : alts_[r]) {
      g.rule_alts[r].push_back(static_cast<int32_t>(g.elements.size()));
      g.elements.insert(g.elements.end(), a.begin(), a.end());
      g.elements.push_back({Element::Kind::kEnd, -1});
    }
  return g;
}

}  // namespace lfm::grammar
