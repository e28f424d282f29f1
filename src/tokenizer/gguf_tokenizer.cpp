// Placeholder until the GGUF reader lands: this build cannot read tokenizers from GGUF files.
// The GGUF engineer replaces this file with the real implementation.
#include "tokenizer/gguf_tokenizer.h"

#include "core/error.h"

namespace lfm {

TokenizerSpec tokenizer_spec_from_gguf(const std::string& path) {
  (void)path;
  throw Error("tokenizer: GGUF tokenizers are not supported by this build");
}

}  // namespace lfm
