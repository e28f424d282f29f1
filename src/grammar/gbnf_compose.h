// Combining GBNF texts: one grammar's rules renamed under a prefix, so that several generated
// grammars (one per tool argument's JSON schema) live side by side in one grammar.
#pragma once

#include <string>
#include <string_view>

namespace lfm::grammar {

// Every rule name in `gbnf` (definitions and references) with `prefix` put in front; literals,
// character classes, repetition bounds, comments and <token> references are left as they are.
// `root` becomes prefix + "root".
std::string prefix_gbnf_rules(std::string_view gbnf, std::string_view prefix);

}  // namespace lfm::grammar
