// Whole-text matching and printing of a Grammar.
#include <cstdio>
#include <string>

#include "grammar/grammar.h"
#include "grammar/grammar_stacks.h"

namespace lfm::grammar {

namespace {

// The state after `text`, or nothing (empty Tops) once no stack survives.
Tops run_text(StackStore& store, std::string_view text) {
  Tops cur = store.start(), next;
  for (char c : text) {
    if (cur.stacks.empty()) return {};
    store.advance(cur, static_cast<uint8_t>(c), next);
    std::swap(cur, next);
  }
  return cur;
}

std::string byte_set_text(const ByteSet& s) {
  std::string out = "[";
  auto put = [&](int b) {
    char buf[8];
    if (b >= 0x20 && b < 0x7F && b != '\\' && b != ']' && b != '-' && b != '^') {
      out += static_cast<char>(b);
    } else {
      std::snprintf(buf, sizeof buf, "\\x%02X", b);
      out += buf;
    }
  };
  for (int b = 0; b < 256;) {
    if (!s.has(static_cast<uint8_t>(b))) {
      ++b;
      continue;
    }
    int e = b;
    while (e + 1 < 256 && s.has(static_cast<uint8_t>(e + 1))) ++e;
    put(b);
    if (e > b) {
      out += '-';
      put(e);
    }
    b = e + 1;
  }
  return out + "]";
}

}  // namespace

bool grammar_accepts(const Grammar& g, std::string_view text) {
  StackStore store(g);
  const Tops end = run_text(store, text);
  // Every byte consumed (a failed byte leaves no stacks and no accept).
  return end.accept;
}

bool grammar_accepts_prefix(const Grammar& g, std::string_view text) {
  StackStore store(g);
  const Tops end = run_text(store, text);
  return !end.stacks.empty() || end.accept;
}

std::string to_gbnf(const Grammar& g) {
  std::string out;
  for (size_t r = 0; r < g.rule_alts.size(); ++r) {
    out += g.rule_names[r] + " ::=";
    for (size_t a = 0; a < g.rule_alts[r].size(); ++a) {
      if (a) out += " |";
      for (int32_t p = g.rule_alts[r][a]; g.elements[static_cast<size_t>(p)].kind != Element::Kind::kEnd; ++p) {
        const Element& e = g.elements[static_cast<size_t>(p)];
        out += ' ';
        if (e.kind == Element::Kind::kBytes)
          out += byte_set_text(g.byte_sets[static_cast<size_t>(e.index)]);
        else if (e.kind == Element::Kind::kRule)
          out += g.rule_names[static_cast<size_t>(e.index)];
        else
          out += g.token_texts[static_cast<size_t>(e.index)];
      }
      if (g.elements[static_cast<size_t>(g.rule_alts[r][a])].kind == Element::Kind::kEnd) out += " \"\"";
    }
    out += '\n';
  }
  return out;
}

}  // namespace lfm::grammar
