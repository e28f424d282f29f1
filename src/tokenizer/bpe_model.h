// Byte-level BPE over one pre-token: start from one symbol per byte, repeatedly apply the
// lowest-ranked merge (leftmost first among equal ranks) using a priority queue, exactly like
// Hugging Face's BPE::merge_word. Results are cached per pre-token.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace lfm::tok {

// Hash that lets unordered_map<std::string, …> be searched with a std::string_view.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using TokenIdMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

class BpeModel {
 public:
  // `token_ids` maps byte-level token text to id; merges are in rank order. Throws lfm::Error
  // when a merge names a token, or produces a token, that is not in the vocabulary.
  BpeModel(const TokenIdMap& token_ids, const std::vector<std::pair<std::string, std::string>>& merges,
           bool ignore_merges);

  // Appends the ids of one pre-token given as RAW bytes (not byte-level text).
  void encode(std::string_view raw_piece, std::vector<int32_t>& out) const;

 private:
  void merge(std::string_view raw_piece, std::vector<int32_t>& out) const;

  const TokenIdMap& token_ids_;
  bool ignore_merges_;
  int32_t byte_ids_[256];  // id of each single-byte symbol, -1 when the vocab lacks it
  struct MergeResult {
    int32_t rank;
    int32_t id;
  };
  std::unordered_map<uint64_t, MergeResult> merges_;  // key: (left id << 32) | right id

  // Pre-tokens repeat constantly (" the", " and", …), so whole results are cached. Bounded:
  // cleared when full rather than tracking recency, which keeps lookups cheap.
  static constexpr size_t kMaxCacheEntries = 1 << 16;
  static constexpr size_t kMaxCachedPieceBytes = 64;
  mutable std::mutex cache_mutex_;
  mutable std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>> cache_;
};

}  // namespace lfm::tok
