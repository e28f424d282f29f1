#include "cli/grammar_args.h"

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/file_io.h"
#include "core/json_guard.h"
#include "grammar/grammar.h"
#include "grammar/json_schema.h"
#include "grammar/regex_to_gbnf.h"
#include "grammar/work_budget.h"

namespace lfm::cli {

void add_grammar_options(CLI::App& app, GrammarArgs& a) {
  auto* g = app.add_option("--grammar", a.gbnf_file,
                           "Constrain the output to a grammar: a GBNF file (llama.cpp's syntax, start rule 'root')");
  auto* s = app.add_option("--json-schema", a.json_schema_file,
                           "Constrain the output to JSON valid under this JSON Schema file (properties in the "
                           "schema's order)");
  auto* r = app.add_option("--regex", a.regex, "Constrain the whole output to match this regular expression");
  g->excludes(s)->excludes(r);
  s->excludes(r);
  app.add_flag("--schema-whitespace", a.any_whitespace,
               "With --json-schema: allow (bounded) whitespace between tokens of the JSON, not only compact JSON");
  app.add_flag("--no-jump-forward", a.no_jump_forward,
               "With a grammar: do not draft the text the grammar forces (it is otherwise verified in one step)");
}

std::shared_ptr<const grammar::Grammar> load_grammar(const GrammarArgs& a) {
  grammar::WorkBudget budget;  // the defaults (as lfm serve's), for the whole compile
  if (!a.gbnf_file.empty()) {
    const std::string text = read_regular_file(a.gbnf_file, "grammar file");
    try {
      return grammar::parse_gbnf(text, "root", &budget);
    } catch (const Error& e) {
      fail(a.gbnf_file, ": ", e.what());
    }
  }
  if (!a.json_schema_file.empty()) {
    const std::string text = read_regular_file(a.json_schema_file, "JSON schema file");
    // Ordered (the grammar writes properties in the schema's order), parsed in linear time.
    const nlohmann::ordered_json schema = parse_ordered_json(text, cat("JSON schema file '", a.json_schema_file, "'"));
    grammar::JsonSchemaOptions opt;
    opt.any_whitespace = a.any_whitespace;
    try {
      return grammar::parse_gbnf(grammar::json_schema_to_gbnf(schema, opt, &budget), "root", &budget);
    } catch (const Error& e) {
      fail(a.json_schema_file, ": ", e.what());
    }
  }
  if (!a.regex.empty()) {
    try {
      return grammar::parse_gbnf(grammar::regex_to_gbnf(a.regex, &budget), "root", &budget);
    } catch (const Error& e) {
      fail("--regex: ", e.what());
    }
  }
  return nullptr;
}

}  // namespace lfm::cli
