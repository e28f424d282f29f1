#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/regex_splitter.h"

#include <pcre2.h>

#include "core/error.h"

namespace lfm::tok {

struct RegexSplitter::Compiled {
  pcre2_code* code = nullptr;
  bool jit = false;
  ~Compiled() {
    if (code) pcre2_code_free(code);
  }
};

namespace {

std::string pcre2_message(int code) {
  PCRE2_UCHAR buf[256];
  pcre2_get_error_message(code, buf, sizeof(buf));
  return reinterpret_cast<const char*>(buf);
}

// Match data sized for the pattern, reused by one thread across calls (allocation per split()
// would dominate the cost of short texts).
struct MatchData {
  pcre2_match_data* md = nullptr;
  const pcre2_code* owner = nullptr;
  ~MatchData() {
    if (md) pcre2_match_data_free(md);
  }
  pcre2_match_data* for_code(const pcre2_code* code) {
    if (owner != code) {
      if (md) pcre2_match_data_free(md);
      md = pcre2_match_data_create_from_pattern(code, nullptr);
      owner = code;
    }
    return md;
  }
};

}  // namespace

RegexSplitter::RegexSplitter(const std::string& pattern) : pattern_(pattern), compiled_(std::make_unique<Compiled>()) {
  int err = 0;
  PCRE2_SIZE err_offset = 0;
  compiled_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                  PCRE2_UTF | PCRE2_UCP, &err, &err_offset, nullptr);
  LFM_CHECK(compiled_->code != nullptr, "tokenizer: pre-tokenizer regex '", pattern, "' does not compile: ",
            pcre2_message(err), " (at offset ", err_offset, ")");
  compiled_->jit = pcre2_jit_compile(compiled_->code, PCRE2_JIT_COMPLETE) == 0;
}

RegexSplitter::~RegexSplitter() = default;

bool RegexSplitter::matches_entirely(std::string_view text) const {
  thread_local MatchData tls;
  pcre2_match_data* md = tls.for_code(compiled_->code);
  // Anchoring options are not available to the JIT fast path, so use the interpreter here.
  const int rc = pcre2_match(compiled_->code, reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), 0,
                             PCRE2_ANCHORED | PCRE2_ENDANCHORED | PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, md, nullptr);
  return rc >= 0;
}

void RegexSplitter::split(std::string_view text, std::vector<std::string_view>& out) const {
  // One MatchData per thread; it is re-created if a different splitter is used on this thread.
  thread_local MatchData tls;
  pcre2_match_data* md = tls.for_code(compiled_->code);
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t pos = 0, piece_start = 0;
  while (pos < text.size()) {
    // The caller guarantees valid UTF-8, so PCRE2's own check (a full scan per call) is skipped.
    const int rc = compiled_->jit
                       ? pcre2_jit_match(compiled_->code, subject, text.size(), pos, PCRE2_NO_UTF_CHECK, md, nullptr)
                       : pcre2_match(compiled_->code, subject, text.size(), pos, PCRE2_NO_UTF_CHECK, md, nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    LFM_CHECK(rc >= 0, "tokenizer: regex '", pattern_, "' failed while matching: ", pcre2_message(rc));
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    const size_t begin = ov[0], end = ov[1];
    if (end == begin) {
      // An empty match yields no piece; step over one whole character and search again.
      pos = begin + 1;
      while (pos < text.size() && (static_cast<unsigned char>(text[pos]) & 0xC0) == 0x80) ++pos;
      continue;
    }
    if (begin > piece_start) out.push_back(text.substr(piece_start, begin - piece_start));
    out.push_back(text.substr(begin, end - begin));
    piece_start = pos = end;
  }
  if (piece_start < text.size()) out.push_back(text.substr(piece_start));
}

}  // namespace lfm::tok
