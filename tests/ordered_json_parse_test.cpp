// core/ordered_json_parse.h (issue 55 class 3): the order-preserving parse gives what nlohmann's
// ordered parse gives, in linear time; duplicate keys and objects beyond the cap are refused
// naming the field.
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include <nlohmann/json.hpp>

#include "core/json_guard.h"
#include "core/ordered_json_parse.h"

namespace lfm {
namespace {

using ojson = nlohmann::ordered_json;

#define EXPECT_HAS(text, needle) EXPECT_NE(std::string(text).find(needle), std::string::npos) << (text)

template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "no error";
}

template <typename F>
std::string field_error(F&& f, std::string* field = nullptr) {
  try {
    f();
  } catch (const JsonFieldError& e) {
    if (field) *field = e.field();
    return e.what();
  } catch (const std::exception& e) {
    return std::string("not a JsonFieldError: ") + e.what();
  }
  return "no error";
}

std::string big_object(size_t n) {
  std::string s = "{";
  for (size_t i = 0; i < n; ++i) s += (i ? ",\"k" : "\"k") + std::to_string(i) + "\":" + std::to_string(i);
  return s + "}";
}

TEST(OrderedJsonParse, GivesWhatNlohmannsOrderedParseGives) {
  for (const char* text : {
           R"({"zeta": 1, "alpha": {"y": [1, 2.5, -3, 18446744073709551615, 1e300], "b": null}, "m": "\u00e9\ud83d\ude00"})",
           R"([{"b": true, "a": false}, [], {}, "", 0, -0.0, [[{"x": [{}]}]]])",
           R"("just a string")", "42", "null", R"({"": 1, " ": {"": []}})"}) {
    EXPECT_EQ(parse_request_json(text, "t").dump(), ojson::parse(text).dump()) << text;
    EXPECT_EQ(parse_ordered_json(text, "t").dump(), ojson::parse(text).dump()) << text;
  }
  EXPECT_EQ(parse_request_json(R"({"zeta": 1, "alpha": 2})", "t").begin().key(), "zeta");
}

TEST(OrderedJsonParse, SyntaxErrorsAndDepthNameTheInput) {
  EXPECT_HAS(error_of([] { parse_request_json("{\"a\": }", "the body"); }), "the body is not valid JSON");
  EXPECT_HAS(error_of([] { parse_request_json("{} x", "the body"); }), "the body is not valid JSON");
  EXPECT_HAS(error_of([] { parse_request_json(std::string(200, '['), "the body"); }), "nesting deeper than 128");
}

TEST(OrderedJsonParse, DuplicateKeysAreRefusedInRequestsAndLastWinsInFiles) {
  std::string field;
  const std::string msg =
      field_error([] { parse_request_json(R"({"a": {"b": [0, {"k": 1, "j": 2, "k": 3}]}})", "the body", "tools"); },
                  &field);
  EXPECT_HAS(msg, "the body: key 'k' appears twice in 'tools.a.b[1]'");
  EXPECT_EQ(field, "tools.a.b[1]");
  // Past 16 keys an object's keys are found through an index: the same answer.
  const std::string many = big_object(40).substr(0, big_object(40).size() - 1) + R"(, "k7": {}})";
  EXPECT_HAS(field_error([&] { parse_request_json(many, "the body"); }), "key 'k7' appears twice in the top-level object");
  EXPECT_EQ(parse_ordered_json(many, "f").dump(), ojson::parse(many).dump());
  // Files keep nlohmann's rule: the last value, in the first one's place.
  const char* dup = R"({"k": 1, "j": 2, "k": {"x": 3}})";
  EXPECT_EQ(parse_ordered_json(dup, "f").dump(), ojson::parse(dup).dump());
  EXPECT_EQ(parse_ordered_json(dup, "f").dump(), R"({"k":{"x":3},"j":2})");
}

TEST(OrderedJsonParse, ObjectsBeyondTheCapAreRefusedNamingTheField) {
  EXPECT_EQ(parse_request_json(big_object(kMaxRequestObjectKeys), "t").size(), kMaxRequestObjectKeys);
  std::string field;
  const std::string nested = R"({"tools": [0, 1, {"properties": )" + big_object(kMaxRequestObjectKeys + 1) + "}]}";
  EXPECT_HAS(field_error([&] { parse_request_json(nested, "the body"); }, &field),
             "the body: 'tools[2].properties' has more than 10000 keys (limit 10000)");
  EXPECT_EQ(field, "tools[2].properties");
  EXPECT_HAS(field_error([&] { parse_request_json(big_object(300000), "the body"); }, &field),
             "the body: the top-level object has more than 10000 keys");
  EXPECT_EQ(field, "");
  // Long keys are cut in messages.
  const std::string long_key(500, 'x');
  EXPECT_HAS(field_error([&] { parse_request_json("{\"" + long_key + "\": {\"a\": 1, \"a\": 2}}", "b"); }),
             "appears twice in '" + std::string(64, 'x') + "…'");
}

// Files have no cap, so the parse itself must be linear: 200k keys in one object (2.5 MB) took
// over 30 s with nlohmann's ordered parse, which scans the keys for each key it adds (0.5 s
// here). A bound generous enough for a sanitizer build shows the class is gone without timing
// the parser.
TEST(OrderedJsonParse, ManyKeysInAFileParseInLinearTime) {
  const std::string text = big_object(200000);
  const auto t0 = std::chrono::steady_clock::now();
  const ojson j = parse_ordered_json(text, "f");
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_EQ(j.size(), 200000u);
  EXPECT_EQ(j.back(), 199999);
  EXPECT_LT(s, 5.0) << "200000 keys took " << s << " s";
}

}  // namespace
}  // namespace lfm
