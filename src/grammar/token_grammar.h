// A grammar bound to a tokenizer's vocabulary, with the per-position mask cache that makes the
// per-step token mask cheap (the idea of XGrammar's adaptive token mask cache):
//
// For every grammar position P that can be the top of a stack (a byte-set element), the
// vocabulary is walked once, in sorted byte order so that tokens sharing a prefix share the
// work, with only P's own frame on the stack and an unknown frame below it. A token is then
//   * accepted: its bytes are matched within the frame (or end exactly where the frame ends),
//     whatever lies below: allowed in every context;
//   * rejected: no path consumes its bytes, even before reaching the frame's end;
//   * uncertain: a path reaches the frame's end with bytes left, which only the real stack
//     below can judge (a string's closing quote followed by `,`).
// A step's mask is then the union over the state's stacks of accepted(P) plus the uncertain
// tokens that pass a check against the full stack: a handful in the common states.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "grammar/grammar.h"

namespace lfm::grammar {

// The vocabulary as the matcher sees it: each token's bytes, sorted.
class TokenVocabulary {
 public:
  // bytes[id]: the bytes token id adds to the text (empty: never allowed by bytes: undecodable
  // ids and special tokens); special: tokens a grammar may name as <|text|> elements;
  // stop_ids: allowed where the grammar may end (end of sequence, the request's stop ids).
  TokenVocabulary(std::vector<std::string> bytes, std::vector<std::pair<std::string, int32_t>> special);

  int64_t size() const { return static_cast<int64_t>(bytes_.size()); }
  const std::string& bytes(int32_t id) const { return bytes_[static_cast<size_t>(id)]; }
  // Ids with bytes, in byte order; lcp[i]: the common prefix length of sorted[i-1] and sorted[i].
  const std::vector<int32_t>& sorted() const { return sorted_; }
  const std::vector<uint16_t>& lcp() const { return lcp_; }
  // The id of a special token's text, or -1.
  int32_t special_id(const std::string& text) const;

 private:
  std::vector<std::string> bytes_;
  std::vector<int32_t> sorted_;
  std::vector<uint16_t> lcp_;
  std::unordered_map<std::string, int32_t> special_;
};

// What one stack top allows (see the file comment). The accepted tokens are kept as a bitset
// over token ids when many, else as a list (most positions, inside literals, accept a handful).
struct PositionMask {
  std::vector<uint64_t> accepted_bits;  // empty when accepted_ids holds them
  std::vector<int32_t> accepted_ids;
  std::vector<int32_t> uncertain;  // token ids in sorted (byte) order
  // ORs the accepted tokens into bits.
  void add_accepted(uint64_t* bits) const;
  size_t bytes() const { return (accepted_bits.size() * 2 + accepted_ids.size() + uncertain.size()) * 4; }
};

class TokenGrammar {
 public:
  // Masks beyond this many bytes are computed but not kept (a grammar with millions of positions
  // over a large vocabulary would otherwise keep gigabytes).
  static constexpr size_t kDefaultMaxCachedBytes = size_t{64} << 20;

  // Throws lfm::Error when the grammar names a special token the vocabulary lacks.
  TokenGrammar(std::shared_ptr<const Grammar> g, std::shared_ptr<const TokenVocabulary> vocab,
               size_t max_cached_bytes = kDefaultMaxCachedBytes);

  const Grammar& grammar() const { return *g_; }
  const TokenVocabulary& vocab() const { return *vocab_; }
  int64_t mask_words() const { return (vocab_->size() + 63) / 64; }
  // Token id of the grammar's special token element (Grammar::token_texts index).
  int32_t token_id(int32_t token_index) const { return token_ids_[static_cast<size_t>(token_index)]; }

  // The mask for stacks topped by the byte set at grammar position `pos`, computed on first use
  // and kept while the cache is under its byte limit (thread-safe).
  std::shared_ptr<const PositionMask> position_mask(int32_t pos) const;
  // Computes every position's mask now (e.g. on a thread of its own right after compiling).
  void precompute_all() const;
  size_t cached_positions() const;
  size_t cached_bytes() const;  // memory the cached masks hold
  // Approximate memory this grammar holds now: its elements, rules and sets, and its masks (the
  // vocabulary is shared by every grammar of an engine and not counted).
  size_t footprint() const;

 private:
  PositionMask compute(int32_t pos) const;

  std::shared_ptr<const Grammar> g_;
  std::shared_ptr<const TokenVocabulary> vocab_;
  std::vector<int32_t> token_ids_;
  mutable std::mutex mu_;
  size_t max_cached_bytes_;
  mutable std::unordered_map<int32_t, std::shared_ptr<const PositionMask>> cache_;
  mutable size_t cached_bytes_ = 0;
};

}  // namespace lfm::grammar
