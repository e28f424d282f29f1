// Subcommand registry of the `lfm` executable. Each subcommand lives in its own cmd_*.cpp and
// registers itself with a static CommandRegistrar, so adding one touches no other file.
#pragma once

#include <string>
#include <vector>

namespace lfm::cli {

struct Command {
  std::string name;
  std::string summary;
  int (*run)(int argc, char** argv);  // argv[0] is "lfm <name>"
};

void register_command(Command c);
const std::vector<Command>& commands();

struct CommandRegistrar {
  explicit CommandRegistrar(Command c) { register_command(std::move(c)); }
};

}  // namespace lfm::cli
