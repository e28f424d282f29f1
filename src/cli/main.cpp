// `lfm`: the command-line front end. Dispatches to self-registered subcommands.
#include <cstdio>
#include <new>
#include <cstring>
#include <exception>
#include <string>

#include "cli/command.h"
#include "cli/version.h"
#include "core/error.h"

namespace lfm::cli {

std::vector<Command>& registry() {
  static std::vector<Command> r;
  return r;
}
void register_command(Command c) { registry().push_back(std::move(c)); }
const std::vector<Command>& commands() { return registry(); }

}  // namespace lfm::cli

namespace {

void print_usage(FILE* f) {
  std::fprintf(f, "lfm: inference engine for Liquid AI LFM2 models\n\nusage: lfm <command> [options]\n\ncommands:\n");
  for (const auto& c : lfm::cli::commands()) std::fprintf(f, "  %-12s %s\n", c.name.c_str(), c.summary.c_str());
  std::fprintf(f,
               "\nRun 'lfm <command> --help' for the options of a command, 'lfm --version' for the build.\n"
               "\nExamples:\n"
               "  lfm chat -m LiquidAI/LFM2-1.2B                    # a Hub model: downloaded once into the HF cache\n"
               "  lfm generate -m /path/to/LFM2-1.2B-Q4_K_M.gguf -p \"The capital of France is\" -n 32\n"
               "  lfm serve -m /path/to/LFM2-1.2B --port 8080        # OpenAI-compatible API on http://127.0.0.1:8080/v1\n"
               "  lfm generate -m models/tiny-lfm2 -p \"Hello\"          # the bundled tiny model (random weights)\n"
               "\nPrecision: matrix products take float32 activations (exact for F32, F16 and BF16 weights; quantized\n"
               "weights take int8 activations per 32-value block on AVX2/AVX-512, as llama.cpp does); the rest runs in\n"
               "float32. --bf16-activations rounds the activations of BF16 matrices to bf16 (faster prefill); --kv-type\n"
               "sets how K/V and conv states are stored (auto: bf16/f16 checkpoints keep their dtype, GGUF f16). What\n"
               "each mode computes and how far it lands from transformers' float32 and bfloat16 runs: README.md, section\n"
               "Precision.\n");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    print_usage(stderr);
    return 2;
  }
  const std::string name = argv[1];
  if (name == "--help" || name == "-h" || name == "help") {
    print_usage(stdout);
    return 0;
  }
  if (name == "--version" || name == "-V" || name == "version") {
    std::fputs(lfm::cli::version_text().c_str(), stdout);
    return 0;
  }
  for (const auto& c : lfm::cli::commands()) {
    if (c.name != name) continue;
    std::string prog = "lfm " + name;
    argv[1] = prog.data();
    try {
      return c.run(argc - 1, argv + 1);
    } catch (const lfm::Error& e) {
      std::fprintf(stderr, "lfm %s: error: %s\n", name.c_str(), e.what());
      return 1;
    } catch (const std::bad_alloc&) {
      // Not a bug in lfm: the input (or the options) asked for more memory than there is.
      std::fprintf(stderr, "lfm %s: error: out of memory (the model, context or input needs more than is available)\n",
                   name.c_str());
      return 1;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "lfm %s: internal error: %s\n", name.c_str(), e.what());
      return 1;
    }
  }
  std::fprintf(stderr, "lfm: unknown command '%s'\n\n", name.c_str());
  print_usage(stderr);
  return 2;
}
