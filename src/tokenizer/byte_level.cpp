#include "tokenizer/byte_level.h"

#include <array>

#include "core/utf8.h"

namespace lfm::tok {
namespace {

struct ByteLevelTables {
  std::array<std::string, 256> symbol_of_byte;
  std::array<int, 324> byte_of_code_point;  // the alphabet lives in U+0000..U+0143; -1 = none

  ByteLevelTables() {
    byte_of_code_point.fill(-1);
    // Printable Latin-1 bytes stand for themselves; the rest are shifted to U+0100 and up in
    // byte order. This is the table GPT-2 introduced and every byte-level BPE reuses.
    auto printable = [](int b) { return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF); };
    int next_shifted = 256;
    for (int b = 0; b < 256; ++b) {
      const int cp = printable(b) ? b : next_shifted++;
      append_utf8(symbol_of_byte[b], static_cast<char32_t>(cp));
      byte_of_code_point[cp] = b;
    }
  }
};

const ByteLevelTables& tables() {
  static const ByteLevelTables t;
  return t;
}

}  // namespace

const std::string& byte_to_symbol(unsigned char byte) { return tables().symbol_of_byte[byte]; }

std::string bytes_to_symbols(std::string_view bytes) {
  const auto& t = tables();
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char b : bytes) out += t.symbol_of_byte[b];
  return out;
}

bool symbols_to_bytes(std::string_view token, std::string& out) {
  const auto& t = tables();
  size_t i = 0;
  while (i < token.size()) {
    const auto lead = static_cast<unsigned char>(token[i]);
    if (lead >= 0xE0) return false;  // 3+ byte sequences are all above U+07FF
    if (lead >= 0x80) {  // guard against ill-formed vocab strings (e.g. from GGUF)
      if (lead < 0xC0 || i + 1 >= token.size()) return false;
      if ((static_cast<unsigned char>(token[i + 1]) & 0xC0) != 0x80) return false;
    }
    const char32_t cp = next_code_point(token, i);
    if (cp >= t.byte_of_code_point.size() || t.byte_of_code_point[cp] < 0) return false;
    out.push_back(static_cast<char>(t.byte_of_code_point[cp]));
  }
  return true;
}

}  // namespace lfm::tok
