// JSON Schema → GBNF (grammar/json_schema.h): the schema suite of tests/data/grammar/schemas (each
// file a schema with valid and invalid instances) on the grammar, compact and with whitespace;
// the suite itself checked by an independent validator (python jsonschema, tools/grammar/
// validate.py); digit-range grammars checked exhaustively; errors, strict mode and limits.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "grammar/grammar.h"
#include "grammar/json_schema.h"
#include "grammar/number_ranges.h"
#include "schema_oracle.h"
#include "test_util.h"

namespace lfm::grammar {
namespace {

using ojson = nlohmann::ordered_json;

std::vector<std::filesystem::path> suite_files() {
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(test::data_dir() + "/grammar/schemas"))
    if (e.path().extension() == ".json") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  return files;
}

ojson read_ojson(const std::filesystem::path& p) { return ojson::parse(test::read_file(p)); }

std::shared_ptr<const Grammar> compile(const ojson& schema, bool any_whitespace, bool strict = false) {
  JsonSchemaOptions opt;
  opt.any_whitespace = any_whitespace;
  opt.strict = strict;
  return parse_gbnf(json_schema_to_gbnf(schema, opt));
}

std::string error_of(const ojson& schema, bool strict = false) {
  try {
    JsonSchemaOptions opt;
    opt.strict = strict;
    parse_gbnf(json_schema_to_gbnf(schema, opt));
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(JsonSchema, SuiteHasFiftySchemasWithInstances) {
  const auto files = suite_files();
  EXPECT_GE(files.size(), 50u);
  for (const auto& f : files) {
    const ojson c = read_ojson(f);
    EXPECT_TRUE(c.contains("schema") && c["valid"].is_array() && c["invalid"].is_array()) << f;
    EXPECT_FALSE(c["valid"].empty()) << f;
  }
}

TEST(JsonSchema, SuiteInstancesAcceptedAndRejectedCompact) {
  size_t checked = 0;
  for (const auto& f : suite_files()) {
    SCOPED_TRACE(f.filename().string());
    const ojson c = read_ojson(f);
    std::shared_ptr<const Grammar> g;
    ASSERT_NO_THROW(g = compile(c["schema"], false)) << json_schema_to_gbnf(c["schema"]);
    for (const auto& v : c["valid"]) {
      EXPECT_TRUE(grammar_accepts(*g, v.dump())) << "valid instance rejected: " << v.dump() << "\n" << to_gbnf(*g);
      // Compact means no whitespace at all.
      if (v.is_object() && !v.empty()) {
        EXPECT_FALSE(grammar_accepts(*g, v.dump(1))) << v.dump(1);
      }
      ++checked;
    }
    for (const auto& v : c["invalid"]) {
      EXPECT_FALSE(grammar_accepts(*g, v.dump())) << "invalid instance accepted: " << v.dump() << "\n" << to_gbnf(*g);
      ++checked;
    }
  }
  EXPECT_GE(checked, 300u);
}

TEST(JsonSchema, SuiteInstancesAcceptedAndRejectedWithWhitespace) {
  for (const auto& f : suite_files()) {
    SCOPED_TRACE(f.filename().string());
    const ojson c = read_ojson(f);
    std::shared_ptr<const Grammar> g;
    ASSERT_NO_THROW(g = compile(c["schema"], true)) << json_schema_to_gbnf(c["schema"], {.any_whitespace = true});
    for (const auto& v : c["valid"]) {
      // enum / const values are matched as written compactly (a documented limit).
      const bool literal = c["schema"].is_object() && (c["schema"].contains("enum") || c["schema"].contains("const"));
      for (const std::string& text : {v.dump(), v.dump(2), v.dump(1, '\t')}) {
        if (literal && text != v.dump()) continue;
        EXPECT_TRUE(grammar_accepts(*g, text)) << "valid instance rejected:\n" << text;
      }
    }
    for (const auto& v : c["invalid"])
      for (const std::string& text : {v.dump(), v.dump(2)})
        EXPECT_FALSE(grammar_accepts(*g, text)) << "invalid instance accepted:\n" << text;
  }
}

// The python interpreter with `jsonschema` (scripts/setup.sh installs Debian's python3-jsonschema).
using test::python_with_jsonschema;

TEST(JsonSchema, SuiteVerdictsAgreeWithPythonJsonschema) {
  const std::string py = python_with_jsonschema();
  ASSERT_FALSE(py.empty()) << "no python3 with the jsonschema module: run scripts/setup.sh";
  std::string cmd = py + " " + std::string(LFM_SOURCE_DIR) + "/tools/grammar/validate.py --suite";
  for (const auto& f : suite_files()) cmd += " '" + f.string() + "'";
  const auto r = test::run_command(cmd + " 2>&1");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("\"wrong\": 0"), std::string::npos) << r.out;
}

TEST(JsonSchema, ValidatorScriptChecksManyTextsInOneCall) {
  const std::string py = python_with_jsonschema();
  ASSERT_FALSE(py.empty()) << "no python3 with the jsonschema module: run scripts/setup.sh";
  test::TempDir dir;
  const std::string schema = dir.write("schema.json", R"({"type": "object", "properties": {"n": {"type": "integer"}},
                                                          "required": ["n"]})");
  const std::string texts = dir.write("texts.json", ojson::array({"{\"n\":1}", "{\"n\":\"x\"}", "{\"n\":", "{\n \"n\": 2\n}"}).dump());
  const std::string script = std::string(LFM_SOURCE_DIR) + "/tools/grammar/validate.py";
  auto r = test::run_command(py + " " + script + " " + schema + " --texts " + texts);
  EXPECT_EQ(r.code, 1) << r.out;
  std::vector<bool> valid;
  std::istringstream lines(r.out);
  for (std::string line; std::getline(lines, line);) valid.push_back(ojson::parse(line)["valid"].get<bool>());
  EXPECT_EQ(valid, (std::vector<bool>{true, false, false, true})) << r.out;
  const std::string one = dir.write("one.json", "{\"n\": 7}");
  EXPECT_EQ(test::run_command(py + " " + script + " " + schema + " " + one).code, 0);
}

std::shared_ptr<const Grammar> rule(const std::string& expr) { return parse_gbnf("root ::= " + expr + "\n"); }

TEST(JsonSchema, IntegerRangesAreExact) {
  using O = std::optional<int64_t>;
  const std::vector<std::pair<O, O>> ranges = {{0, 0},     {-7, 7},     {1, 9},      {10, 99},   {-100, -10},
                                               {13, 1307}, {-999, 45},  {100, 100},  {O{}, 0},   {O{}, -57},
                                               {5, O{}},   {-31, O{}},  {0, 1000},   {999, 1001}, {-1001, -999}};
  for (const auto& [lo, hi] : ranges) {
    const auto g = rule(integer_range_gbnf(lo, hi));
    for (int64_t n = -1500; n <= 1500; ++n) {
      const bool in = (!lo || n >= *lo) && (!hi || n <= *hi);
      ASSERT_EQ(grammar_accepts(*g, std::to_string(n)), in)
          << n << " in [" << (lo ? std::to_string(*lo) : "-inf") << ", " << (hi ? std::to_string(*hi) : "inf") << "]";
    }
    EXPECT_FALSE(grammar_accepts(*g, "-0"));
    EXPECT_FALSE(grammar_accepts(*g, "007"));
  }
  EXPECT_TRUE(grammar_accepts(*rule(integer_range_gbnf(5, std::nullopt)), "1234567890123456"));
  EXPECT_EQ(integer_range_gbnf(3, 2), "");
}

TEST(JsonSchema, DecimalRangesHonourInclusiveAndExclusiveBounds) {
  auto g = rule(decimal_range_gbnf(-2, true, 3, false));  // -2 < x <= 3
  for (const char* ok : {"-1.99", "-1", "-0.5", "0", "0.0", "2.999", "3", "3.000", "-0.001"})
    EXPECT_TRUE(grammar_accepts(*g, ok)) << ok;
  for (const char* bad : {"-2", "-2.0", "-2.5", "3.001", "4", "1e2", "01", "."}) EXPECT_FALSE(grammar_accepts(*g, bad)) << bad;
  auto pos = rule(decimal_range_gbnf(0, true, std::nullopt, false));  // x > 0
  EXPECT_TRUE(grammar_accepts(*pos, "0.1"));
  EXPECT_TRUE(grammar_accepts(*pos, "123.5"));
  EXPECT_FALSE(grammar_accepts(*pos, "0"));
  EXPECT_FALSE(grammar_accepts(*pos, "0.000"));
  EXPECT_FALSE(grammar_accepts(*pos, "-0.1"));
  EXPECT_EQ(decimal_range_gbnf(1, true, 1, false), "");
}

TEST(JsonSchema, ErrorsNameThePathInTheSchema) {
  struct Case { const char* schema; const char* message; };
  for (const Case& c : std::vector<Case>{
           {R"({"properties": {"age": {"type": "integer", "minimum": "x"}}})",
            R"(json schema: /properties/age/minimum: expected a number, got "x")"},
           {R"({"$ref": "#/$defs/missing"})", R"(json schema: /$ref: unknown $ref target "#/$defs/missing")"},
           {R"({"items": {"$ref": "http://example.com/s.json"}})", "json schema: /items/$ref: only local references"},
           {R"({"type": "strnig"})", R"(json schema: /type: unknown type "strnig")"},
           {R"({"properties": {"a": 5}})", "json schema: /properties/a: expected a schema (object or boolean), got number"},
           {R"({"anyOf": []})", "json schema: /anyOf: expected a non-empty array"},
           {R"({"type": "string", "pattern": "(a)\\1"})", "json schema: /pattern: regex: position 3: backreferences"},
           {R"({"type": "integer", "minimum": 5, "maximum": 4})", "json schema: (root): no integer satisfies the bounds"},
           {R"({"type": "array", "minItems": 3, "maxItems": 2})", "maxItems is below minItems"},
           {R"({"$ref": "#"})", "json schema: /$ref: reference cycle \"#\" that matches no input"},
           {R"({"$defs": {"a": {"anyOf": [{"$ref": "#/$defs/a"}, {"type": "null"}]}}, "$ref": "#/$defs/a"})",
            "reference cycle"},
           {R"({"properties": {"x": false}, "required": ["x"]})", "json schema: /properties/x: schema `false` admits no value"},
           // Inside a merge through $ref (fuzz_grammar_budget: a json type_error escaped here).
           {R"({"$defs": {"a": {"allOf": "x"}}, "allOf": [{"$ref": "#/$defs/a"}]})",
            "/allOf/0/allOf: expected an array of schemas, got string"},
           {R"({"$defs": {"a": {"$ref": 5}}, "allOf": [{"$ref": "#/$defs/a"}]})", "/allOf/0/$ref: expected a string, got number"},
           {R"({"properties": {"p": false}, "allOf": [{"properties": {"p": {"type": "integer"}}}]})",
            "allOf with a member `false` admits nothing"},
       }) {
    EXPECT_NE(error_of(ojson::parse(c.schema)).find(c.message), std::string::npos)
        << c.schema << "\n  got: " << error_of(ojson::parse(c.schema));
  }
}

TEST(JsonSchema, AllOfMergesIntoABooleanTrueProperty) {
  const ojson s = ojson::parse(R"({"type": "object", "properties": {"p": true}, "required": ["p"],
                                   "allOf": [{"properties": {"p": {"type": "integer"}}}]})");
  ASSERT_EQ(error_of(s), "");
  EXPECT_TRUE(grammar_accepts(*compile(s, false), R"({"p":5})"));
  EXPECT_FALSE(grammar_accepts(*compile(s, false), R"({"p":"x"})"));
}

TEST(JsonSchema, StrictModeClosesObjectsAndRefusesUnsupportedKeywords) {
  const ojson s = ojson::parse(R"({"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]})");
  EXPECT_TRUE(grammar_accepts(*compile(s, false), R"({"a":1,"b":2})"));
  EXPECT_FALSE(grammar_accepts(*compile(s, false, true), R"({"a":1,"b":2})"));
  EXPECT_TRUE(grammar_accepts(*compile(s, false, true), R"({"a":1})"));
  const ojson unsupported = ojson::parse(R"({"type": "array", "items": {"type": "integer"}, "uniqueItems": true})");
  EXPECT_EQ(error_of(unsupported), "");  // ignored when not strict
  EXPECT_EQ(error_of(unsupported, true), "json schema: /uniqueItems: keyword not supported");
  EXPECT_EQ(error_of(ojson::parse(R"({"properties": {"p": {"not": {}}}})"), true),
            "json schema: /properties/p/not: keyword not supported");
}

TEST(JsonSchema, PropertiesFollowTheSchemaOrder) {
  const std::string text = R"({"type": "object", "properties": {"z": {"type": "integer"}, "a": {"type": "integer"}},
                               "required": ["z", "a"], "additionalProperties": false})";
  auto ordered = compile(ojson::parse(text), false);
  EXPECT_TRUE(grammar_accepts(*ordered, R"({"z":1,"a":2})"));
  EXPECT_FALSE(grammar_accepts(*ordered, R"({"a":2,"z":1})"));
  // A nlohmann::json keeps keys sorted: its properties come alphabetically.
  auto sorted = parse_gbnf(json_schema_to_gbnf(nlohmann::json::parse(text)));
  EXPECT_TRUE(grammar_accepts(*sorted, R"({"a":2,"z":1})"));
}

