// UTF-8 helpers shared by the tokenizer and the chat templates: validation (the tokenizer
// rejects ill-formed input, as HF's Rust strings cannot hold it), lossy decoding (decode()
// output, matching Rust's String::from_utf8_lossy), incomplete-tail detection (the streaming
// detokenizer) and code point encoding.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace lfm {

// Byte offset of the first ill-formed UTF-8 sequence in `s`, or std::string_view::npos.
size_t find_invalid_utf8(std::string_view s);

// Replaces every maximal ill-formed subpart with U+FFFD (the Unicode "substitution of maximal
// subparts" practice that Rust's from_utf8_lossy follows); valid text is returned unchanged.
std::string utf8_lossy(std::string_view bytes);

// Length of the trailing bytes of `s` that form the valid start of a multi-byte sequence whose
// remaining bytes have not arrived yet (0 when `s` ends on a sequence boundary or on garbage).
size_t incomplete_utf8_tail(std::string_view s);

// Decodes one code point starting at s[i] (which must be valid UTF-8); advances i.
char32_t next_code_point(std::string_view s, size_t& i);

// Appends the UTF-8 encoding of `cp`.
void append_utf8(std::string& out, char32_t cp);

}  // namespace lfm
