// The GPT-2 byte-level alphabet: every byte maps to one printable code point ("Ġ" for a space,
// "Ċ" for a newline), so BPE vocabularies can hold arbitrary bytes as text.
#pragma once

#include <string>
#include <string_view>

namespace lfm::tok {

// UTF-8 text of the code point that represents `byte` (1 or 2 bytes long).
const std::string& byte_to_symbol(unsigned char byte);

// Byte-level form of raw bytes: "hi there" → "hiĠthere".
std::string bytes_to_symbols(std::string_view bytes);

// Raw bytes of a byte-level token. Returns false (leaving `out` partly written) when the token
// holds a code point outside the alphabet; callers then fall back to the token's own bytes, as
// Hugging Face's ByteLevel decoder does for added tokens such as "<|im_end|>".
bool symbols_to_bytes(std::string_view token, std::string& out);

}  // namespace lfm::tok
