// The streaming output parser reproduces the one-shot result for every split of the input.
#include "output_parser_test_util.h"

namespace lfm::chat {
namespace {

using namespace parser_test;

// ---------------------------------------------------------------------------------------------
// Streaming

// Representative outputs; every one is checked at every split position against the one-shot
// parse.
struct StreamCase {
  std::string text;
  OutputParserOptions options;
};

std::vector<StreamCase> stream_cases() {
  OutputParserOptions in_reasoning;
  in_reasoning.starts_in_reasoning = true;
  OutputParserOptions no_tools;
  no_tools.parse_tool_calls = false;
  return {
      {"Hello, world!", {}},
      {"Let me check. " + block(R"([get_weather(city="Paris", days=3)])") + " One moment.", {}},
      {" \n<think>\nThe user wants weather.\n</think>\n\n" + block(R"([get_weather(city='Paris')])"), {}},
      {"<think>plan</think>A" + block("[f(x=[1, 2], y={\"k\": None})]") + "B" + block("[g(), h(1)]") + "C", {}},
      {"x " + block("[f(a=]") + " y " + block(R"([{"name": "g", "arguments": {"q": "\u00e9"}}])"), {}},
      {"Sure " + kStart + "[f(a=1)", {}},
      {"a <| b <think> c <|tool_call_end|> <|tool_call_sta", {}},
      {"Caf\xc3\xa9 \xf0\x9f\x98\x80 " + block("[say(text=\"\xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x98\x80\")]") + " \xe2\x9c\x93", {}},
      {"Reasoning first\n</think>\nthen \xc3\xa9 answer " + block("[f()]"), in_reasoning},
      {"<think>x</think>y", in_reasoning},
      {"Empty " + block("[]") + " list", {}},
      {"<think>still going \xf0\x9f\x98\x80   ", {}},
      {"<think>a </thin b </think c</think>  d", {}},
      {"<thin", {}},
      {"   ", {}},
      {"", {}},
      {"plain " + block("[f()]"), no_tools},
      {block("[f(a='''tri\nple''', b=\"<|tool_call_start|>\")]") + "\n", {}},
  };
}

TEST(OutputParserStreaming, EverySplitPositionMatchesOneShot) {
  for (const StreamCase& c : stream_cases()) {
    ParsedOutput expected = parse(c.text, c.options);
    for (size_t cut = 0; cut <= c.text.size(); ++cut) {
      expect_same(stream(c.text, {cut}, c.options), expected, "split at " + std::to_string(cut) + " of: " + c.text);
    }
  }
}

TEST(OutputParserStreaming, EveryPairOfSplitPositionsMatchesOneShot) {
  for (const StreamCase& c : stream_cases()) {
    if (c.text.size() > 90) continue;  // quadratic: keep to the shorter cases
    ParsedOutput expected = parse(c.text, c.options);
    for (size_t first = 0; first <= c.text.size(); ++first) {
      for (size_t second = first; second <= c.text.size(); ++second) {
        expect_same(stream(c.text, {first, second}, c.options), expected,
                    "splits " + std::to_string(first) + "," + std::to_string(second) + " of: " + c.text);
      }
    }
  }
}

TEST(OutputParserStreaming, ByteByByteAndRandomChunksMatchOneShot) {
  std::mt19937 rng(1234);
  for (const StreamCase& c : stream_cases()) {
    ParsedOutput expected = parse(c.text, c.options);
    std::vector<size_t> every_byte;
    for (size_t i = 1; i < c.text.size(); ++i) every_byte.push_back(i);
    expect_same(stream(c.text, every_byte, c.options), expected, "byte by byte: " + c.text);
    for (int trial = 0; trial < 200; ++trial) {
      std::vector<size_t> cuts;
      size_t position = 0;
      while (true) {
        position += std::uniform_int_distribution<size_t>(0, 7)(rng);
        if (position >= c.text.size()) break;
        cuts.push_back(position);
      }
      expect_same(stream(c.text, cuts, c.options), expected, "random chunks: " + c.text);
    }
  }
}

TEST(OutputParserStreaming, EmitsIncrementallyAndHoldsBackPartialMarkers) {
  StreamingOutputParser parser;
  std::vector<StreamEvent> events = parser.feed("Sure. <|tool_ca");
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind, StreamEvent::Kind::kContent);
  EXPECT_EQ(events[0].text, "Sure. ");

