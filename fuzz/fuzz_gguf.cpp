// A GGUF as `lfm` loads it: the reader, the normalised config from its metadata, the mapping of
// its tensors to Hugging Face names and the weight binding (shapes and dtypes checked against the
// config, small vectors decoded), then the tokenizer built from its metadata. Each stage runs
// even when an earlier optional one refuses the file, so a file with a bad config still fuzzes
// the tokenizer.
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "formats/gguf_reader.h"
#include "fuzz_util.h"
#include "model/gguf_model.h"
#include "model/weights.h"
#include "tokenizer/gguf_tokenizer.h"
#include "tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = lfm::fuzz::write_temp_file(lfm::fuzz::as_text(data, size), ".gguf");
  std::shared_ptr<const lfm::gguf::GgufFile> file;
  try {
    file = std::make_shared<const lfm::gguf::GgufFile>(path);
    for (const auto& t : file->tensors()) (void)t.numel();
  } catch (const lfm::Error&) {
    return 0;
  }
  try {
    const lfm::ModelConfig cfg = lfm::gguf::config_from_gguf(*file);
    cfg.to_json().dump();
    const lfm::gguf::GgufTensorSource source(file);
    (void)lfm::bind_weights(cfg, source);
  } catch (const lfm::Error&) {
  }
  try {
    lfm::Tokenizer tok(lfm::tokenizer_spec_from_gguf(path));
    tok.decode(tok.encode("Hello <|im_start|> world", true), false);
  } catch (const lfm::Error&) {
  }
  return 0;
}
