// Unicode property tables generated from CPython's unicodedata (see
// tools/chat/gen_unicode_tables.py); used for str.isprintable (repr) and case mapping.
#pragma once

#include <cstddef>
#include <cstdint>

namespace lfm::jinja::tables {

struct CodeRange {
  uint32_t first, last;
};
struct CaseEntry {
  uint32_t cp;
  const char* utf8;  // full mapping (may be several code points)
};

extern const CodeRange kNonPrintable[];
extern const size_t kNonPrintable_size;
extern const CodeRange kCased[];
extern const size_t kCased_size;
extern const CaseEntry kLower[];
extern const size_t kLower_size;
extern const CaseEntry kUpper[];
extern const size_t kUpper_size;
extern const CaseEntry kTitle[];
extern const size_t kTitle_size;

}  // namespace lfm::jinja::tables
