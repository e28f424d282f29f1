#include "engine/transcription.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace lfm {

nlohmann::ordered_json transcription_messages(const std::string& prompt, bool translate) {
  nlohmann::ordered_json user = nlohmann::ordered_json::array();
  user.push_back({{"type", "audio"}});
  if (!prompt.empty()) user.push_back({{"type", "text"}, {"text", prompt}});
  return nlohmann::ordered_json::array({
      {{"role", "system"}, {"content", translate ? kTranslateSystemPrompt : kTranscribeSystemPrompt}},
      {{"role", "user"}, {"content", std::move(user)}},
  });
}

namespace {
std::string timestamp(double seconds, char separator) {
  const long long ms = std::llround(std::max(0.0, seconds) * 1000.0);
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%02lld:%02lld:%02lld%c%03lld", ms / 3600000, ms / 60000 % 60, ms / 1000 % 60,
                separator, ms % 1000);
  return buf;
}
}  // namespace

std::string srt_timestamp(double seconds) { return timestamp(seconds, ','); }
std::string vtt_timestamp(double seconds) { return timestamp(seconds, '.'); }

}  // namespace lfm
