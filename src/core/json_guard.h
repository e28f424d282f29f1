// Untrusted JSON (config.json, safetensors headers and indexes, tokenizer.json and
// tokenizer_config.json, --messages / --tools files, HTTP request bodies) goes through these
// helpers. nlohmann's parser is iterative, but everything that walks a value afterwards — dump(),
// copies, comparisons, our own readers — recurses once per level, so a document nested 100k
// levels deep would overflow the stack far away from the parse. The depth is therefore checked on
// the text, before a value exists, and error messages quote values through a bounded excerpt.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace lfm {

// Deepest array/object nesting accepted in any JSON lfm reads. Real files stay under 20 (tool
// schemas are the deepest); this leaves room while keeping every recursive walk shallow.
constexpr int kMaxJsonDepth = 128;

// Throws lfm::Error "<what>: JSON nesting deeper than 128 levels (limit 128) at byte N" when an
// array/object in `text` (outside strings) is nested deeper than kMaxJsonDepth.
void check_json_depth(std::string_view text, std::string_view what);

// check_json_depth, then parse. Syntax errors throw lfm::Error "<what> is not valid JSON: …".
// With `unique_keys`, a key that appears twice in one object is an error naming it (a safetensors
// header with two entries for one tensor is ambiguous: readers disagree on which one wins).
nlohmann::json parse_json(std::string_view text, std::string_view what, bool unique_keys = false);
// parse_ordered_json keeps key order, in linear time (core/ordered_json_parse.h; a repeated key:
// the last value wins); client input goes through parse_request_json there instead.
nlohmann::ordered_json parse_ordered_json(std::string_view text, std::string_view what);

// Reads a whole regular file (a directory or unreadable path is named as such, not reported as
// bad content). `what` names the file's role, e.g. "template: --messages file".
std::string read_text_file(const std::string& path, std::string_view what);

// One-line rendering of a value for error messages, at most `max_chars` characters (then "…").
std::string json_excerpt(const nlohmann::json& j, size_t max_chars = 120);
std::string json_excerpt(const nlohmann::ordered_json& j, size_t max_chars = 120);

}  // namespace lfm
