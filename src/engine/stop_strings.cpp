#include "engine/stop_strings.h"

#include <algorithm>
#include <utility>

namespace lfm {

StopStrings::StopStrings(std::vector<std::string> stops) {
  for (auto& s : stops)
    if (!s.empty()) stops_.push_back(std::move(s));
}

const std::string& StopStrings::matched_string() const {
  static const std::string none;
  return matched_ >= 0 ? stops_[matched_] : none;
}

std::string StopStrings::push(std::string_view text) {
  if (matched()) return {};
  pending_.append(text);
  if (stops_.empty()) return std::exchange(pending_, {});
  // The earliest full occurrence of any stop string (the first listed wins a tie).
  size_t best = std::string::npos;
  for (size_t i = 0; i < stops_.size(); ++i) {
    const size_t at = pending_.find(stops_[i]);
    if (at < best) {
      best = at;
      matched_ = static_cast<int>(i);
    }
  }
  if (best != std::string::npos) {
    std::string out = pending_.substr(0, best);
    pending_.clear();
    return out;
  }
  // Hold back the longest tail that is a proper prefix of some stop string.
  size_t hold = 0;
  for (const auto& s : stops_) {
    const size_t max_len = std::min(s.size() - 1, pending_.size());
    for (size_t len = max_len; len > hold; --len)
      if (pending_.compare(pending_.size() - len, len, s, 0, len) == 0) {
        hold = len;
        break;
      }
  }
  std::string out = pending_.substr(0, pending_.size() - hold);
  pending_.erase(0, pending_.size() - hold);
  return out;
}

std::string StopStrings::flush() {
  if (matched()) return {};
  return std::exchange(pending_, {});
}

}  // namespace lfm
