#include "core/json_guard.h"

#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>
#include <unordered_set>
#include <vector>

#include "core/error.h"
#include "core/file_io.h"
#include "core/ordered_json_parse.h"

namespace lfm {

void check_json_depth(std::string_view text, std::string_view what) {
  // Mirrors the lexer of valid JSON: brackets count only outside strings, and a backslash inside a
  // string escapes the next byte. For invalid text the parser fails on its own; this scan only has
  // to be exact where the parser would go on building values.
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxJsonDepth)
        fail(what, ": JSON nesting deeper than ", kMaxJsonDepth, " levels (limit ", kMaxJsonDepth, ") at byte ", i);
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
}

namespace {

template <typename J>
J parse_checked(std::string_view text, std::string_view what, bool unique_keys = false) {
  check_json_depth(text, what);
  // The keys of each object being parsed (a stack: objects nest).
  std::vector<std::unordered_set<std::string>> keys;
  auto check_keys = [&](int, typename J::parse_event_t ev, J& parsed) {
    if (ev == J::parse_event_t::object_start) {
      keys.emplace_back();
    } else if (ev == J::parse_event_t::object_end) {
      keys.pop_back();
    } else if (ev == J::parse_event_t::key) {
      const auto& k = parsed.template get_ref<const std::string&>();
      LFM_CHECK(keys.back().insert(k).second, what, ": key '", k, "' appears twice in one object");
    }
    return true;
  };
  try {
    if (unique_keys) return J::parse(text.begin(), text.end(), check_keys);
    return J::parse(text.begin(), text.end());
  } catch (const nlohmann::json::exception& e) {
    fail(what, " is not valid JSON: ", e.what());
  }
}

template <typename J>
std::string excerpt(const J& j, size_t max_chars) {
  std::string s = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (s.size() <= max_chars) return s;
  size_t cut = max_chars;
  while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;  // whole code points
  s.resize(cut);
  return s + "…";
}

}  // namespace

nlohmann::json parse_json(std::string_view text, std::string_view what, bool unique_keys) {
  return parse_checked<nlohmann::json>(text, what, unique_keys);
}

nlohmann::ordered_json parse_ordered_json(std::string_view text, std::string_view what) {
  // Not nlohmann's own ordered parse: it scans an object's keys for each key it adds (quadratic).
  return parse_ordered_json_linear(text, what, {SIZE_MAX, /*unique_keys=*/false, {}});
}

std::string read_text_file(const std::string& path, std::string_view what) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  LFM_CHECK(!ec && fs::exists(st), what, " '", path, "' does not exist");
  LFM_CHECK(!fs::is_directory(st), what, " '", path, "' is a directory, not a file");
  return read_regular_file(path, what);
}

std::string json_excerpt(const nlohmann::json& j, size_t max_chars) { return excerpt(j, max_chars); }
std::string json_excerpt(const nlohmann::ordered_json& j, size_t max_chars) { return excerpt(j, max_chars); }

}  // namespace lfm
