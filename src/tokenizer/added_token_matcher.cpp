#include "tokenizer/added_token_matcher.h"

#include <algorithm>
#include <map>

#include "tokenizer/regex_splitter.h"
#include "core/utf8.h"

namespace lfm::tok {
namespace {

// Unicode-aware character classes for the single_word / strip rules. HF uses the Rust regexes
// \w and \s here; PCRE2 with UCP gives the same Unicode definitions.
struct CharClassRegex {
  RegexSplitter word{"\\w"};
  RegexSplitter space{"\\s"};
};

bool matches_whole(const RegexSplitter& re, char32_t cp) {
  std::string s;
  append_utf8(s, cp);
  return re.matches_entirely(s);
}

const CharClassRegex& char_classes() {
  static const CharClassRegex c;
  return c;
}

bool is_word_char(char32_t cp) {
  if (cp < 0x80) return (cp >= '0' && cp <= '9') || (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z') || cp == '_';
  return matches_whole(char_classes().word, cp);
}

bool is_space_char(char32_t cp) {
  if (cp < 0x80) return cp == ' ' || (cp >= 0x09 && cp <= 0x0D);
  return matches_whole(char_classes().space, cp);
}

// Last / first code point of a (valid UTF-8) string.
char32_t last_code_point(std::string_view s) {
  size_t i = s.size() - 1;
  while (i > 0 && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80) --i;
  return next_code_point(s, i);
}
char32_t first_code_point(std::string_view s) {
  size_t i = 0;
  return next_code_point(s, i);
}

}  // namespace

AddedTokenMatcher::AddedTokenMatcher(const std::vector<AddedToken>& tokens) {
  // Build a map-based trie first, then flatten it into sorted edge lists. The build nodes live in
  // one vector and refer to their children by index: a chain of owning pointers would be freed
  // recursively, one stack frame per byte, and a single added token of ~1 MB (one trie level per
  // byte) would overflow the stack when the builder is destroyed.
  struct BuildNode {
    std::map<unsigned char, uint32_t> children;  // byte → index into `build`
    int token = -1;
  };
  std::vector<BuildNode> build(1);
  for (const AddedToken& t : tokens) {
    if (t.content.empty()) continue;  // HF ignores empty added tokens
    uint32_t n = 0;
    for (unsigned char b : t.content) {
      auto [it, inserted] = build[n].children.try_emplace(b, 0);
      if (inserted) {
        it->second = static_cast<uint32_t>(build.size());
        build.emplace_back();  // invalidates `it` and references into `build`; n is an index
      }
      n = build[n].children.at(b);
    }
    if (build[n].token < 0) {  // a duplicate content keeps its first token
      build[n].token = static_cast<int>(tokens_.size());
      tokens_.push_back(t);
      starts_token_[static_cast<unsigned char>(t.content[0])] = true;
    }
  }
  // Breadth-first flattening keeps each node's edges contiguous.
  std::vector<uint32_t> order{0};
  order.reserve(build.size());
  nodes_.reserve(build.size());
  edges_.reserve(build.size() - 1);
  nodes_.push_back({});
  for (size_t i = 0; i < order.size(); ++i) {
    const BuildNode& b = build[order[i]];
    nodes_[i].token = b.token;
    nodes_[i].first_edge = static_cast<uint32_t>(edges_.size());
    nodes_[i].edge_count = static_cast<uint32_t>(b.children.size());
    for (const auto& [byte, child] : b.children) {
      edges_.push_back({byte, static_cast<uint32_t>(order.size())});
      order.push_back(child);
      nodes_.push_back({});
    }
  }
}

int AddedTokenMatcher::longest_match_at(std::string_view text, size_t pos) const {
  int best = -1;
  uint32_t node = 0;
  for (size_t i = pos; i < text.size(); ++i) {
    const Node& n = nodes_[node];
    const auto b = static_cast<unsigned char>(text[i]);
    const Edge* first = edges_.data() + n.first_edge;
    const Edge* last = first + n.edge_count;
    const Edge* e = std::lower_bound(first, last, b, [](const Edge& x, unsigned char v) { return x.byte < v; });
    if (e == last || e->byte != b) break;
    node = e->child;
    if (nodes_[node].token >= 0) best = nodes_[node].token;
  }
  return best;
}

void AddedTokenMatcher::split(std::string_view text, std::vector<TextSegment>& out) const {
  size_t consumed = 0;  // end of the last emitted added token
  size_t pos = 0;
  while (pos < text.size()) {
    if (!starts_token_[static_cast<unsigned char>(text[pos])]) {
      ++pos;
      continue;
    }
    const int k = longest_match_at(text, pos);
    if (k < 0) {
      ++pos;
      continue;
    }
    const AddedToken& t = tokens_[k];
    size_t start = pos, stop = pos + t.content.size();
    if (t.single_word) {
      const bool free_left = start == 0 || !is_word_char(last_code_point(text.substr(0, start)));
      const bool free_right = stop == text.size() || !is_word_char(first_code_point(text.substr(stop)));
      if (!free_left || !free_right) {
        // HF discards this match and resumes scanning after it (matches never overlap).
        pos = stop;
        continue;
      }
    }
    if (t.lstrip) {
      // Swallow whitespace before the token, but never text already claimed by the previous one.
      while (start > consumed) {
        size_t cp_start = start - 1;
        while (cp_start > consumed && (static_cast<unsigned char>(text[cp_start]) & 0xC0) == 0x80) --cp_start;
        size_t i = cp_start;
        if (!is_space_char(next_code_point(text, i))) break;
        start = cp_start;
      }
    }
    if (t.rstrip) {
      while (stop < text.size()) {
        size_t i = stop;
        if (!is_space_char(next_code_point(text, i))) break;
        stop = i;
      }
    }
    if (start > consumed) out.push_back({consumed, start, -1});
    out.push_back({start, stop, t.id});
    consumed = pos = stop;
  }
  if (consumed < text.size()) out.push_back({consumed, text.size(), -1});
}

}  // namespace lfm::tok
