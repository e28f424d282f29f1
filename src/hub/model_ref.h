// A model named on the Hugging Face Hub: "owner/name", with an optional GGUF file or quant and
// revision — "LiquidAI/LFM2-1.2B", "LiquidAI/LFM2-1.2B-GGUF:Q4_K_M",
// "LiquidAI/LFM2-1.2B-GGUF/LFM2-1.2B-Q8_0.gguf", "LiquidAI/LFM2-1.2B@<branch, tag or commit>".
#pragma once

#include <optional>
#include <string>

namespace lfm::hub {

struct ModelRef {
  std::string repo;              // "owner/name"
  std::string file;              // a .gguf path inside the repo, "" when not named
  std::string quant;             // a GGUF quant tag such as "Q4_K_M", "" when not named
  std::string revision = "main"; // branch, tag or commit hash
  bool revision_given = false;   // "@rev" was written

  std::string str() const;       // the reference as the user would write it
};

// Parses a reference. nullopt when `s` is not shaped like one (a path: starts with '/', '.' or
// '~', has no '/', or names a file that is not a .gguf); `why` then says what is wrong.
// The grammar: OWNER/NAME[/PATH.gguf][:QUANT][@REVISION] (':' and '@' in either order), with
// OWNER and NAME as the Hub allows them (letters, digits, '-', '_', '.'; no '--' or '..').
std::optional<ModelRef> parse_model_ref(const std::string& s, std::string* why = nullptr);

// 40 lower-case hex digits: a full commit hash (used as is, never looked up in refs/).
bool is_commit_hash(const std::string& s);

}  // namespace lfm::hub