  events = parser.feed("ll_start|>[get_weather(city=\"Par");
  EXPECT_TRUE(events.empty());  // inside a block nothing is emitted before its end marker

  events = parser.feed("is\")]<|tool_call_e");
  EXPECT_TRUE(events.empty());

  events = parser.feed("nd|>Done");
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].kind, StreamEvent::Kind::kToolCall);
  EXPECT_EQ(events[0].tool_call.at("function").at("arguments"), R"({"city":"Paris"})");
  EXPECT_EQ(events[1].kind, StreamEvent::Kind::kContent);
  EXPECT_EQ(events[1].text, "Done");
  EXPECT_EQ(parser.tool_call_count(), 1u);
  EXPECT_TRUE(parser.finish().empty());
}

TEST(OutputParserStreaming, ReasoningIsStreamedAsItArrives) {
  StreamingOutputParser parser;
  EXPECT_TRUE(parser.feed("  <thi").empty());  // could still be <think>
  std::vector<StreamEvent> events = parser.feed("nk>\nFirst idea. ");
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind, StreamEvent::Kind::kReasoning);
  EXPECT_EQ(events[0].text, "First idea.");  // trailing space held: it is trimmed if </think> follows
  events = parser.feed("Second.</th");
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].text, " Second.");
  events = parser.feed("ink>\n\nAnswer");
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind, StreamEvent::Kind::kContent);
  EXPECT_EQ(events[0].text, "Answer");
}

TEST(OutputParserStreaming, UnterminatedBlockFlushedAtFinish) {
  StreamingOutputParser parser;
  EXPECT_EQ(parser.feed("ok " + kStart + "[f(").size(), 1u);
  std::vector<StreamEvent> events = parser.finish();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind, StreamEvent::Kind::kContent);
  EXPECT_EQ(events[0].text, kStart + "[f(");
}

TEST(OutputParserStreaming, HeldMultibyteCharacterIsReleasedWhenComplete) {
  StreamingOutputParser parser;
  std::vector<StreamEvent> events = parser.feed("ab\xf0\x9f");
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].text, "ab");
  events = parser.feed("\x98\x80");
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].text, "\xf0\x9f\x98\x80");
}

// ---------------------------------------------------------------------------------------------
// Properties: rendering random arguments the way the chat templates do parses back to them,
// and mutated calls never crash and stream consistently.

ordered_json random_value(std::mt19937& rng, int depth) {
  auto pick = [&](int n) { return std::uniform_int_distribution<int>(0, n - 1)(rng); };
  static const std::vector<std::string> pieces = {"a", "Z", " ", "\"", "'", "\\", "\n", "\t", "\xc3\xa9",
                                                  "\xf0\x9f\x98\x80", "<", "|", "(", "]", "=", ",", "\x01"};
  int kind = pick(depth >= 3 ? 6 : 8);
  switch (kind) {
    case 0: {
      std::string s;
      for (int i = pick(8); i > 0; --i) s += pieces[pick(static_cast<int>(pieces.size()))];
      return s;
    }
    case 1: return std::uniform_int_distribution<int64_t>(-1000000, 1000000)(rng);
    case 2: return std::uniform_real_distribution<double>(-1e6, 1e6)(rng);
    case 3: return std::ldexp(std::uniform_real_distribution<double>(-1, 1)(rng), pick(200) - 100);
    case 4: return pick(2) == 0;
    case 5: return nullptr;
    case 6: {
      ordered_json array = ordered_json::array();
      for (int i = pick(4); i > 0; --i) array.push_back(random_value(rng, depth + 1));
      return array;
    }
    default: {
      ordered_json object = ordered_json::object();
      for (int i = pick(4); i > 0; --i) object["k" + std::to_string(pick(100))] = random_value(rng, depth + 1);
      return object;
    }
  }
}

std::string python_single_quoted(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\\' || c == '\'') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out + "'";
}

