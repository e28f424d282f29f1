#include "grammar/grammar_matcher.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace lfm::grammar {

GrammarMatcher::GrammarMatcher(std::shared_ptr<const TokenGrammar> tg, std::vector<int32_t> stop_ids)
    : tg_(std::move(tg)), stop_ids_(std::move(stop_ids)), store_(tg_->grammar()) {
  cur_ = store_.start();
}

bool GrammarMatcher::is_stop(int32_t token) const {
  return std::find(stop_ids_.begin(), stop_ids_.end(), token) != stop_ids_.end();
}

int32_t GrammarMatcher::dfa_state(const Tops& t) {
  std::string key(reinterpret_cast<const char*>(t.stacks.data()), t.stacks.size() * sizeof(int32_t));
  key += static_cast<char>(t.accept);
  auto [it, inserted] = dfa_index_.try_emplace(std::move(key), static_cast<int32_t>(dfa_states_.size()));
  if (inserted) dfa_states_.push_back(t);
  return it->second;
}

int32_t GrammarMatcher::dfa_step(int32_t state, uint8_t byte) {
  const uint64_t key = (static_cast<uint64_t>(state) << 8) | byte;
  if (auto it = dfa_next_.find(key); it != dfa_next_.end()) return it->second;
  store_.advance(dfa_states_[static_cast<size_t>(state)], byte, dfa_tmp_);
  const int32_t next = dfa_tmp_.stacks.empty() && !dfa_tmp_.accept ? -1 : dfa_state(dfa_tmp_);
  dfa_next_.emplace(key, next);
  return next;
}

const std::vector<int32_t>& GrammarMatcher::uncertain_matches(int32_t frame, const std::vector<int32_t>& ids) {
  if (auto it = uncertain_cache_.find(frame); it != uncertain_cache_.end()) return it->second;
  if (uncertain_cached_ > (size_t{1} << 22)) {  // bounded memory over a long generation
    uncertain_cache_.clear();
    uncertain_cached_ = 0;
  }
  std::vector<int32_t> out;
  check_uncertain(frame, ids, out);
  uncertain_cached_ += out.size() + 1;
  return uncertain_cache_.emplace(frame, std::move(out)).first->second;
}

void GrammarMatcher::check_uncertain(int32_t frame, const std::vector<int32_t>& ids, std::vector<int32_t>& out) {
  const TokenVocabulary& v = tg_->vocab();
  if (dfa_states_.size() > (1u << 16)) {  // bounded memory over a long generation
    dfa_states_.clear();
    dfa_index_.clear();
    dfa_next_.clear();
  }
  size_t valid = 0;
  const std::string* prev = nullptr;
  if (scratch_.empty()) scratch_.resize(1);
  scratch_[0] = dfa_state(store_.closure_of(frame));
  for (int32_t id : ids) {
    const std::string& b = v.bytes(id);
    if (scratch_.size() < b.size() + 1) scratch_.resize(b.size() + 1);
    size_t d = 0;
    if (prev) {
      while (d < valid && d < b.size() && d < prev->size() && (*prev)[d] == b[d]) ++d;
    }
    while (d < b.size() && scratch_[d] >= 0) {
      scratch_[d + 1] = dfa_step(scratch_[d], static_cast<uint8_t>(b[d]));
      ++d;
    }
    valid = d;
    prev = &b;
    // Matched when every byte was consumed by some path (a frame below may also end the root).
    if (d == b.size() && scratch_[d] >= 0) out.push_back(id);
  }
}

