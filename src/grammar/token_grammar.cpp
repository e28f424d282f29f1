#include "grammar/token_grammar.h"

#include <algorithm>
#include <numeric>

#include "core/error.h"
#include "grammar/grammar_stacks.h"

namespace lfm::grammar {

TokenVocabulary::TokenVocabulary(std::vector<std::string> bytes, std::vector<std::pair<std::string, int32_t>> special)
    : bytes_(std::move(bytes)) {
  for (auto& [text, id] : special) {
    LFM_CHECK(id >= 0 && id < size(), "grammar: special token '", text, "' has id ", id, " outside the vocabulary");
    special_.emplace(text, id);
  }
  for (int32_t id = 0; id < static_cast<int32_t>(bytes_.size()); ++id)
    if (!bytes_[static_cast<size_t>(id)].empty()) sorted_.push_back(id);
  std::sort(sorted_.begin(), sorted_.end(), [&](int32_t a, int32_t b) {
    return bytes_[static_cast<size_t>(a)] < bytes_[static_cast<size_t>(b)] ||
           (bytes_[static_cast<size_t>(a)] == bytes_[static_cast<size_t>(b)] && a < b);
  });
  lcp_.assign(sorted_.size(), 0);
  for (size_t i = 1; i < sorted_.size(); ++i) {
    const std::string& a = bytes_[static_cast<size_t>(sorted_[i - 1])];
    const std::string& b = bytes_[static_cast<size_t>(sorted_[i])];
    size_t k = 0;
    while (k < a.size() && k < b.size() && k < 65535 && a[k] == b[k]) ++k;
    lcp_[i] = static_cast<uint16_t>(k);
  }
}

int32_t TokenVocabulary::special_id(const std::string& text) const {
  auto it = special_.find(text);
  return it == special_.end() ? -1 : it->second;
}

TokenGrammar::TokenGrammar(std::shared_ptr<const Grammar> g, std::shared_ptr<const TokenVocabulary> vocab,
                           size_t max_cached_bytes)
    : g_(std::move(g)), vocab_(std::move(vocab)), max_cached_bytes_(max_cached_bytes) {
  for (const std::string& text : g_->token_texts) {
    const int32_t id = vocab_->special_id(text);
    LFM_CHECK(id >= 0, "grammar: the special token ", text, " is not in the model's vocabulary");
    token_ids_.push_back(id);
  }
}

std::shared_ptr<const PositionMask> TokenGrammar::position_mask(int32_t pos) const {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = cache_.find(pos);
    if (it != cache_.end()) return it->second;
  }
  // Computed outside the lock (two threads may both compute one; the first stored wins).
  auto m = std::make_shared<const PositionMask>(compute(pos));
  std::lock_guard<std::mutex> lock(mu_);
  const size_t bytes = m->bytes() + 64;  // + the map node
  if (cached_bytes_ + bytes > max_cached_bytes_) return m;  // full: used once, not kept
  auto [it, inserted] = cache_.try_emplace(pos, std::move(m));
  if (inserted) cached_bytes_ += bytes;
  return it->second;
}

size_t TokenGrammar::footprint() const {
  const Grammar& g = *g_;
  size_t n = sizeof(Grammar) + sizeof(*this) + g.elements.size() * sizeof(Element) +
             g.byte_sets.size() * sizeof(ByteSet) + token_ids_.size() * sizeof(int32_t);
  for (size_t r = 0; r < g.rule_alts.size(); ++r)
    n += 2 * sizeof(std::string) + g.rule_names[r].size() + g.rule_alts[r].size() * sizeof(int32_t);
  for (const auto& t : g.token_texts) n += sizeof(std::string) + t.size();
  return n + cached_bytes();
}

void TokenGrammar::precompute_all() const {
  for (size_t p = 0; p < g_->elements.size(); ++p)
    if (g_->elements[p].kind == Element::Kind::kBytes) position_mask(static_cast<int32_t>(p));
}

size_t TokenGrammar::cached_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return cached_bytes_;
}

void PositionMask::add_accepted(uint64_t* bits) const {
  if (!accepted_bits.empty()) {
    for (size_t w = 0; w < accepted_bits.size(); ++w) bits[w] |= accepted_bits[w];
    return;
  }
  for (int32_t id : accepted_ids) bits[static_cast<size_t>(id) >> 6] |= uint64_t{1} << (id & 63);
}

size_t TokenGrammar::cached_positions() const {
  std::lock_guard<std::mutex> lock(mu_);
  return cache_.size();
}

PositionMask TokenGrammar::compute(int32_t pos) const {
  const TokenVocabulary& v = *vocab_;
  const auto& sorted = v.sorted();
  const auto& lcp = v.lcp();
  PositionMask m;
  auto accept = [&](int32_t id) { m.accepted_ids.push_back(id); };

  StackStore store(*g_);
  size_t max_len = 0;
  for (int32_t id : sorted) max_len = std::max(max_len, v.bytes(id).size());
  // st[d]: the in-frame state after d bytes of the current token; below[d]: whether some path
  // popped past the frame within the first d bytes.
  std::vector<Tops> st(max_len + 1);
  std::vector<uint8_t> below(max_len + 1, 0);
  st[0] = store.closure_of(store.frame(pos, kBottom));
  size_t valid = 0;  // st[0..valid] hold the previous token's prefix states
  const size_t n = sorted.size();
  for (size_t i = 0; i < n; ++i) {
    const int32_t id = sorted[i];
    const std::string& b = v.bytes(id);
    size_t d = i == 0 ? 0 : std::min<size_t>(lcp[i], valid);
    bool dead = false;
    while (d < b.size()) {
      if (st[d].stacks.empty()) {
        dead = true;
        break;
      }
      store.advance(st[d], static_cast<uint8_t>(b[d]), st[d + 1]);
      below[d + 1] = below[d] || st[d + 1].bottom;
      ++d;
    }
    valid = d;
    if (!dead) {
      if (!st[d].stacks.empty() || st[d].bottom)
        accept(id);
      else if (below[d])
        m.uncertain.push_back(id);
      continue;
    }
    // No in-frame path goes past byte d: every token sharing these d bytes is classified alike.
    const bool uncertain = below[d];
    if (uncertain) m.uncertain.push_back(id);
    size_t common = SIZE_MAX;
    while (i + 1 < n) {
      common = std::min<size_t>(common, lcp[i + 1]);
      if (common < d) break;
      ++i;
      if (uncertain) m.uncertain.push_back(sorted[i]);
    }
  }
  // A bitset once the list would be larger than it.
  if (static_cast<int64_t>(m.accepted_ids.size()) * 32 > v.size()) {
    m.accepted_bits.assign(static_cast<size_t>(mask_words()), 0);
    for (int32_t id : m.accepted_ids) m.accepted_bits[static_cast<size_t>(id) >> 6] |= uint64_t{1} << (id & 63);
    m.accepted_ids.clear();
    m.accepted_ids.shrink_to_fit();
  }
  return m;
}

}  // namespace lfm::grammar
