// Structured output on the command line: --grammar FILE (GBNF), --json-schema FILE, --regex RE,
// shared by lfm generate, chat and bench.
#pragma once

#include <memory>
#include <string>

#include <CLI/CLI.hpp>

namespace lfm::grammar {
struct Grammar;
}

namespace lfm::cli {

struct GrammarArgs {
  std::string gbnf_file, json_schema_file, regex;
  bool any_whitespace = false;
  bool no_jump_forward = false;
  bool given() const { return !gbnf_file.empty() || !json_schema_file.empty() || !regex.empty(); }
};
void add_grammar_options(CLI::App& app, GrammarArgs& args);
// The grammar the flags ask for, or null. Throws lfm::Error naming the file and the problem.
std::shared_ptr<const grammar::Grammar> load_grammar(const GrammarArgs& args);

}  // namespace lfm::cli
