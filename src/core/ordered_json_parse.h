// Order-preserving JSON parsing in linear time, for JSON whose key order matters (JSON schemas:
// the grammar writes properties in the schema's order; tools; template variables; tool-call
// arguments) and that a client controls (HTTP request bodies, the C API's JSON arguments).
//
// nlohmann::ordered_json keeps an object's members in a vector and finds a key by scanning it.
// Its own parser looks every key up as it inserts it, so parsing one object of n keys costs n²/2
// string comparisons: a 4 MB object of 300k keys took minutes. This parser appends members
// instead (duplicates are found with a hash set per open object), and a cap on the keys of one
// object keeps every later lookup in a parsed request cheap.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace lfm {

// Most keys one JSON object may have in what a client sends (request bodies, C API arguments).
// Real ones stay far below: OpenAI allows 5000 schema properties in all and 128 tools; a
// logit_bias banning 10000 tokens is still accepted. The cap also bounds every key lookup in a
// parsed request (ordered_json scans) to 10000 comparisons.
constexpr size_t kMaxRequestObjectKeys = 10000;

// An error about one place in the parsed text: `field()` is its path, e.g.
// "tools[0].function.parameters.properties" (the prefix given to the parse, then keys and
// [indices]); empty for the whole text.
class JsonFieldError : public Error {
 public:
  JsonFieldError(std::string field, const std::string& message) : Error(message), field_(std::move(field)) {}
  const std::string& field() const { return field_; }

 private:
  std::string field_;
};

struct OrderedJsonOptions {
  size_t max_object_keys = SIZE_MAX;  // kMaxRequestObjectKeys for client input
  bool unique_keys = true;            // a key twice in one object is an error (else: the last wins)
  std::string field_prefix;           // path of the text inside a larger request, for errors
};

// Parses `text` keeping every object's key order, in time linear in its size. Nesting is checked
// first (check_json_depth). Throws lfm::Error "<what> is not valid JSON: …" for syntax errors, and
// JsonFieldError naming the field for:
//   "<what>: 'F' has more than N keys (limit N)"
//   "<what>: key 'K' appears twice in 'F'"
nlohmann::ordered_json parse_ordered_json_linear(std::string_view text, std::string_view what,
                                                 const OrderedJsonOptions& opt = {});

// parse_ordered_json_linear with the request cap: how client JSON is parsed.
inline nlohmann::ordered_json parse_request_json(std::string_view text, std::string_view what,
                                                 std::string field_prefix = {}) {
  return parse_ordered_json_linear(text, what, {kMaxRequestObjectKeys, true, std::move(field_prefix)});
}

}  // namespace lfm
