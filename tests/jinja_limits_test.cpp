// Hostile templates and inputs must fail with a clear TemplateError instead of crashing,
// exhausting the stack or running forever.
#include <gtest/gtest.h>

#include <string>

#include "chat/jinja_eval.h"

namespace lfm::jinja {
namespace {

std::string render(const std::string& src, const RenderLimits& lim = {}, const VarList& vars = {}) {
  return Template(src).render(vars, {}, lim);
}

void expect_error(const std::string& src, const std::string& part, const RenderLimits& lim = {},
                  const VarList& vars = {}) {
  try {
    render(src, lim, vars);
    ADD_FAILURE() << "no error for template of " << src.size() << " bytes: " << src.substr(0, 120);
  } catch (const TemplateError& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

TEST(JinjaLimits, DeeplyNestedParenthesesAreRejected) {
  expect_error("{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}", "too deep");
}

TEST(JinjaLimits, LongOperatorChainIsRejectedNotOverflowed) {
  std::string src = "{{ 1";
  for (int i = 0; i < 20000; ++i) src += " + 1";
  expect_error(src + " }}", "nested too deeply");
  std::string filters = "{{ 'x'";
  for (int i = 0; i < 20000; ++i) filters += "|upper";
  expect_error(filters + " }}", "nested too deeply");
}

TEST(JinjaLimits, ModerateChainsStillWork) {
  std::string src = "{{ 0";
  for (int i = 0; i < 300; ++i) src += " + 1";
  EXPECT_EQ(render(src + " }}"), "300");
}

TEST(JinjaLimits, DeeplyNestedBlocksAreRejected) {
  std::string src;
  for (int i = 0; i < 3000; ++i) src += "{% if true %}";
  for (int i = 0; i < 3000; ++i) src += "{% endif %}";
  expect_error(src, "too deep");
}

TEST(JinjaLimits, InfiniteMacroRecursionStops) {
  expect_error("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", "too deep");
}

TEST(JinjaLimits, StepBudgetStopsLongLoops) {
  RenderLimits lim;
  lim.max_steps = 100000;
  expect_error("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", "steps", lim);
}

TEST(JinjaLimits, RangeIsCappedLikeTheSandbox) { expect_error("{{ range(10**6)|length }}", "MAX_RANGE"); }

TEST(JinjaLimits, OutputSizeIsCapped) {
  RenderLimits lim;
  lim.max_output_bytes = 1 << 20;
  expect_error("{% for i in range(10000) %}{{ 'x' * 1000 }}{% endfor %}", "output exceeds", lim);
}

TEST(JinjaLimits, StringDoublingIsCapped) {
  expect_error(
      "{% set ns = namespace(s='x' * 1000) %}{% for i in range(100) %}{% set ns.s = ns.s + ns.s %}{% endfor %}",
      "too large");
}

TEST(JinjaLimits, DeepValueNestingIsCapped) {
  expect_error("{% set ns = namespace(x=[]) %}{% for i in range(5000) %}{% set ns.x = [ns.x] %}{% endfor %}{{ ns.x }}",
               "nesting too deep");
}

TEST(JinjaLimits, SelfReferencingNamespacePrintsLikeCPython) {
  EXPECT_EQ(render("{% set ns = namespace(a=1) %}{% set ns.me = ns %}{{ ns }}"),
            "<Namespace {'a': 1, 'me': <Namespace {...}>}>");
}

TEST(JinjaLimits, DeepJsonInputIsRejected) {
  std::string text;
  for (int i = 0; i < 2000; ++i) text += "[";
  for (int i = 0; i < 2000; ++i) text += "]";
  const auto j = nlohmann::ordered_json::parse(text);
  EXPECT_THROW(from_json(j), lfm::Error);
}

// Issue 12: sizes are checked before anything is built, without wrapping; every intermediate
// counts, not only the output.
TEST(JinjaLimits, RepetitionSizeChecksDoNotWrap) {
  // 4 x 2^62 wraps to 0 in 64 bits: the old check passed and the loop ran (practically) forever.
  expect_error("{{ 'abcd' * 4611686018427387904 }}", "string size limit exceeded");
  expect_error("{{ [1, 2, 3, 4] * 4611686018427387904 }}", "list size limit exceeded");
  // Empty sequences repeat in no time.
  EXPECT_EQ(render("{{ ('' * 4611686018427387904)|length }}{{ ([] * 4611686018427387904)|length }}"), "00");
}

TEST(JinjaLimits, IntermediateStringsAreBounded) {
  expect_error("{{ 'x'.zfill(10**12)|length }}", "str.zfill() would build a string of 1000000000000 bytes");
  expect_error("{{ 'x'|indent(10**12) }}", "|indent width");
  expect_error("{{ ('a\n' * 1000000)|indent(100) }}", "|indent would build");
  expect_error("{{ ('x' * 1000000)|replace('', 'abcdefghijklmnopqrstuvwxyz0123456789abcdefghijklmnopqrstuvwxyz0123456789')|length }}",
               "replace() would build");
  expect_error("{{ ('x' * 1000000).replace('x', 'y' * 100)|length }}", "replace() would build");
  expect_error("{{ (['x' * 1000000] * 100)|join|length }}", "|join would build");
  expect_error("{{ ''.join(['x' * 1000000] * 100)|length }}", "str.join() would build");
  expect_error("{% set s = 'x' * 40000000 %}{{ '{}{}'.format(s, s)|length }}", "str.format() would build");
  // Under the limits the results are unchanged.
  EXPECT_EQ(render("{{ '-5'.zfill(4) }}|{{ 'a\nb'|indent(2, true) }}|{{ 'aXa'.replace('a', 'bb') }}|{{ ['a', 'b']|join(', ') }}"),
            "-005|  a\n  b|bbXbb|a, b");
}

TEST(JinjaLimits, WorkIsBoundedWhenEveryStepBuildsALot) {
  // 100 steps of 60 MB each: each step is legal, the total work is not.
  expect_error("{% for i in range(100) %}{{ ('x' * 60000000)|length }}{% endfor %}", "work limit exceeded");
  RenderLimits lim;
  lim.max_built_bytes = 1 << 20;
  expect_error("{% for i in range(2000) %}{{ 'y' * 1000 }}{% endfor %}", "work limit exceeded", lim);
  EXPECT_EQ(render("{% for i in range(3) %}{{ 'y' * 2 }}{% endfor %}", lim), "yyyyyy");
}

// Issue 41: what a render holds at once is bounded apart from its work (RenderLimits::
// max_live_bytes): a list doubled in a namespace stops at the memory limit, not after building a
// gigabyte; values let go of give their memory back, so a loop that builds and drops big strings
// runs under a memory limit far below its total.
TEST(JinjaLimits, MemoryHeldAtOnceIsBounded) {
  expect_error("{% set ns = namespace(l=[1]) %}{% for i in range(40) %}{% set ns.l = ns.l + ns.l %}{% endfor %}",
               "memory limit exceeded");
  expect_error("{% set ns = namespace(d={'a': [1]}) %}{% for i in range(40) %}"
               "{% set ns.d = {'a': ns.d['a'] + ns.d['a'], 'b': ns.d} %}{% endfor %}",
               "memory limit exceeded");
  RenderLimits lim;
  lim.max_live_bytes = 8 << 20;
  EXPECT_EQ(render("{% set n = namespace(c=0) %}{% for i in range(50) %}{% set s = 'x' * 4000000 %}"
                   "{% set n.c = n.c + s|length %}{% endfor %}{{ n.c }}",
                   lim),
            "200000000");
  expect_error("{% set ns = namespace(l=[]) %}{% for i in range(50) %}{% set ns.l = ns.l + ['x' * 1000000] %}{% endfor %}",
               "memory limit exceeded", lim);
  lim.max_live_bytes = 1 << 20;  // the input (made before the render) is not charged
  EXPECT_EQ(render("{{ big|length }}", lim, {{"big", Value::string(std::string(4 << 20, 'a'))}}), "4194304");
}

// Issue 12, part 3: lists, dicts, scopes and scans are charged to the same work meter as strings,
// so that what a render builds, retains and scans is bounded (RenderLimits::max_built_bytes).
TEST(JinjaLimits, ContainerDoublingViaNamespaceIsBounded) {
  expect_error("{% set ns = namespace(l=[1]) %}{% for i in range(100) %}{% set ns.l = ns.l + ns.l %}{% endfor %}",
               "limit exceeded");
  // Growing by one item per step is quadratic work, stopped by the meter before the steps.
  RenderLimits lim;
  lim.max_built_bytes = 64 << 20;
  expect_error("{% set ns = namespace(l=[]) %}{% for i in range(100000) %}{% set ns.l = ns.l + [i] %}{% endfor %}",
               "work limit exceeded", lim);
}

TEST(JinjaLimits, NestedRepetitionOfSharedListsIsCharged) {
  // `[a] * n` shares `a` but holds n items: each such list costs its items, whatever `a` holds.
  expect_error("{% set a = [0] * 100000 %}{% for i in range(100) %}{% set b = [a] * 300000 %}{% endfor %}",
               "work limit exceeded");
  expect_error("{% set a = [0] * 1000 %}{{ ([a] * 5000000)|length }}", "list size limit exceeded");
}

TEST(JinjaLimits, DictGrowthInALoopIsBounded) {
  RenderLimits lim;
  lim.max_built_bytes = 64 << 20;
  expect_error("{% set ns = namespace(d={}) %}{% for i in range(100000) %}"
               "{% set ns.d = dict(ns.d|items|list + [(i, i)]) %}{% endfor %}{{ ns.d|length }}",
               "work limit exceeded", lim);
  expect_error("{% for i in range(100000) %}{% set d = dict(range(100000)|batch(2)) %}{% endfor %}",
               "work limit exceeded");
}

TEST(JinjaLimits, RepeatedFiltersOverBigRangesAreBounded) {
  expect_error("{% for i in range(100000) %}{% set x = range(100000)|map('string')|list|sort %}{% endfor %}",
               "work limit exceeded");
  expect_error("{% set big = range(100000)|list %}{% for i in range(100000) %}{% set x = big|select|list %}"
               "{% set y = big|unique|list %}{% endfor %}",
               "work limit exceeded");
  expect_error("{% set d = dict(range(2000)|batch(2)) %}{% for i in range(100000) %}{% set x = d|dictsort %}"
               "{% set y = d.items()|list %}{% endfor %}",
               "work limit exceeded");
}

TEST(JinjaLimits, PrintingSharedStructuresIsBounded) {
  // Small in memory, exponentially large when printed.
  const std::string shared = "{% set s = 'x' * 1000 %}{% set l = [s] * 1000 %}{% set l2 = [l] * 1000 %}";
  expect_error(shared + "{{ l2|tojson|length }}", "string size limit exceeded");
  expect_error(shared + "{{ (l2 ~ '')|length }}", "string size limit exceeded");
  const std::string empties = "{% set l = [[]] * 1000 %}{% set l2 = [l] * 1000 %}{% set l3 = [l2] * 1000 %}";
  expect_error(empties + "{{ l3|tojson(indent=2)|length }}", "limit exceeded");
  expect_error(empties + "{% for i in range(100) %}{{ l2|string|length }}{% endfor %}", "work limit exceeded");
  // Comparing two such structures visits every shared element.
  expect_error("{% set a = [1] * 1000 %}{% set b = [1] * 1000 %}{% set a3 = [[a] * 1000] * 1000 %}"
               "{% set b3 = [[b] * 1000] * 1000 %}{{ a3 == b3 }}",
               "work limit exceeded");
  // The same object compares equal at once (CPython's identity shortcut).
  EXPECT_EQ(render(empties + "{{ l3 == l3 }}"), "True");
}

TEST(JinjaLimits, StringFiltersAndScansInLoopsAreBounded) {
  const std::string big = "{% set s = 'ab' * 10000000 %}";
  RenderLimits lim;  // a smaller budget keeps the test fast; 1 GiB takes about a second per case
  lim.max_built_bytes = 256 << 20;
  expect_error(big + "{% for i in range(1000) %}{% set t = s|upper %}{% endfor %}", "work limit exceeded", lim);
  expect_error(big + "{% for i in range(1000) %}{% set t = s|trim|escape %}{% endfor %}", "work limit exceeded", lim);
  // Steps that build nothing but read the whole string.
  expect_error(big + "{% for i in range(100000) %}{% if 'zz' in s %}{% endif %}{% endfor %}", "work limit exceeded");
  expect_error(big + "{% for i in range(100000) %}{{ s|length }}{% endfor %}", "work limit exceeded");
  expect_error(big + "{% for i in range(100000) %}{{ s[-1] }}{% endfor %}", "work limit exceeded");
  expect_error(big + "{% for i in range(100000) %}{% set p = s.split('b') %}{% endfor %}", "limit exceeded");
  // Substring search is linear: no O(n*m) on 'a' * N searched for 'a' * M + 'b'.
  EXPECT_EQ(render("{% set h = 'a' * 20000000 %}{% set n = 'a' * 100000 + 'b' %}{{ n in h }} {{ h.find(n) }} "
                   "{{ h.rfind(n) }} {{ h.count(n) }} {{ h.split(n)|length }} {{ h.rsplit(n, 1)|length }}"),
            "False -1 -1 0 1 1");
  EXPECT_EQ(render("{{ 'a-b-c'.rsplit('-', 1) }} {{ 'abcabc'.rfind('bc') }} {{ 'abc'.rfind('') }} "
                   "{{ 'a-b'.rpartition('-') }} {{ 'aaaa'.count('aa') }} {{ 'xaay'.replace('a', 'b') }}"),
            "['a-b', 'c'] 4 3 ('a', '-', 'b') 2 xbby");
}

TEST(JinjaLimits, RetentionByScopesLoopsAndNamespacesIsBounded) {
  RenderLimits lim;
  lim.max_built_bytes = 64 << 20;
  // Each macro keeps its iteration's scope alive until the render ends.
  expect_error("{% for i in range(100000) %}{% for j in range(100) %}{% macro m() %}{{ i }}{% endmacro %}"
               "{% endfor %}{% endfor %}",
               "work limit exceeded", lim);
  expect_error("{% for i in range(100000) %}{% for j in range(100) %}{% set ns = namespace(a=i) %}{% endfor %}{% endfor %}",
               "work limit exceeded", lim);
  expect_error("{% for i in range(100000) %}{% for j in range(100) %}{% for k in [] %}{% endfor %}{% endfor %}{% endfor %}",
               "work limit exceeded", lim);
  // A namespace made from a long dict is not rebuilt quadratically.
  EXPECT_EQ(render("{% set ns = namespace(dict(range(20000)|map('string')|batch(2))) %}{{ ns['19998'] }}"), "19999");
}

TEST(JinjaLimits, OrdinaryTemplatesFitASmallBudget) {
  RenderLimits lim;
  lim.max_built_bytes = 1 << 20;
  const std::string src =
      "{% for m in messages %}{{ '<|' + m.role + '|>' }}{{ m.content|trim }}{{ '\n' if not loop.last }}"
      "{% endfor %}{{ messages|map(attribute='role')|join(',') }}|{{ messages|tojson }}";
  const auto msgs = from_json(nlohmann::ordered_json::parse(
      R"([{"role": "user", "content": " hi "}, {"role": "assistant", "content": "yo"}])"));
  EXPECT_EQ(render(src, lim, {{"messages", msgs}}),
            "<|user|>hi\n<|assistant|>yo"
            "user,assistant|[{\"role\": \"user\", \"content\": \" hi \"}, {\"role\": \"assistant\", \"content\": \"yo\"}]");
}

TEST(JinjaLimits, FormatWidthsAndFieldsFailCleanly) {
  // Width digits used to overflow int64 (undefined behaviour) before the width check.
  expect_error("{{ '%99999999999999999999999d' % 1 }}", "width/precision above 4096");
  expect_error("{{ '%.99999999999999999999999f' % 1.5 }}", "width/precision above 4096");
  // std::stoul threw std::out_of_range past the template's error handling.
  expect_error("{{ '{99999999999999999999}'.format(1) }}", "str.format field");
  expect_error("{{ '{1a}'.format(1, 2) }}", "str.format field");
  EXPECT_EQ(render("{{ '{1}{0}'.format('a', 'b') }}"), "ba");
  // A long digit run in an attribute path is a (missing) key, not an exception.
  EXPECT_EQ(render("{{ [{'a': 1}]|map(attribute='99999999999999999999')|select('defined')|list|length }}"), "0");
}

TEST(JinjaLimits, MalformedSourceFailsCleanly) {
  for (const char* src : {"{{", "{%", "{#", "{{ 'unterminated }}", "{% for %}", "{% for x in %}{% endfor %}",
                          "{{ a[ }}", "{{ (1, }}", "{% macro %}", "{% set = 1 %}", "{{ 1 ++ }}", "{{ } }}",
                          "{% raw %}no end", "{{ '\\x4' }}", "{{ \x01 }}"}) {
    EXPECT_THROW(Template t(src), TemplateError) << src;
  }
}

TEST(JinjaLimits, InvalidUtf8IsRejected) {
  EXPECT_THROW(Template t("abc \xff"), lfm::Error);
}

}  // namespace
}  // namespace lfm::jinja
