// Helpers shared by the subcommands: option groups, id lists, model + backend setup.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/backend.h"
#include "model/model.h"

namespace lfm::cli {

// "1,2, 3" → {1, 2, 3}; throws lfm::Error naming the bad entry.
std::vector<int32_t> parse_id_list(const std::string& s, const char* what);

// A CLI::App that prints the full usage on a parse error (and exits non-zero).
void configure_app(CLI::App& app);

// A model plus the machinery to run it.
struct Runtime {
  std::unique_ptr<Model> model;
  std::unique_ptr<ThreadPool> pool;
  std::unique_ptr<Backend> backend;
};
Runtime open_runtime(const std::string& model_path, int threads);

}  // namespace lfm::cli

// Parses argv with CLI11; on --help returns 0, on a usage error prints usage and returns 2.
#define LFM_CLI_PARSE(app, argc, argv)          \
  try {                                         \
    (app).parse((argc), (argv));                \
  } catch (const CLI::ParseError& e) {          \
    const int rc = (app).exit(e);               \
    return rc == 0 ? 0 : 2;                     \
  }
