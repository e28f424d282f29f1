#include "cli/common.h"

#include <charconv>

#include "core/error.h"
#include "kernels/avx2_backend.h"

namespace lfm::cli {

std::vector<int32_t> parse_id_list(const std::string& s, const char* what) {
  std::vector<int32_t> ids;
  size_t i = 0;
  while (i <= s.size()) {
    size_t j = s.find(',', i);
    if (j == std::string::npos) j = s.size();
    std::string tok = s.substr(i, j - i);
    const auto first = tok.find_first_not_of(" \t");
    const auto last = tok.find_last_not_of(" \t");
    tok = first == std::string::npos ? "" : tok.substr(first, last - first + 1);
    int32_t v = 0;
    auto [p, ec] = std::from_chars(tok.data(), tok.data() + tok.size(), v);
    LFM_CHECK(!tok.empty() && ec == std::errc() && p == tok.data() + tok.size() && v >= 0, what,
              ": '", tok, "' is not a token id (expected comma-separated non-negative integers)");
    ids.push_back(v);
    i = j + 1;
  }
  return ids;
}

void configure_app(CLI::App& app) {
  app.failure_message(CLI::FailureMessage::help);
  app.get_formatter()->column_width(34);
}

Runtime open_runtime(const std::string& model_path, int threads) {
  Runtime rt;
  rt.model = load_model(model_path);
  rt.pool = std::make_unique<ThreadPool>(threads);
  rt.backend = make_cpu_backend(*rt.pool);
  return rt;
}

}  // namespace lfm::cli