void GrammarMatcher::fill_mask(uint64_t* bits) {
  const size_t words = static_cast<size_t>(mask_words());
  std::memset(bits, 0, words * sizeof(uint64_t));
  if (finished()) {
    // Only a stop id can follow a complete text with nothing after it.
    if (!stopped_)
      for (int32_t s : stop_ids_) bits[static_cast<size_t>(s) >> 6] |= uint64_t{1} << (s & 63);
    return;
  }
  const Grammar& g = tg_->grammar();
  // Accepted sets first (one OR per distinct top position), then the uncertain checks.
  seen_pos_.clear();
  for (int32_t f : cur_.stacks) {
    const int32_t pos = store_[f].pos;
    const Element& e = g.elements[static_cast<size_t>(pos)];
    if (e.kind == Element::Kind::kToken) {
      const int32_t id = tg_->token_id(e.index);
      bits[static_cast<size_t>(id) >> 6] |= uint64_t{1} << (id & 63);
      continue;
    }
    if (std::find(seen_pos_.begin(), seen_pos_.end(), pos) != seen_pos_.end()) continue;
    seen_pos_.push_back(pos);
    tg_->position_mask(pos)->add_accepted(bits);
  }
  for (int32_t f : cur_.stacks) {
    const int32_t pos = store_[f].pos;
    if (g.elements[static_cast<size_t>(pos)].kind != Element::Kind::kBytes) continue;
    const auto pm = tg_->position_mask(pos);
    if (pm->uncertain.empty()) continue;
    for (int32_t id : uncertain_matches(f, pm->uncertain)) bits[static_cast<size_t>(id) >> 6] |= uint64_t{1} << (id & 63);
  }
  if (cur_.accept)
    for (int32_t s : stop_ids_) bits[static_cast<size_t>(s) >> 6] |= uint64_t{1} << (s & 63);
}

bool GrammarMatcher::allows(int32_t token) {
  if (token < 0 || token >= tg_->vocab().size() || stopped_) return false;
  if (is_stop(token)) return cur_.accept;
  const Grammar& g = tg_->grammar();
  for (int32_t f : cur_.stacks) {
    const Element& e = g.elements[static_cast<size_t>(store_[f].pos)];
    if (e.kind == Element::Kind::kToken && tg_->token_id(e.index) == token) return true;
  }
  const std::string& b = tg_->vocab().bytes(token);
  if (b.empty()) return false;
  Tops a = cur_, next;
  for (char c : b) {
    if (a.stacks.empty()) return false;
    store_.advance(a, static_cast<uint8_t>(c), next);
    std::swap(a, next);
  }
  return !a.stacks.empty() || a.accept;
}

bool GrammarMatcher::accept(int32_t token) {
  if (!allows(token)) return false;
  history_.push_back({cur_, stopped_});
  if (is_stop(token)) {
    stopped_ = true;
    return true;
  }
  // The paths that match it as a named token and those that match its bytes (an added token
  // not marked special can be both), merged.
  const Grammar& g = tg_->grammar();
  Tops as_token;
  for (size_t t = 0; t < g.token_texts.size(); ++t)
    if (tg_->token_id(static_cast<int32_t>(t)) == token) store_.advance_token(cur_, static_cast<int32_t>(t), as_token);
  const std::string& b = tg_->vocab().bytes(token);
  if (!b.empty()) {
    Tops next;
    for (char c : b) {
      store_.advance(cur_, static_cast<uint8_t>(c), next);
      std::swap(cur_, next);
    }
  } else {
    cur_ = Tops{};
  }
  cur_.accept = cur_.accept || as_token.accept;
  cur_.stacks.insert(cur_.stacks.end(), as_token.stacks.begin(), as_token.stacks.end());
  std::sort(cur_.stacks.begin(), cur_.stacks.end());
  cur_.stacks.erase(std::unique(cur_.stacks.begin(), cur_.stacks.end()), cur_.stacks.end());
  return true;
}

void GrammarMatcher::rollback(size_t n) {
  LFM_CHECK(n <= history_.size(), "grammar: rollback of ", n, " tokens after ", history_.size());
  for (; n > 0; --n) {
    cur_ = std::move(history_.back().tops);
    stopped_ = history_.back().stopped;
    history_.pop_back();
  }
}

std::string GrammarMatcher::forced_bytes(size_t max) const {
  std::string out;
  const Grammar& g = tg_->grammar();
  Tops a = cur_, next;
  while (out.size() < max && !a.accept && !a.stacks.empty()) {
    // One byte shared by every stack's set, or stop.
    int only = -1;
    for (int32_t f : a.stacks) {
      const Element& e = g.elements[static_cast<size_t>(store_[f].pos)];
      if (e.kind != Element::Kind::kBytes) return out;
      const ByteSet& s = g.byte_sets[static_cast<size_t>(e.index)];
      for (int b = 0; b < 256; ++b) {
        if (!s.has(static_cast<uint8_t>(b))) continue;
        if (only >= 0 && only != b) return out;
        only = b;
      }
    }
    out += static_cast<char>(only);
    store_.advance(a, static_cast<uint8_t>(only), next);
    std::swap(a, next);
  }
  return out;
}

}  // namespace lfm::grammar
