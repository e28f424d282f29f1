#include "core/base64.h"

#include <array>

namespace lfm {

std::optional<std::vector<uint8_t>> decode_base64(std::string_view s) {
  static const std::array<int8_t, 256> value = [] {
    std::array<int8_t, 256> v{};
    v.fill(-1);
    const char* alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for (int i = 0; i < 64; ++i) v[static_cast<unsigned char>(alphabet[i])] = static_cast<int8_t>(i);
    return v;
  }();
  if (s.size() % 4 != 0) return std::nullopt;
  size_t pad = 0;
  if (!s.empty() && s.back() == '=') pad = s.size() >= 2 && s[s.size() - 2] == '=' ? 2 : 1;
  std::vector<uint8_t> out;
  out.reserve(s.size() / 4 * 3);
  const size_t body = s.size() - pad;
  uint32_t acc = 0;
  int bits = 0;
  for (size_t i = 0; i < body; ++i) {
    const int8_t v = value[static_cast<unsigned char>(s[i])];
    if (v < 0) return std::nullopt;  // anything else, '=' in the middle included
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<uint8_t>(acc >> bits));
      acc &= (1u << bits) - 1;
    }
  }
  if (acc != 0) return std::nullopt;  // the unused bits of the last group must be zero
  return out;
}

std::string encode_base64(const void* data, size_t bytes) {
  const char* alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  const auto* p = static_cast<const uint8_t*>(data);
  std::string out;
  out.reserve((bytes + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 3 <= bytes; i += 3) {
    const uint32_t v = (uint32_t{p[i]} << 16) | (uint32_t{p[i + 1]} << 8) | p[i + 2];
    for (int s = 18; s >= 0; s -= 6) out += alphabet[(v >> s) & 63];
  }
  if (i < bytes) {
    const uint32_t v = (uint32_t{p[i]} << 16) | (i + 1 < bytes ? uint32_t{p[i + 1]} << 8 : 0);
    out += alphabet[(v >> 18) & 63];
    out += alphabet[(v >> 12) & 63];
    out += i + 1 < bytes ? alphabet[(v >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

}  // namespace lfm
