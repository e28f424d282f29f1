// GGUF reader and the tokenizer built from its metadata. (The config built from GGUF metadata,
// model/gguf_model.cpp, shares its object file with model loading, which the fuzzing build
// leaves out; its limits are covered by tests/hostile_input_test.cpp.)
#include "core/error.h"
#include "formats/gguf_reader.h"
#include "fuzz_util.h"
#include "tokenizer/gguf_tokenizer.h"
#include "tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = lfm::fuzz::write_temp_file(lfm::fuzz::as_text(data, size), ".gguf");
  try {
    lfm::gguf::GgufFile f(path);
    for (const auto& t : f.tensors()) (void)t.numel();
    lfm::Tokenizer tok(lfm::tokenizer_spec_from_gguf(path));
    tok.decode(tok.encode("Hello <|im_start|> world", true), false);
  } catch (const lfm::Error&) {
  }
  return 0;
}
