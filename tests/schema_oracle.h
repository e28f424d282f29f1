// The independent JSON Schema validator of the structured-output tests: python's jsonschema
// package through tools/grammar/validate.py (Debian's python3-jsonschema, installed by
// scripts/setup.sh).
#pragma once

#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "test_util.h"

namespace lfm::test {

// A python3 that has the jsonschema module, or "".
inline std::string python_with_jsonschema() {
  for (const char* py : {"python3", "/usr/bin/python3"})
    if (run_command(std::string(py) + " -c 'import jsonschema' 2>/dev/null").code == 0) return py;
  return "";
}

// The validator's lines for invalid texts ("" when it found none).
inline std::string invalid_lines(const RunResult& r) {
  if (r.code == 0) return "";
  std::string bad;
  std::istringstream lines(r.out);
  for (std::string line; std::getline(lines, line);)
    if (line.find("\"valid\": true") == std::string::npos) bad += line + "\n";
  return bad.empty() ? r.out : bad;
}

// The validator's report lines for the texts that are not valid JSON under `schema` ("" when
// every text is valid); "no validator" when python's jsonschema is missing.
inline std::string invalid_texts(const nlohmann::ordered_json& schema, const std::vector<std::string>& texts) {
  const std::string py = python_with_jsonschema();
  if (py.empty()) return "no validator: python3 with jsonschema is missing (run scripts/setup.sh)";
  TempDir dir("lfm_validate");
  const std::string s = dir.write("schema.json", schema.dump());
  const std::string t = dir.write("texts.json", nlohmann::json(texts).dump());
  return invalid_lines(run_command(py + " " + std::string(LFM_SOURCE_DIR) + "/tools/grammar/validate.py " + s +
                                   " --texts " + t + " 2>&1"));
}

// The same for many (schema, texts) pairs in one run of the validator.
inline std::string invalid_texts(const std::vector<std::pair<nlohmann::ordered_json, std::vector<std::string>>>& pairs) {
  const std::string py = python_with_jsonschema();
  if (py.empty()) return "no validator: python3 with jsonschema is missing (run scripts/setup.sh)";
  nlohmann::ordered_json all = nlohmann::ordered_json::array();
  for (const auto& [schema, texts] : pairs) all.push_back({{"schema", schema}, {"texts", texts}});
  TempDir dir("lfm_validate");
  const std::string f = dir.write("pairs.json", all.dump());
  return invalid_lines(run_command(py + " " + std::string(LFM_SOURCE_DIR) + "/tools/grammar/validate.py --pairs " + f +
                                   " 2>&1"));
}

}  // namespace lfm::test
