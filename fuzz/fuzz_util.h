// Shared helpers for the libFuzzer harnesses (built with -DLFM_FUZZ=ON and clang; see
// scripts/fuzz.sh). A harness may let lfm::Error (and jinja::TemplateError) through its own
// catch: those are the clean rejections the parsers promise. Anything else — another exception
// type, a crash, a sanitizer report, a hang or a huge allocation — is a finding.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

namespace lfm::fuzz {

inline std::string_view as_text(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// A file holding `bytes` for readers that take a path (GGUF and safetensors map files). One per
// process, rewritten for every input; under /dev/shm when it exists so the disk is never touched.
inline const std::string& write_temp_file(std::string_view bytes, const char* suffix) {
  static std::string path;
  if (path.empty()) {
    const char* dir = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    path = std::string(dir) + "/lfm_fuzz_" + std::to_string(getpid()) + suffix;
    std::atexit([] { unlink(path.c_str()); });  // libFuzzer ends with exit(); a crash leaves it behind
  }
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) std::abort();
  if (!bytes.empty() && std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size()) std::abort();
  std::fclose(f);
  return path;
}

}  // namespace lfm::fuzz
