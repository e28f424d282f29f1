// RFC 4648 base64: strict decoding of what data URIs carry (the server's image_url parts, the C
// API's chat image parts); encoding for embeddings sent as base64.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace lfm {

// The standard alphabet, '=' padding to a multiple of 4 characters, no whitespace, zero unused
// bits. nullopt for anything else.
std::optional<std::vector<uint8_t>> decode_base64(std::string_view s);
// The standard alphabet with '=' padding (what OpenAI's encoding_format "base64" sends).
std::string encode_base64(const void* data, size_t bytes);

}  // namespace lfm