TEST(JsonSchema, ManyOptionalPropertiesStayLinear) {
  ojson s = {{"type", "object"}, {"additionalProperties", false}};
  for (int i = 0; i < 200; ++i) s["properties"]["p" + std::to_string(i)] = {{"type", "integer"}};
  const std::string gbnf = json_schema_to_gbnf(s);
  EXPECT_LT(gbnf.size(), 60000u);
  auto g = parse_gbnf(gbnf);
  EXPECT_TRUE(grammar_accepts(*g, R"({"p3":1,"p150":2,"p199":3})"));
  EXPECT_TRUE(grammar_accepts(*g, "{}"));
  EXPECT_FALSE(grammar_accepts(*g, R"({"p150":2,"p3":1})"));
  EXPECT_FALSE(grammar_accepts(*g, R"({"p3":1,"p3":1})"));
}

TEST(JsonSchema, AdditionalKeysExcludeDeclaredNames) {
  auto g = compile(ojson::parse(R"({"properties": {"ab": {"type": "integer"}}, "additionalProperties": {"type": "string"}})"), false);
  for (const char* ok : {R"({"ab":1})", R"({"a":"x"})", R"({"abc":"x"})", R"({"b":"x"})", R"({"":"x"})", R"({"ab":1,"x":"y"})"})
    EXPECT_TRUE(grammar_accepts(*g, ok)) << ok;
  for (const char* bad : {R"({"ab":"x"})", R"({"x":"y","ab":1})"}) EXPECT_FALSE(grammar_accepts(*g, bad)) << bad;
}

