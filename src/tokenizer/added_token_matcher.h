// Finds added tokens ("<|im_end|>", …) in raw text before BPE runs, with Hugging Face's rules:
// leftmost-longest matching over all contents, then the per-token options
//   single_word: only match when not glued to a word character on either side,
//   lstrip / rstrip: the match swallows adjacent whitespace on that side.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "tokenizer/tokenizer_spec.h"

namespace lfm::tok {

struct TextSegment {
  size_t begin, end;  // byte range in the searched text
  int32_t token_id;   // the added token's id, or -1 for plain text that still needs BPE
};

class AddedTokenMatcher {
 public:
  explicit AddedTokenMatcher(const std::vector<AddedToken>& tokens);

  bool empty() const { return tokens_.empty(); }

  // Splits `text` into added-token matches and the text between them (empty pieces omitted).
  void split(std::string_view text, std::vector<TextSegment>& out) const;

 private:
  // Index of the longest token starting at text[pos], or -1.
  int longest_match_at(std::string_view text, size_t pos) const;

  // A byte trie over the contents; children are kept in a flat sorted edge list per node.
  struct Node {
    uint32_t first_edge = 0, edge_count = 0;
    int token = -1;  // index into tokens_ when a content ends here
  };
  struct Edge {
    unsigned char byte;
    uint32_t child;
  };
  std::vector<AddedToken> tokens_;
  std::vector<Node> nodes_;
  std::vector<Edge> edges_;
  bool starts_token_[256] = {};  // quick reject for positions that cannot begin a match
};

}  // namespace lfm::tok
