#include "tokenizer/bpe_model.h"

#include <queue>

#include "core/error.h"
#include "tokenizer/byte_level.h"

namespace lfm::tok {

BpeModel::BpeModel(const TokenIdMap& token_ids, const std::vector<std::pair<std::string, std::string>>& merges,
                   bool ignore_merges)
    : token_ids_(token_ids), ignore_merges_(ignore_merges) {
  for (int b = 0; b < 256; ++b) {
    auto it = token_ids_.find(byte_to_symbol(static_cast<unsigned char>(b)));
    byte_ids_[b] = it == token_ids_.end() ? -1 : it->second;
  }
  merges_.reserve(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    // Plain references, not a structured binding: clang before 16 cannot capture bindings in the
    // lambda below (the fuzzing build uses clang 14).
    const std::string& left = merges[rank].first;
    const std::string& right = merges[rank].second;
    auto find = [&](const std::string& tok) {
      auto it = token_ids_.find(tok);
      LFM_CHECK(it != token_ids_.end(), "tokenizer: merge ", rank, " ('", left, "' '", right, "') uses token '", tok,
                "' which is not in the vocabulary");
      return it->second;
    };
    const int32_t l = find(left), r = find(right), merged = find(left + right);
    const uint64_t key = (static_cast<uint64_t>(static_cast<uint32_t>(l)) << 32) | static_cast<uint32_t>(r);
    // A repeated pair takes its LAST rank: HF collects the list into a hash map, where later
    // entries overwrite earlier ones.
    merges_.insert_or_assign(key, MergeResult{static_cast<int32_t>(rank), merged});
  }
}

void BpeModel::encode(std::string_view raw_piece, std::vector<int32_t>& out) const {
  if (raw_piece.empty()) return;
  if (raw_piece.size() == 1) {  // nothing to merge
    if (byte_ids_[static_cast<unsigned char>(raw_piece[0])] >= 0) out.push_back(byte_ids_[static_cast<unsigned char>(raw_piece[0])]);
    return;
  }
  const bool cacheable = raw_piece.size() <= kMaxCachedPieceBytes;
  if (cacheable) {
    std::lock_guard lock(cache_mutex_);
    if (auto it = cache_.find(raw_piece); it != cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<int32_t> ids;
  if (ignore_merges_) {
    // HF's ignore_merges: a pre-token that is itself a vocab entry is emitted whole, even when
    // the merge order would have split it differently.
    if (auto it = token_ids_.find(bytes_to_symbols(raw_piece)); it != token_ids_.end()) ids.push_back(it->second);
  }
  if (ids.empty()) merge(raw_piece, ids);
  out.insert(out.end(), ids.begin(), ids.end());
  if (cacheable) {
    std::lock_guard lock(cache_mutex_);
    if (cache_.size() >= kMaxCacheEntries) cache_.clear();
    cache_.emplace(std::string(raw_piece), std::move(ids));
  }
}

void BpeModel::merge(std::string_view raw_piece, std::vector<int32_t>& out) const {
  // Symbols form a doubly linked list over positions; a merged-away symbol gets id -1.
  struct Symbol {
    int32_t id;
    int32_t prev, next;
  };
  std::vector<Symbol> sym;
  sym.reserve(raw_piece.size());
  for (unsigned char b : raw_piece) {
    // A byte missing from the vocab is dropped, as HF does when there is no unk token.
    if (byte_ids_[b] < 0) continue;
    const auto n = static_cast<int32_t>(sym.size());
    sym.push_back({byte_ids_[b], n - 1, n + 1});
  }
  if (sym.empty()) return;
  sym.back().next = -1;

  struct Candidate {
    int32_t rank, pos, left_id, right_id;
    // std::priority_queue pops the largest: invert so the lowest rank, then leftmost, wins.
    bool operator<(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Candidate> queue;
  auto push_pair = [&](int32_t pos) {
    const int32_t nxt = sym[pos].next;
    if (nxt < 0) return;
    const uint64_t key = (static_cast<uint64_t>(static_cast<uint32_t>(sym[pos].id)) << 32) | static_cast<uint32_t>(sym[nxt].id);
    if (auto it = merges_.find(key); it != merges_.end()) queue.push({it->second.rank, pos, sym[pos].id, sym[nxt].id});
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(sym.size()); ++i) push_pair(i);

  while (!queue.empty()) {
    const Candidate c = queue.top();
    queue.pop();
    Symbol& left = sym[c.pos];
    // Stale entry: one side was merged into something else since this pair was queued.
    if (left.id != c.left_id || left.next < 0 || sym[left.next].id != c.right_id) continue;
    const int32_t right_pos = left.next;
    const uint64_t key = (static_cast<uint64_t>(static_cast<uint32_t>(c.left_id)) << 32) | static_cast<uint32_t>(c.right_id);
    left.id = merges_.at(key).id;
    left.next = sym[right_pos].next;
    sym[right_pos].id = -1;
    if (left.next >= 0) sym[left.next].prev = c.pos;
    if (left.prev >= 0) push_pair(left.prev);
    push_pair(c.pos);
  }
  for (int32_t i = 0; i >= 0; i = sym[i].next) out.push_back(sym[i].id);
}

}  // namespace lfm::tok
