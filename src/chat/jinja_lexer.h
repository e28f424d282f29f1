// Tokenizer for Jinja template source with the settings Hugging Face uses for chat templates
// (trim_blocks, lstrip_blocks, keep_trailing_newline = False). Whitespace control (-, +),
// comments and {% raw %} are resolved here, so the parser only sees data text and tag tokens.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace lfm::jinja {

enum class Tok : uint8_t {
  Data,        // literal template text (already whitespace-processed)
  VarBegin,    // {{
  VarEnd,      // }}
  BlockBegin,  // {%
  BlockEnd,    // %}
  Name,
  String,      // value is the decoded string
  Int,         // value is the digits (underscores removed, base prefix kept)
  Float,
  Op,          // operator or punctuation, value is its text
  Eof,
};

struct Token {
  Tok type;
  std::string value;
  int line;
};

struct LexOptions {
  bool trim_blocks = true;
  bool lstrip_blocks = true;
  bool keep_trailing_newline = false;
};

// Throws TemplateError ("jinja: line N: ...") on malformed source.
std::vector<Token> tokenize(std::string_view source, const LexOptions& opt = {});

const char* tok_name(Tok t);

}  // namespace lfm::jinja