TEST(JsonSchema, AdditionalKeysExcludeNonAsciiNames) {
  auto g = compile(ojson::parse(R"({"properties": {"été": {"type": "integer"}, "q\"": {"type": "integer"}},
                                    "additionalProperties": {"type": "string"}})"), false);
  for (const char* ok : {R"({"été":1})", R"({"ét":"x"})", R"({"étéé":"x"})", R"({"q\"":1})", R"({"x":"y"})"})
    EXPECT_TRUE(grammar_accepts(*g, ok)) << ok;
  EXPECT_FALSE(grammar_accepts(*g, R"({"été":"x"})"));
  EXPECT_FALSE(grammar_accepts(*g, R"({"x":"y","été":1})"));
}

TEST(JsonSchema, WhitespaceIsBounded) {
  auto g = compile(ojson::parse(R"({"type": "array", "items": {"type": "integer"}})"), true);
  EXPECT_TRUE(grammar_accepts(*g, "[ 1 , 2 ]"));
  EXPECT_TRUE(grammar_accepts(*g, "[\r\n    1,\n    2\n]"));
  EXPECT_FALSE(grammar_accepts(*g, " [1]"));  // not around the whole text
  EXPECT_FALSE(grammar_accepts(*g, "[" + std::string(100, ' ') + "1]"));
  EXPECT_FALSE(grammar_accepts(*g, "[\n\n\n1]"));
}

