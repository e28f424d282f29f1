#include "core/text.h"

#include <cctype>

namespace lfm {

std::string ascii_lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string excerpt(std::string_view s, size_t max_bytes) {
  return s.size() <= max_bytes ? std::string(s) : std::string(s.substr(0, max_bytes)) + "…";
}

}  // namespace lfm
