// `lfm --version`: what this binary is (version, commit) and what it can run on (backends and
// CPU instruction sets compiled in, and which of them this machine gets).
#pragma once

#include <string>

namespace lfm::cli {

std::string version_text();

}  // namespace lfm::cli
