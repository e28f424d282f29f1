// Safetensors file: 8-byte header length, JSON header, data section.
#include "core/error.h"
#include "formats/safetensors.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = lfm::fuzz::write_temp_file(lfm::fuzz::as_text(data, size), ".safetensors");
  try {
    lfm::SafetensorsFile f(path);
    for (const auto& name : f.names()) f.find(name);
  } catch (const lfm::Error&) {
  }
  return 0;
}
