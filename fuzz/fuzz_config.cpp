// config.json normalisation (JSON text → ModelConfig), as load_model_config reads it.
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json_guard.h"
#include "fuzz_util.h"
#include "model/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const nlohmann::json j = lfm::parse_json(lfm::fuzz::as_text(data, size), "config");
    const lfm::ModelConfig c = lfm::parse_model_config(j);
    c.to_json().dump();
  } catch (const lfm::Error&) {
  } catch (const nlohmann::json::exception&) {
    // parse_model_config lets nlohmann's type errors through; load_model_config turns them into
    // lfm::Error naming the file (a caller-facing guarantee fuzz_config does not re-test).
  }
  return 0;
}
