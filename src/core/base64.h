// RFC 4648 base64 decoding, strict: what data URIs carry (the server's image_url parts, the C
// API's chat image parts).
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

namespace lfm {

// The standard alphabet, '=' padding to a multiple of 4 characters, no whitespace, zero unused
// bits. nullopt for anything else.
std::optional<std::vector<uint8_t>> decode_base64(std::string_view s);

}  // namespace lfm
