// Shared helpers for the test suite: paths to bundled test data and fixture readers.
#pragma once

#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace lfm::test {

inline std::string data_dir() { return LFM_TEST_DATA_DIR; }
inline std::string fixture_dir(const std::string& name) { return data_dir() + "/hf/" + name; }

inline nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("test: cannot open " + path);
  return nlohmann::json::parse(in);
}

inline nlohmann::json reference(const std::string& fixture) {
  return read_json(fixture_dir(fixture) + "/reference.json");
}

inline const std::vector<std::string>& dense_fixtures() {
  static const std::vector<std::string> f = {
      "lfm2_a_fullattnidxs_tied_f32", "lfm2_b_layertypes_tied_f32", "lfm2_c_layertypes_untied_convbias_f32",
      "lfm2_d_fullattnidxs_tied_bf16", "lfm2_e_allattn_noadjust_f32"};
  return f;
}

inline const std::vector<std::string>& moe_fixtures() {
  static const std::vector<std::string> f = {"lfm2moe_f_tied_expertbias_f32", "lfm2moe_g_untied_nobias_scaled_f32"};
  return f;
}

// Largest |a - b| over two equally long rows.
inline double max_abs_diff(const float* a, const std::vector<double>& b) {
  double m = 0;
  for (size_t i = 0; i < b.size(); ++i) m = std::max(m, std::abs(static_cast<double>(a[i]) - b[i]));
  return m;
}

}  // namespace lfm::test
