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
