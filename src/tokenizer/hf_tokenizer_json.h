// Readers for Hugging Face tokenizer files into the format-neutral TokenizerSpec.
//   tokenizer.json        → vocab, merges, added tokens, pre-tokenizer regex, BOS/EOS template
//   tokenizer_config.json → bos/eos/pad token texts, add_bos/add_eos, chat template, and
//                           added-token flag overrides (added_tokens_decoder)
// Only what byte-level BPE models such as LFM2 use is accepted; anything else is rejected with
// an lfm::Error naming the unsupported component, rather than silently tokenizing differently.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "tokenizer/tokenizer_spec.h"

namespace lfm {

// From parsed JSON / from JSON text (bad JSON → lfm::Error "tokenizer.json: invalid JSON …").
TokenizerSpec parse_tokenizer_json(const nlohmann::json& j);
TokenizerSpec parse_tokenizer_json_text(const std::string& text);

// Applies tokenizer_config.json on top of a spec read from tokenizer.json.
void apply_tokenizer_config(TokenizerSpec& spec, const nlohmann::json& config);

// The chat template of a tokenizer_config.json: a string, or a list of {name, template} from
// which "default" (else the first) is taken. Empty when absent.
std::string chat_template_from_config(const nlohmann::json& config);

}  // namespace lfm
