#include "hub/settings.h"

#include "core/error.h"
#include "core/file_io.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace lfm::hub {
namespace {

namespace fs = std::filesystem;

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

// "~" and "~/x" as Python's os.path.expanduser reads them.
fs::path expand_user(const std::string& p) {
  if (p == "~" || p.rfind("~/", 0) == 0) {
    const std::string home = env("HOME");
    if (!home.empty()) return fs::path(home + p.substr(1));
  }
  return fs::path(p);
}

fs::path hf_home() {
  const std::string h = env("HF_HOME");
  if (!h.empty()) return expand_user(h);
  const std::string xdg = env("XDG_CACHE_HOME");
  return expand_user(xdg.empty() ? "~/.cache" : xdg) / "huggingface";
}

std::string trim(std::string s) {
  const auto is_space = [](unsigned char c) { return std::isspace(c) != 0; };
  s.erase(s.begin(), std::find_if_not(s.begin(), s.end(), is_space));
  s.erase(std::find_if_not(s.rbegin(), s.rend(), is_space).base(), s.end());
  return s;
}

long env_seconds(const char* name, long fallback) {
  const std::string v = env(name);
  if (v.empty()) return fallback;
  char* end = nullptr;
  const double d = std::strtod(v.c_str(), &end);
  return end != v.c_str() && d > 0 ? std::max(1L, static_cast<long>(d + 0.5)) : fallback;
}

}  // namespace

bool env_flag(const char* name) {
  std::string v = env(name);
  std::transform(v.begin(), v.end(), v.begin(), [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
  return v == "1" || v == "ON" || v == "YES" || v == "TRUE";
}

Settings settings_from_env() {
  Settings s;
  std::string endpoint = env("HF_ENDPOINT");
  while (!endpoint.empty() && endpoint.back() == '/') endpoint.pop_back();
  if (!endpoint.empty()) s.endpoint = endpoint;

  std::string cache = env("HF_HUB_CACHE");
  if (cache.empty()) cache = env("HUGGINGFACE_HUB_CACHE");
  s.cache_dir = cache.empty() ? hf_home() / "hub" : expand_user(cache);

  s.token = trim(env("HF_TOKEN"));
  if (s.token.empty()) s.token = trim(env("HUGGING_FACE_HUB_TOKEN"));
  if (s.token.empty()) {
    const std::string path = env("HF_TOKEN_PATH");
    const std::string file = (path.empty() ? hf_home() / "token" : expand_user(path)).string();
    if (is_regular_path(file)) {  // as before: an unreadable token file means no token
      try {
        s.token = trim(read_regular_file(file, "hub: token file"));
      } catch (const Error&) {
      }
    }
  }

  s.offline = env_flag("HF_HUB_OFFLINE");
  s.connect_timeout_s = env_seconds("HF_HUB_ETAG_TIMEOUT", s.connect_timeout_s);
  s.stall_timeout_s = env_seconds("HF_HUB_DOWNLOAD_TIMEOUT", s.stall_timeout_s);
  s.progress = isatty(STDERR_FILENO) && !env_flag("HF_HUB_DISABLE_PROGRESS_BARS");
  return s;
}

}  // namespace lfm::hub
