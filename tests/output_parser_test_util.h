// Shared helpers of the output parser tests (output_parser_test.cpp: literals, calls, reasoning,
// malformed input; output_parser_stream_test.cpp: the streaming parser against one-shot parses).
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "chat/output_parser.h"
#include "chat/pythonic_call_parser.h"
#include "core/error.h"

namespace lfm::chat::parser_test {

using nlohmann::json;
using nlohmann::ordered_json;

inline const std::string kStart(kToolCallStart);
inline const std::string kEnd(kToolCallEnd);

inline std::string block(const std::string& body) { return kStart + body + kEnd; }

inline ParsedOutput parse(std::string_view text, const OutputParserOptions& options = {}) {
  return parse_assistant_output(text, options);
}

// Arguments of call `index` exactly as the API returns them (a JSON string).
inline std::string arguments_text(const ParsedOutput& out, size_t index) {
  return out.tool_calls.at(index).at("function").at("arguments").get<std::string>();
}

inline ordered_json arguments_of(const ParsedOutput& out, size_t index) {
  return ordered_json::parse(arguments_text(out, index));
}

inline std::string name_of(const ParsedOutput& out, size_t index) {
  return out.tool_calls.at(index).at("function").at("name").get<std::string>();
}

// Parses `[<call>]` and returns the arguments of its single call; fails the test otherwise.
inline ordered_json single_call_arguments(const std::string& call) {
  ParsedOutput out = parse(block("[" + call + "]"));
  std::string parser_error;
  try {
    parse_tool_call_block("[" + call + "]");
  } catch (const lfm::Error& e) {
    parser_error = e.what();
  }
  EXPECT_EQ(out.tool_calls.size(), 1u) << call << "\nparser error: " << parser_error;
  EXPECT_EQ(out.content, "") << call;
  if (out.tool_calls.size() != 1) return ordered_json();
  return arguments_of(out, 0);
}

inline void expect_plain_content(const std::string& text, const OutputParserOptions& options = {}) {
  ParsedOutput out = parse(text, options);
  EXPECT_EQ(out.content, text);
  EXPECT_EQ(out.reasoning_content, "");
  EXPECT_TRUE(out.tool_calls.empty()) << text << "\n" << out.tool_calls.dump();
}

inline bool ends_inside_utf8_sequence(const std::string& text) {
  for (size_t back = 1; back <= 4 && back <= text.size(); ++back) {
    auto byte = static_cast<unsigned char>(text[text.size() - back]);
    if ((byte & 0xC0) == 0x80) continue;
    size_t needed = byte < 0x80 ? 1 : (byte >> 5) == 0x6 ? 2 : (byte >> 4) == 0xE ? 3 : 4;
    return back < needed;
  }
  return false;
}

// Streams `text` cut at `cuts` (sorted positions) and accumulates the events. Also checks the
// per-delta guarantees: text events are never empty and, for valid UTF-8 input, no delta
// produced by feed() ends inside a character.
inline ParsedOutput stream(const std::string& text, const std::vector<size_t>& cuts, const OutputParserOptions& options = {},
                    bool input_is_valid_utf8 = true) {
  StreamingOutputParser parser(options);
  ParsedOutput out;
  size_t previous = 0;
  auto check = [&](const std::vector<StreamEvent>& events, bool from_feed) {
    for (const StreamEvent& event : events) {
      if (event.kind == StreamEvent::Kind::kToolCall) continue;
      EXPECT_FALSE(event.text.empty());
      if (from_feed && input_is_valid_utf8) {
        EXPECT_FALSE(ends_inside_utf8_sequence(event.text)) << event.text;
      }
    }
    append_events(out, events);
  };
  for (size_t cut : cuts) {
    check(parser.feed(std::string_view(text).substr(previous, cut - previous)), true);
    previous = cut;
  }
  check(parser.feed(std::string_view(text).substr(previous)), true);
  check(parser.finish(), false);
  return out;
}

inline void expect_same(const ParsedOutput& actual, const ParsedOutput& expected, const std::string& context) {
  EXPECT_EQ(actual.content, expected.content) << context;
  EXPECT_EQ(actual.reasoning_content, expected.reasoning_content) << context;
  EXPECT_EQ(actual.tool_calls, expected.tool_calls) << context;
}

}  // namespace lfm::chat::parser_test
