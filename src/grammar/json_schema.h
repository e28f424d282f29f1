// JSON Schema → GBNF: a grammar whose `root` derives JSON texts valid under the schema, for
// structured output (response_format json_schema, tool arguments).
//
// Output form. Objects write their properties in the schema's `properties` order (the required
// ones always, the optional ones or not; additional properties, where allowed, after them), as
// constrained decoding needs one order and the schema's is the one a model is shown. With
// any_whitespace false the text is compact, exactly as nlohmann's dump() or Python's
// json.dumps(separators=(",", ":")) write it: no whitespace at all. With any_whitespace true,
// whitespace may appear around every , : [ ] { } of objects and arrays (not at the very start or
// end of the text): up to 8 spaces or tabs, then optionally one newline ("\r\n" or "\n") and up to
// 64 spaces or tabs — enough for any pretty-printer, bounded so that a model cannot loop on it.
//
// Supported: type (and lists of types); properties, required, additionalProperties (false / true
// / a schema; default true, or false when strict); $ref to any JSON pointer in the document
// ("#", "#/$defs/..", "#/definitions/..", recursion included); anyOf and oneOf (as alternatives);
// allOf (merged into one schema); enum and const; minLength / maxLength; pattern (regex_to_gbnf.h);
// format date, time, date-time, uuid, email (other formats: any string); minimum / maximum /
// exclusiveMinimum / exclusiveMaximum (draft 6+ numbers and draft 4 booleans); items (a schema,
// or draft 4 tuple arrays), prefixItems, additionalItems, minItems / maxItems; `{}` and `true`.
//
// Approximated (the grammar derives a subset or superset of the valid texts):
//  - Property order is fixed (a subset). Additional property names exclude the declared names
//    only as written literally (an escaped spelling like "\u0061" for "a" is not caught).
//  - oneOf is anyOf (an instance matching two branches is not rejected). allOf merging is best
//    effort: properties are merged recursively, required lists joined, type lists intersected,
//    bounds tightened; for other keywords the later subschema's value wins.
//  - Integers are plain digit strings (no 1.0, no exponent); numbers carry no exponent when
//    bounded, and at most 16 integer and 16 fraction digits when not. Non-integer bounds are
//    rounded inward to integers (minimum 0.5 → 1): a subset; bounds beyond ±1e18 are ignored.
//  - minLength / maxLength count JSON string characters: an escape is one character (a
//    \uD83D\uDE00 surrogate pair counts two). With a pattern, the lengths are not enforced.
//  - Formats: dates are checked for shape (month 01-12, day 01-31), not calendar validity; emails
//    are local@domain.tld with common characters.
//  - enum / const values are written compactly even with any_whitespace; strings in them only
//    in their canonical escaped form.
// Not supported (ignored, or an lfm::Error when strict): not, if/then/else, patternProperties,
// propertyNames, dependentRequired, dependentSchemas, dependencies, uniqueItems, contains,
// multipleOf, minProperties, maxProperties, unevaluated*.
#pragma once

#include <cstddef>
#include <string>

#include <nlohmann/json.hpp>

namespace lfm::grammar {

struct JsonSchemaOptions {
  bool any_whitespace = false;  // see above
  // OpenAI strict mode: additionalProperties defaults to false, and keywords that change validity
  // but cannot be honoured are errors rather than ignored.
  bool strict = false;
  int max_depth = 64;                       // nested subschemas (and $ref hops) followed
  size_t max_grammar_bytes = 1 << 20;       // GBNF text size
};

class WorkBudget;

// The GBNF grammar (rule `root`) for JSON texts valid under `schema`. Throws lfm::Error
// "json schema: <JSON pointer in the schema>: <problem>" for malformed schemas, unknown $ref
// targets, unsupported keywords (when strict), and schemas whose grammar would be too large;
// "json schema: compile work exceeds the budget ..." when the conversion's work or memory
// passes `budget` (null: a default WorkBudget, grammar/work_budget.h), checked as it goes.
std::string json_schema_to_gbnf(const nlohmann::ordered_json& schema, const JsonSchemaOptions& opt = {},
                                WorkBudget* budget = nullptr);
// The same for a schema held in a nlohmann::json, whose objects keep their keys sorted: properties
// are then written in alphabetical order. Parse schemas into ordered_json to keep the schema's.
std::string json_schema_to_gbnf(const nlohmann::json& schema, const JsonSchemaOptions& opt = {},
                                WorkBudget* budget = nullptr);

// Any JSON object (OpenAI's response_format {"type": "json_object"}), same whitespace rules.
std::string any_json_gbnf(bool any_whitespace);

}  // namespace lfm::grammar
