// The Split pre-tokenizer with behaviour "Isolated": every regex match becomes its own piece, and
// so does every stretch of text between matches. Backed by PCRE2 (UTF + UCP, JIT when the
// platform has it) so Unicode classes like \p{L} and \s follow the Unicode tables.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace lfm::tok {

class RegexSplitter {
 public:
  // Throws lfm::Error naming the pattern and PCRE2's complaint when it does not compile.
  explicit RegexSplitter(const std::string& pattern);
  ~RegexSplitter();
  RegexSplitter(const RegexSplitter&) = delete;
  RegexSplitter& operator=(const RegexSplitter&) = delete;

  // Appends the pieces of `text` (valid UTF-8) to `out`, in order; they concatenate to `text`.
  // Thread-safe: each call uses its own match data.
  void split(std::string_view text, std::vector<std::string_view>& out) const;

  // True when the whole of `text` (valid UTF-8) is one match of the pattern.
  bool matches_entirely(std::string_view text) const;

  const std::string& pattern() const { return pattern_; }

 private:
  struct Compiled;
  std::string pattern_;
  std::unique_ptr<Compiled> compiled_;
};

}  // namespace lfm::tok