// Python-style rendering: strings quoted (JSON double quotes or Python single quotes), mappings
// as JSON (like the templates' tojson), lists element-wise, scalars as Python spells them.
std::string render_python(const ordered_json& value, bool single_quotes) {
  if (value.is_string()) return single_quotes ? python_single_quoted(value.get<std::string>()) : value.dump();
  if (value.is_boolean()) return value.get<bool>() ? "True" : "False";
  if (value.is_null()) return "None";
  if (value.is_object()) return value.dump();
  if (value.is_array()) {
    std::string out = "[";
    for (size_t i = 0; i < value.size(); ++i) out += (i ? ", " : "") + render_python(value[i], single_quotes);
    return out + "]";
  }
  return value.dump();
}

TEST(OutputParserProperties, RenderedArgumentsRoundTrip) {
  std::mt19937 rng(99);
  for (int trial = 0; trial < 500; ++trial) {
    ordered_json arguments = ordered_json::object();
    int count = std::uniform_int_distribution<int>(0, 5)(rng);
    for (int i = 0; i < count; ++i) arguments["p" + std::to_string(i * 7 % 5) + std::to_string(i)] = random_value(rng, 0);
    bool single_quotes = trial % 2 == 1;
    std::string rendered = "tool_" + std::to_string(trial) + "(";
    bool first = true;
    for (const auto& [key, value] : arguments.items()) {
      rendered += (first ? "" : ", ") + key + "=" + render_python(value, single_quotes);
      first = false;
    }
    rendered += ")";
    ParsedOutput out = parse(block("[" + rendered + "]"));
    ASSERT_EQ(out.tool_calls.size(), 1u) << rendered << "\n" << out.content;
    EXPECT_EQ(arguments_of(out, 0), arguments) << rendered;  // ordered_json: order-sensitive
    EXPECT_EQ(arguments_text(out, 0), arguments.dump());
  }
}

TEST(OutputParserProperties, MutatedCallsNeverThrowAndStreamConsistently) {
  const std::vector<std::string> seeds = {
      "Let me look. " + block(R"([get_weather(city="Paris", days=3, opts={"u": [1, 2.5e-3, None]})])") + " ok",
      "<think>hmm</think>" + block(R"([{"name": "f", "arguments": {"a": 'x\'y', "b": (1, True)}}])"),
      block(R"([a.b(x='''t"q''', y=-1, z=g(h=[])), c("\u00e9\n")])") + block("[d()]"),
  };
  const std::string alphabet = "[](){}\"',=:\\ \n.-+0123456789eTFN<|>_abcxu";
  std::mt19937 rng(4321);
  auto pick = [&](size_t n) { return std::uniform_int_distribution<size_t>(0, n - 1)(rng); };
  size_t calls_seen = 0;
  size_t fallbacks_seen = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    std::string text = seeds[pick(seeds.size())];
    for (size_t m = 1 + pick(3); m > 0 && !text.empty(); --m) {
      size_t at = pick(text.size());
      switch (pick(4)) {
        case 0: text.erase(at, 1); break;
        case 1: text.insert(at, 1, alphabet[pick(alphabet.size())]); break;
        case 2: text.insert(at, text.substr(at, 1 + pick(6))); break;
        default: text.resize(at); break;
      }
    }
    ParsedOutput expected;
    ASSERT_NO_THROW(expected = parse(text)) << text;
    for (const json& call : expected.tool_calls) {
      ordered_json arguments;
      ASSERT_NO_THROW(arguments = ordered_json::parse(call.at("function").at("arguments").get<std::string>())) << text;
      EXPECT_TRUE(arguments.is_object()) << text;
      EXPECT_FALSE(call.at("function").at("name").get<std::string>().empty()) << text;
    }
    calls_seen += expected.tool_calls.size();
    if (expected.content.find(kStart) != std::string::npos) ++fallbacks_seen;
    std::vector<size_t> cuts;
    for (size_t position = pick(5); position < text.size(); position += 1 + pick(6)) cuts.push_back(position);
    expect_same(stream(text, cuts, {}, false), expected, "mutated: " + text);
  }
  // The mutations must exercise both outcomes, or this test proves nothing.
  EXPECT_GT(calls_seen, 500u);
  EXPECT_GT(fallbacks_seen, 500u);
}

}  // namespace
}  // namespace lfm::chat
