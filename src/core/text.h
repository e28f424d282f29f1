// Small text helpers shared by the file, URL and request parsers.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace lfm {

// s with ASCII letters lowered (other bytes as they are): schemes, media types, extensions.
std::string ascii_lower(std::string_view s);

// At most `max_bytes` of what a caller sent, "…" after a cut: for error messages.
std::string excerpt(std::string_view s, size_t max_bytes = 200);

}  // namespace lfm
