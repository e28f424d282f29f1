// Tests for chat/output_parser and chat/pythonic_call_parser: literal kinds, call shapes,
// reasoning, malformed blocks falling back to content and depth limits. The streaming parser is
// tested in output_parser_stream_test.cpp.
#include "output_parser_test_util.h"

namespace lfm::chat {
namespace {

using namespace parser_test;

// ---------------------------------------------------------------------------------------------
// Literal kinds

TEST(OutputParserLiterals, BasicCallAndOpenAIShape) {
  ParsedOutput out = parse(block(R"([get_weather(city="Paris", days=3)])"));
  ASSERT_EQ(out.tool_calls.size(), 1u);
  EXPECT_EQ(out.content, "");
  const json& call = out.tool_calls[0];
  EXPECT_EQ(call.at("id"), "call_0");
  EXPECT_EQ(call.at("type"), "function");
  EXPECT_EQ(call.at("function").at("name"), "get_weather");
  EXPECT_EQ(call.at("function").at("arguments"), R"({"city":"Paris","days":3})");
}

TEST(OutputParserLiterals, ArgumentKeyOrderIsPreserved) {
  ParsedOutput out = parse(block(R"([f(zeta=1, alpha=2, mid={"z": 1, "a": 2})])"));
  ASSERT_EQ(out.tool_calls.size(), 1u);
  EXPECT_EQ(arguments_text(out, 0), R"({"zeta":1,"alpha":2,"mid":{"z":1,"a":2}})");
}

TEST(OutputParserLiterals, StringsQuotesAndEscapes) {
  ordered_json args = single_call_arguments(
      R"X(f(a="line\nbreak", b='it\'s', c="tab\there", d="back\\slash", e="q\"uote", g="\u00e9", h="\x41",)X"
      R"X( i="\ud83d\ude00", j='mixed "double" inside', k="single 'inside'", l="\r\b\f\v\a\/", m="\101\0",)X"
      R"X( n="unknown \q kept", o="cont\
inued", p="raw
newline", q="\U0001F600", r="ü direct"))X");
  EXPECT_EQ(args["a"], "line\nbreak");
  EXPECT_EQ(args["b"], "it's");
  EXPECT_EQ(args["c"], "tab\there");
  EXPECT_EQ(args["d"], "back\\slash");
  EXPECT_EQ(args["e"], "q\"uote");
  EXPECT_EQ(args["g"], "\xc3\xa9");
  EXPECT_EQ(args["h"], "A");
  EXPECT_EQ(args["i"], "\xf0\x9f\x98\x80");
  EXPECT_EQ(args["j"], "mixed \"double\" inside");
  EXPECT_EQ(args["k"], "single 'inside'");
  EXPECT_EQ(args["l"], "\r\b\f\v\a/");
  EXPECT_EQ(args["m"], std::string("A\0", 2));
  EXPECT_EQ(args["n"], "unknown \\q kept");
  EXPECT_EQ(args["o"], "continued");
  EXPECT_EQ(args["p"], "raw\nnewline");
  EXPECT_EQ(args["q"], "\xf0\x9f\x98\x80");
  EXPECT_EQ(args["r"], "\xc3\xbc direct");
}

TEST(OutputParserLiterals, LoneSurrogatesBecomeReplacementCharacter) {
  ordered_json args = single_call_arguments(R"(f(a="\ud83dx", b="\ude00", c="\ud83d\u0041"))");
  EXPECT_EQ(args["a"], "\xef\xbf\xbdx");
  EXPECT_EQ(args["b"], "\xef\xbf\xbd");
  EXPECT_EQ(args["c"], "\xef\xbf\xbd" "A");
}

TEST(OutputParserLiterals, TripleQuotedStrings) {
  ordered_json args = single_call_arguments(
      "f(a='''multi\nline \"quoted\" 'x' ''', b=\"\"\"tri\"ple \"\" q\"\"\", c='''''', d=\"\"\"esc\\n\"\"\")");
  EXPECT_EQ(args["a"], "multi\nline \"quoted\" 'x' ");
  EXPECT_EQ(args["b"], "tri\"ple \"\" q");
  EXPECT_EQ(args["c"], "");
  EXPECT_EQ(args["d"], "esc\n");
}

TEST(OutputParserLiterals, StringPrefixes) {
  ordered_json args = single_call_arguments(R"(f(a=r"C:\new\'x", b=u'uni\n', c=b"by", d=R'\d+'))");
  EXPECT_EQ(args["a"], "C:\\new\\'x");
  EXPECT_EQ(args["b"], "uni\n");
  EXPECT_EQ(args["c"], "by");
  EXPECT_EQ(args["d"], "\\d+");
  expect_plain_content(block(R"([f(a=x"no")])"));
}

TEST(OutputParserLiterals, EmptyStrings) {
  ordered_json args = single_call_arguments(R"(f(a="", b='', c={"": ""}))");
  EXPECT_EQ(args["a"], "");
  EXPECT_EQ(args["b"], "");
  EXPECT_EQ(args["c"], ordered_json({{"", ""}}));
}

TEST(OutputParserLiterals, Numbers) {
  ordered_json args = single_call_arguments(
      "f(a=0, b=-7, c=3.25, d=-0.5, e=1e3, g=2.5E-2, h=+4, i=.5, j=5., k=9223372036854775807,"
      " l=18446744073709551615, m=123456789012345678901234567890, n=-9223372036854775808, o=-1.5e+2)");
  EXPECT_TRUE(args["a"].is_number_integer());
  EXPECT_EQ(args["a"], 0);
  EXPECT_EQ(args["b"], -7);
  EXPECT_TRUE(args["b"].is_number_integer());
  EXPECT_TRUE(args["c"].is_number_float());
  EXPECT_DOUBLE_EQ(args["c"].get<double>(), 3.25);
  EXPECT_DOUBLE_EQ(args["d"].get<double>(), -0.5);
  EXPECT_TRUE(args["e"].is_number_float());
  EXPECT_DOUBLE_EQ(args["e"].get<double>(), 1000.0);
  EXPECT_DOUBLE_EQ(args["g"].get<double>(), 0.025);
  EXPECT_EQ(args["h"], 4);
  EXPECT_DOUBLE_EQ(args["i"].get<double>(), 0.5);
  EXPECT_TRUE(args["j"].is_number_float());
  EXPECT_DOUBLE_EQ(args["j"].get<double>(), 5.0);
  EXPECT_EQ(args["k"].get<int64_t>(), std::numeric_limits<int64_t>::max());
  EXPECT_EQ(args["l"].get<uint64_t>(), std::numeric_limits<uint64_t>::max());
  EXPECT_TRUE(args["m"].is_number_float());
  EXPECT_DOUBLE_EQ(args["m"].get<double>(), 1.2345678901234568e29);
  EXPECT_EQ(args["n"].get<int64_t>(), std::numeric_limits<int64_t>::min());
  EXPECT_DOUBLE_EQ(args["o"].get<double>(), -150.0);
}

TEST(OutputParserLiterals, PythonAndJsonConstants) {
  ParsedOutput out = parse(block("[f(a=True, b=False, c=None, d=true, e=false, g=null)]"));
  ASSERT_EQ(out.tool_calls.size(), 1u);
  EXPECT_EQ(arguments_text(out, 0), R"({"a":true,"b":false,"c":null,"d":true,"e":false,"g":null})");
}

TEST(OutputParserLiterals, ContainersAndTuples) {
  ordered_json args = single_call_arguments(
      R"(f(a=[1, "two", 3.0], b=(1, 2), c=(), d=(5), e=(5,), g={"k": [1, {"n": None}]}, h={'s': 1},)"
      R"( i={key: 1, 2: "x", 1.5: True}, j=[], k={}, l=[1, 2,], m={"a": 1,}, n=[[[]]], o={"dup": 1, "dup": 2}))");
  EXPECT_EQ(args["a"], ordered_json::parse(R"([1, "two", 3.0])"));
  EXPECT_EQ(args["b"], ordered_json::parse("[1, 2]"));
  EXPECT_EQ(args["c"], ordered_json::array());
  EXPECT_EQ(args["d"], 5);
  EXPECT_EQ(args["e"], ordered_json::parse("[5]"));
  EXPECT_EQ(args["g"], ordered_json::parse(R"({"k": [1, {"n": null}]})"));
  EXPECT_EQ(args["h"], ordered_json::parse(R"({"s": 1})"));
  EXPECT_EQ(args["i"], ordered_json::parse(R"({"key": 1, "2": "x", "1.5": true})"));
  EXPECT_EQ(args["j"], ordered_json::array());
  EXPECT_EQ(args["k"], ordered_json::object());
  EXPECT_EQ(args["l"], ordered_json::parse("[1, 2]"));
  EXPECT_EQ(args["m"], ordered_json::parse(R"({"a": 1})"));
  EXPECT_EQ(args["n"], ordered_json::parse("[[[]]]"));
  EXPECT_EQ(args["o"], ordered_json::parse(R"({"dup": 2})"));  // Python dict semantics: last wins
}

// ---------------------------------------------------------------------------------------------
// Call shapes

TEST(OutputParserCalls, NestedCallBecomesNameArgumentsObject) {
  ordered_json args = single_call_arguments(R"(schedule(when=date(year=2024, month=1), then=[m.g(1)]))");
  EXPECT_EQ(args.dump(), R"({"when":{"name":"date","arguments":{"year":2024,"month":1}},)"
                         R"("then":[{"name":"m.g","arguments":{"arg0":1}}]})");
}

TEST(OutputParserCalls, DottedAndHyphenatedNames) {
  ParsedOutput out = parse(block(R"([tools.search.web(q="x"), get-weather(), a_b.c2()])"));
  ASSERT_EQ(out.tool_calls.size(), 3u);
  EXPECT_EQ(name_of(out, 0), "tools.search.web");
  EXPECT_EQ(arguments_text(out, 0), R"({"q":"x"})");
  EXPECT_EQ(name_of(out, 1), "get-weather");
  EXPECT_EQ(name_of(out, 2), "a_b.c2");
}

TEST(OutputParserCalls, PositionalArgumentsMapToArgN) {
  EXPECT_EQ(single_call_arguments(R"(f(1, "a", [2]))").dump(), R"({"arg0":1,"arg1":"a","arg2":[2]})");
  EXPECT_EQ(single_call_arguments(R"(f(1, x=2))").dump(), R"({"arg0":1,"x":2})");
  EXPECT_EQ(single_call_arguments(R"(f(True, None))").dump(), R"({"arg0":true,"arg1":null})");
  EXPECT_EQ(single_call_arguments("f()").dump(), "{}");
}

TEST(OutputParserCalls, PositionalAfterKeywordAndRepeatedNamesAreMalformed) {
  expect_plain_content(block("[f(x=1, 2)]"));
  expect_plain_content(block("[f(x=1, x=2)]"));
  expect_plain_content(block("[f(1, arg0=2)]"));
}

TEST(OutputParserCalls, WhitespaceAndNewlinesAnywhere) {
  std::string text = block("\n [\n  get_weather (\n    city = \"Paris\" ,\n\tdays=\r\n3\n  )\n ,\n other( )\n,]\n ");
  ParsedOutput out = parse(text);
  ASSERT_EQ(out.tool_calls.size(), 2u) << out.content;
  EXPECT_EQ(arguments_text(out, 0), R"({"city":"Paris","days":3})");
  EXPECT_EQ(name_of(out, 1), "other");
  EXPECT_EQ(arguments_text(out, 1), "{}");
  EXPECT_EQ(out.content, "");
}

TEST(OutputParserCalls, EmptyListYieldsNothing) {
  ParsedOutput out = parse("Nothing to call." + block("[ ]") + " Done.");
  EXPECT_TRUE(out.tool_calls.empty());
  EXPECT_EQ(out.content, "Nothing to call. Done.");
}

TEST(OutputParserCalls, UnbracketedCalls) {
  ParsedOutput one = parse(block("f(a=1)"));
  ASSERT_EQ(one.tool_calls.size(), 1u);
  EXPECT_EQ(arguments_text(one, 0), R"({"a":1})");
  ParsedOutput two = parse(block("f(), g(b='x'),"));
  ASSERT_EQ(two.tool_calls.size(), 2u);
  EXPECT_EQ(name_of(two, 1), "g");
}

TEST(OutputParserCalls, JsonForm) {
  ParsedOutput list = parse(block(R"([{"name": "f", "arguments": {"b": 1, "a": [true, null]}}, {"name": "g"}])"));
  ASSERT_EQ(list.tool_calls.size(), 2u);
  EXPECT_EQ(name_of(list, 0), "f");
  EXPECT_EQ(arguments_text(list, 0), R"({"b":1,"a":[true,null]})");
  EXPECT_EQ(arguments_text(list, 1), "{}");

  ParsedOutput single = parse(block(R"({"name": "g", "parameters": {"x": "y"}})"));
  ASSERT_EQ(single.tool_calls.size(), 1u);
  EXPECT_EQ(name_of(single, 0), "g");
  EXPECT_EQ(arguments_text(single, 0), R"({"x":"y"})");

  ParsedOutput as_string = parse(block(R"([{"name": "h", "arguments": "{\"q\": 1, \"a\": \"b\"}"}])"));
  ASSERT_EQ(as_string.tool_calls.size(), 1u);
  EXPECT_EQ(arguments_text(as_string, 0), R"({"q":1,"a":"b"})");

  ParsedOutput openai = parse(block(R"([{"type": "function", "function": {"name": "k", "arguments": {"z": 0}}}])"));
  ASSERT_EQ(openai.tool_calls.size(), 1u);
  EXPECT_EQ(name_of(openai, 0), "k");
  EXPECT_EQ(arguments_text(openai, 0), R"({"z":0})");

  ParsedOutput mixed = parse(block(R"([f(a=1), {"name": "g", "arguments": {}}])"));
  ASSERT_EQ(mixed.tool_calls.size(), 2u);
  EXPECT_EQ(name_of(mixed, 1), "g");
}

TEST(OutputParserCalls, MalformedJsonForm) {
  for (const char* body : {R"([{"arguments": {}}])", R"([{"name": 5}])", R"([{"name": ""}])",
                           R"([{"name": "f", "arguments": [1]}])", R"([{"name": "f", "arguments": "not json"}])",
                           R"([{"name": "f", "arguments": "[1]"}])", R"([{"name": "f", "arguments": 3}])",
                           R"([{"name": "f"} {"name": "g"}])"}) {
    SCOPED_TRACE(body);
    expect_plain_content(block(body));
  }
}

TEST(OutputParserCalls, MultipleBlocksAndTextAround) {
  std::string text = "Checking both. " + block("[f()]") + " and then " + block("[g(x=1), h()]") + " done.";
  ParsedOutput out = parse(text);
  EXPECT_EQ(out.content, "Checking both.  and then  done.");
  ASSERT_EQ(out.tool_calls.size(), 3u);
  EXPECT_EQ(out.tool_calls[0].at("id"), "call_0");
  EXPECT_EQ(out.tool_calls[1].at("id"), "call_1");
  EXPECT_EQ(out.tool_calls[2].at("id"), "call_2");
  EXPECT_EQ(name_of(out, 0), "f");
  EXPECT_EQ(name_of(out, 1), "g");
  EXPECT_EQ(name_of(out, 2), "h");
}

TEST(OutputParserCalls, IdPrefixOption) {
  OutputParserOptions options;
  options.tool_call_id_prefix = "call_req7_";
  ParsedOutput out = parse(block("[f(), g()]"), options);
  ASSERT_EQ(out.tool_calls.size(), 2u);
  EXPECT_EQ(out.tool_calls[1].at("id"), "call_req7_1");
}

TEST(OutputParserCalls, ToolCallParsingCanBeDisabled) {
  OutputParserOptions options;
  options.parse_tool_calls = false;
  expect_plain_content("a " + block("[f()]") + " b", options);
}

TEST(OutputParserCalls, TemplateRenderedCallsParseBack) {
  // The two quoting styles the LFM2.5 templates use when rendering assistant tool_calls.
  ParsedOutput double_quoted = parse(block(R"([get_weather(city="Paris", units={"temp": "C"}, days=3, ok=True)])"));
  ParsedOutput single_quoted = parse(block(R"([get_weather(city='Paris', units={"temp": "C"}, days=3, ok=True)])"));
  ASSERT_EQ(double_quoted.tool_calls.size(), 1u);
  EXPECT_EQ(double_quoted.tool_calls, single_quoted.tool_calls);
  EXPECT_EQ(arguments_text(double_quoted, 0), R"({"city":"Paris","units":{"temp":"C"},"days":3,"ok":true})");
}

// ---------------------------------------------------------------------------------------------
// Reasoning

TEST(OutputParserReasoning, ThinkBlockAtStart) {
  ParsedOutput out = parse("<think>I should check.</think>It is sunny.");
  EXPECT_EQ(out.reasoning_content, "I should check.");
  EXPECT_EQ(out.content, "It is sunny.");
}

TEST(OutputParserReasoning, WhitespaceAroundTagsIsTrimmed) {
  ParsedOutput out = parse(" \n<think>\nStep 1.\nStep 2.\n</think>\n\n Answer\n");
  EXPECT_EQ(out.reasoning_content, "Step 1.\nStep 2.");
  EXPECT_EQ(out.content, "Answer\n");
}

TEST(OutputParserReasoning, StartsInsideReasoning) {
  OutputParserOptions options;
  options.starts_in_reasoning = true;
  ParsedOutput out = parse("Thinking...\n</think>\nDone", options);
  EXPECT_EQ(out.reasoning_content, "Thinking...");
  EXPECT_EQ(out.content, "Done");
  ParsedOutput repeated_tag = parse("<think>x</think>y", options);
  EXPECT_EQ(repeated_tag.reasoning_content, "x");
  EXPECT_EQ(repeated_tag.content, "y");
  ParsedOutput never_closed = parse("  all reasoning ", options);
  EXPECT_EQ(never_closed.reasoning_content, "all reasoning");
  EXPECT_EQ(never_closed.content, "");
}

TEST(OutputParserReasoning, UnterminatedReasoningStaysReasoning) {
  ParsedOutput out = parse("<think>still going  ");
  EXPECT_EQ(out.reasoning_content, "still going");
  EXPECT_EQ(out.content, "");
}

TEST(OutputParserReasoning, ThinkNotAtStartIsContent) {
  expect_plain_content("Hi <think>x</think> there");
  expect_plain_content("<thinking> is a tag");
  expect_plain_content("</think> stray");
  ParsedOutput second = parse("<think>a</think>b<think>c</think>");
  EXPECT_EQ(second.reasoning_content, "a");
  EXPECT_EQ(second.content, "b<think>c</think>");
}

TEST(OutputParserReasoning, ReasoningCanBeDisabled) {
  OutputParserOptions options;
  options.parse_reasoning = false;
  expect_plain_content("<think>a</think>b", options);
}

TEST(OutputParserReasoning, ReasoningWithToolCall) {
  ParsedOutput out = parse("<think>Need the weather.</think>\n" + block(R"([get_weather(city="Paris")])"));
  EXPECT_EQ(out.reasoning_content, "Need the weather.");
  EXPECT_EQ(out.content, "");
  ASSERT_EQ(out.tool_calls.size(), 1u);
  EXPECT_EQ(arguments_text(out, 0), R"({"city":"Paris"})");
}

TEST(OutputParserReasoning, MarkersInsideReasoningAreReasoningText) {
  std::string reasoning = "maybe " + block("[f()]");
  ParsedOutput out = parse("<think>" + reasoning + "</think>ok");
  EXPECT_EQ(out.reasoning_content, reasoning);
  EXPECT_EQ(out.content, "ok");
  EXPECT_TRUE(out.tool_calls.empty());
}

// ---------------------------------------------------------------------------------------------
// Malformed input degrades to content

TEST(OutputParserMalformed, BadBlocksStayVerbatimContent) {
  const char* bodies[] = {
      "[f(a=1]",        "[f(a=1)",          "f(a=1))",         "[f(a=)]",           "[f(a=tru)]",
      "[f(a=x)]",       "[f(a=\"unterm)]",  "[f(a='x\")]",     "[f(a=1 b=2)]",      "[f(a=1,,b=2)]",
      "[f(a=01x)]",     "[f(a=1e)]",        "[f(a=--1)]",      "[f(a=1.2.3)]",      "[f(a={1, 2})]",
      "[f(a={\"k\" 1})]", "[f(a=\"\\u12\")]", "[f(a=\"\\xZZ\")]", "[1, 2]",           "[\"f\"]",
      "[f]",            "[f(a=1) extra]",   "[f(a=1)] trailing", "",                 "   ",
      "[(a=1)]",        "[.f()]",           "[f.()]",          "[f(a=1e999)]",      "[f(a=nan)]",
      "[f(a=\"\\U00110000\")]", "[f(a=[1, 2)]", "[f(a={)]",     "[f(a=\"\\",       "[,]",
      "[f(a=1)]]",      "[[f()]]",          "[f(a=1), ]x",     "[f(a=(1 2))]",      "[f(a=.)]",
      "[f(a=+)]",       "[f(a={'a': })]",   "[f(**kw)]",       "[f(a==1)]",         "[f(a=1)(b=2)]"};
  for (const char* body : bodies) {
    SCOPED_TRACE(body);
    expect_plain_content("Before " + block(body) + " after");
  }
}

TEST(OutputParserMalformed, MissingEndMarkerAtEndOfStream) {
  expect_plain_content("Sure " + kStart + "[f(a=1)]");
  expect_plain_content(kStart);
  expect_plain_content("x " + kStart + "[f(a=\"<|tool_call_en");
  // A good block before the unterminated one is still a call.
  ParsedOutput out = parse(block("[f()]") + " then " + kStart + "[g(");
  ASSERT_EQ(out.tool_calls.size(), 1u);
  EXPECT_EQ(out.content, " then " + kStart + "[g(");
}

TEST(OutputParserMalformed, StrayEndMarkerAndPartialMarkersAreContent) {
  expect_plain_content("a " + kEnd + " b");
  expect_plain_content("ends with <|tool_ca");
  expect_plain_content("<|tool_call_start| not quite");
  expect_plain_content("<|im_end|> and <| and |>");
}

TEST(OutputParserMalformed, MalformedBlockNextToGoodBlock) {
  ParsedOutput out = parse(block("[f(a=]") + block("[g(b=2)]"));
  ASSERT_EQ(out.tool_calls.size(), 1u);
  EXPECT_EQ(name_of(out, 0), "g");
  EXPECT_EQ(out.tool_calls[0].at("id"), "call_0");
  EXPECT_EQ(out.content, block("[f(a=]"));
}

TEST(OutputParserMalformed, DeepNestingIsRejectedWithoutRecursingFurther) {
  for (const std::string& open_close : {std::string("[]"), std::string("()"), std::string("{}")}) {
    std::string nested;
    if (open_close == "{}") {
      for (int i = 0; i < 100000; ++i) nested += "{\"k\": ";
      nested += "1" + std::string(100000, '}');
    } else {
      nested = std::string(100000, open_close[0]) + std::string(100000, open_close[1]);
    }
    expect_plain_content(block("[f(a=" + nested + ")]"));
  }
  std::string nested_calls;
  for (int i = 0; i < 100000; ++i) nested_calls += "g(";
  nested_calls += std::string(100000, ')');
  expect_plain_content(block("[f(a=" + nested_calls + ")]"));
  expect_plain_content(block(std::string(100000, '[')));
}

TEST(OutputParserMalformed, DepthLimitBoundary) {
  // Depth counts the call (1), its argument value (2) and every container below it.
  auto nested_lists = [](int levels) { return std::string(levels, '[') + std::string(levels, ']'); };
  OutputParserOptions options;
  options.max_nesting_depth = 10;
  ParsedOutput at_limit = parse(block("[f(a=" + nested_lists(9) + ")]"), options);
  EXPECT_EQ(at_limit.tool_calls.size(), 1u);
  expect_plain_content(block("[f(a=" + nested_lists(10) + ")]"), options);
  ParsedOutput default_depth = parse(block("[f(a=" + nested_lists(50) + ")]"));
  EXPECT_EQ(default_depth.tool_calls.size(), 1u);
}

TEST(OutputParserMalformed, BlockParserReportsOffsets) {
  try {
    parse_tool_call_block("[f(a=1 b=2)]");
    FAIL() << "expected lfm::Error";
  } catch (const lfm::Error& e) {
    EXPECT_NE(std::string(e.what()).find("offset 7"), std::string::npos) << e.what();
  }
}

TEST(OutputParserMalformed, InvalidUtf8DoesNotThrow) {
  std::string bad = "\xff\xfe text \xc3";
  ParsedOutput content_only = parse(bad);
  EXPECT_EQ(content_only.content, bad);
  ParsedOutput in_call = parse(block("[f(a=\"\xff\xc3\")]"));
  ASSERT_EQ(in_call.tool_calls.size(), 1u);
  EXPECT_EQ(arguments_of(in_call, 0)["a"], "\xef\xbf\xbd\xef\xbf\xbd");  // replaced when serialised
}

TEST(OutputParserMalformed, MisuseThrows) {
  StreamingOutputParser parser;
  parser.finish();
  EXPECT_TRUE(parser.finished());
  EXPECT_THROW(parser.feed("x"), lfm::Error);
  EXPECT_THROW(parser.finish(), lfm::Error);
}

}  // namespace
}  // namespace lfm::chat
