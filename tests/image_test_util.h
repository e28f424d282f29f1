// Shared by the image tests: the reference data of tests/data/image (made by
// tools/vl_reference/preprocess_reference.py from PIL, torch and transformers), base64, sha256.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "hub/digest.h"
#include "test_util.h"

namespace lfm::test {

inline const nlohmann::json& image_reference() {
  static const nlohmann::json j = read_json(data_dir() + "/image/reference.json");
  return j;
}

inline std::string image_file(const std::string& name) { return data_dir() + "/image/files/" + name; }

inline std::string base64_decode(const std::string& s) {
  std::string out;
  int acc = 0, bits = 0;
  for (const char c : s) {
    int v = c >= 'A' && c <= 'Z' ? c - 'A' : c >= 'a' && c <= 'z' ? c - 'a' + 26 : c >= '0' && c <= '9' ? c - '0' + 52
            : c == '+' ? 62 : c == '/' ? 63 : -1;
    if (v < 0) continue;  // '=' and whitespace
    acc = (acc << 6) | v;
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(char((acc >> bits) & 0xFF));
    }
  }
  return out;
}

template <typename T>
std::string sha256_of(const std::vector<T>& v) {
  return hub::sha256_hex(std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T)));
}

}  // namespace lfm::test
