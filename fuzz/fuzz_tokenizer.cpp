// tokenizer.json (+ tokenizer_config.json after a NUL byte), then encode/decode of a fixed text
// and of the input's own tail.
#include <cstring>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json_guard.h"
#include "fuzz_util.h"
#include "tokenizer/hf_tokenizer_json.h"
#include "tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view all = lfm::fuzz::as_text(data, size);
  const size_t nul = all.find('\0');
  const std::string tokenizer_json(all.substr(0, nul));
  const std::string_view config = nul == std::string_view::npos ? std::string_view() : all.substr(nul + 1);
  try {
    lfm::TokenizerSpec spec = lfm::parse_tokenizer_json_text(tokenizer_json);
    if (!config.empty()) lfm::apply_tokenizer_config(spec, lfm::parse_json(config, "tokenizer_config.json"));
    lfm::Tokenizer tok(std::move(spec));
    for (std::string_view text : {std::string_view("Hello, world! 123 <|im_end|>\n\n  x"), config}) {
      const std::vector<int32_t> ids = tok.encode(std::string(text), true);
      tok.decode(ids, false);
      tok.decode(ids, true);
    }
  } catch (const lfm::Error&) {
  }
  return 0;
}