TEST(JsonSchema, LimitsGiveClearErrors) {
  ojson deep = {{"type", "integer"}};
  for (int i = 0; i < 100; ++i) deep = {{"type", "array"}, {"items", deep}};
  EXPECT_NE(error_of(deep).find("schema nested deeper than 64"), std::string::npos) << error_of(deep);
  ojson big = {{"type", "object"}, {"additionalProperties", false}};
  for (int i = 0; i < 3000; ++i) big["properties"]["property_with_a_long_name_" + std::to_string(i)] = {{"enum", {std::string(300, 'x')}}};
  EXPECT_NE(error_of(big).find("the grammar exceeds"), std::string::npos) << error_of(big).substr(0, 200);
}

TEST(JsonSchema, AnyJsonObjectForJsonObjectMode) {
  for (bool ws : {false, true}) {
    auto g = parse_gbnf(any_json_gbnf(ws));
    EXPECT_TRUE(grammar_accepts(*g, R"({})"));
    EXPECT_TRUE(grammar_accepts(*g, R"({"a":[1,{"b":null}],"c":"\u00e9"})"));
    EXPECT_FALSE(grammar_accepts(*g, "[1]"));
    EXPECT_FALSE(grammar_accepts(*g, "\"s\""));
    EXPECT_FALSE(grammar_accepts(*g, R"({"a":})"));
    EXPECT_EQ(grammar_accepts(*g, "{ \"a\" : 1 }"), ws);
  }
}

}  // namespace
}  // namespace lfm::grammar
