// Token-level constrained decoding for one request: which tokens the grammar allows next (a
// bitset over the vocabulary), acceptance of the chosen token, rollback of the last tokens
// (speculative decoding), and the text the grammar forces next (jump-forward).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "grammar/grammar_stacks.h"
#include "grammar/token_grammar.h"

namespace lfm::grammar {

class GrammarMatcher {
 public:
  // stop_ids: tokens allowed (and ending the match) where the grammar may end, e.g. the model's
  // end-of-sequence ids.
  GrammarMatcher(std::shared_ptr<const TokenGrammar> tg, std::vector<int32_t> stop_ids);

  int64_t mask_words() const { return tg_->mask_words(); }
  // Sets bits[id / 64] bit id % 64 for every token allowed next; clears the others.
  void fill_mask(uint64_t* bits);
  // Whether `token` is allowed next (without a mask).
  bool allows(int32_t token);
  // Advances by `token`; false, with the state unchanged, when the grammar does not allow it.
  bool accept(int32_t token);
  // The last n accepted tokens undone (n <= accepted()).
  void rollback(size_t n);
  size_t accepted() const { return history_.size(); }

  // The text so far is complete (a stop id may come next).
  bool can_end() const { return cur_.accept; }
  // A stop id was accepted, or the text is complete and nothing can follow it.
  bool finished() const { return stopped_ || (cur_.accept && cur_.stacks.empty()); }
  // Bytes every continuation starts with (at most max), e.g. the rest of a property name; empty
  // when the next byte is open or the text may end here.
  std::string forced_bytes(size_t max) const;

 private:
  struct State {
    Tops tops;
    bool stopped;
  };
  bool is_stop(int32_t token) const;
  // The uncertain tokens of a position (ids) whose bytes match from the single stack `frame`.
  void check_uncertain(int32_t frame, const std::vector<int32_t>& ids, std::vector<int32_t>& out);
  // check_uncertain's answer per stack: a stack is one interned frame id for the matcher's life,
  // and inside a string it stays the same step after step (tail calls), so the check runs once.
  const std::vector<int32_t>& uncertain_matches(int32_t frame, const std::vector<int32_t>& ids);

  std::shared_ptr<const TokenGrammar> tg_;
  std::vector<int32_t> stop_ids_;
  mutable StackStore store_;
  Tops cur_;
  bool stopped_ = false;
  std::vector<State> history_;
  std::vector<int32_t> scratch_;  // per depth: the DFA state of the token checked
  std::vector<int32_t> seen_pos_;
  // A lazily built DFA over the states the uncertain checks visit: each distinct state (set of
  // stacks) gets an id and each (state, byte) step is computed once, so checking thousands of
  // tokens per step costs a hash lookup per byte. Cleared when it grows past a bound.
  int32_t dfa_state(const Tops& t);
  int32_t dfa_step(int32_t state, uint8_t byte);  // -1: no path survives
  std::vector<Tops> dfa_states_;
  std::unordered_map<std::string, int32_t> dfa_index_;
  std::unordered_map<uint64_t, int32_t> dfa_next_;
  Tops dfa_tmp_;
  std::unordered_map<int32_t, std::vector<int32_t>> uncertain_cache_;
  size_t uncertain_cached_ = 0;  // ids held by uncertain_cache_ (cleared past a bound)
};

}  // namespace lfm::grammar
