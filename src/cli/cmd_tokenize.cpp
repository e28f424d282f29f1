// lfm tokenize / lfm detokenize: text ↔ token ids with a model's tokenizer. Needs only the
// tokenizer files (tokenizer.json [+ tokenizer_config.json]) or a .gguf, no weights.
#include <fstream>
#include <iostream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "cli/common.h"
#include "core/error.h"
#include "tokenizer/load_tokenizer.h"
#include "core/file_io.h"

namespace lfm::cli {
namespace {

std::string read_exact_bytes(const std::string& path) { return read_regular_file(path, "tokenize: --file"); }

int run_tokenize(int argc, char** argv) {
  CLI::App app{"Split text into token ids with a model's tokenizer."};
  configure_app(app);
  std::string model, text, file;
  bool json_out = false, no_special = false;
  app.add_option("-m,--model", model, std::string("Model folder holding tokenizer.json, or a .gguf file") + kModelRefHelp)
      ->required();
  auto* text_opt = app.add_option("text", text, "Text to tokenize");
  auto* file_opt = app.add_option("-f,--file", file, "Tokenize the exact bytes of this file instead");
  text_opt->excludes(file_opt);
  app.add_flag("--json", json_out, "Print {\"ids\": [...], \"tokens\": [...]}");
  app.add_flag("--no-special", no_special, "Do not add special tokens (no BOS)");
  LFM_CLI_PARSE(app, argc, argv);
  if (text_opt->count() == 0 && file_opt->count() == 0) {
    std::cerr << "lfm tokenize: give TEXT or --file PATH\n\n" << app.help();
    return 2;
  }

  const auto tokenizer = load_tokenizer(resolve_model_arg(model, hub::Need::kTokenizer));
  const std::string input = file_opt->count() ? read_exact_bytes(file) : text;
  const std::vector<int32_t> ids = tokenizer->encode(input, !no_special);
  if (json_out) {
    nlohmann::json j;
    j["ids"] = ids;
    // Vocabulary forms ("Ġworld") are always valid UTF-8, unlike per-token byte pieces.
    std::vector<std::string> tokens;
    for (int32_t id : ids) tokens.push_back(tokenizer->id_to_token(id));
    j["tokens"] = tokens;
    std::cout << j.dump() << "\n";
  } else {
    // One token per line: id, then the vocabulary form as a JSON string (shows spaces/newlines).
    for (int32_t id : ids) std::cout << id << "\t" << nlohmann::json(tokenizer->id_to_token(id)).dump() << "\n";
  }
  std::cerr << ids.size() << " tokens\n";
  return 0;
}

int run_detokenize(int argc, char** argv) {
  CLI::App app{"Turn token ids back into text (printed exactly, without an added newline)."};
  configure_app(app);
  std::string model, id_list;
  bool skip_special = false;
  app.add_option("-m,--model", model, std::string("Model folder holding tokenizer.json, or a .gguf file") + kModelRefHelp)
      ->required();
  app.add_option("ids", id_list, "Comma-separated token ids, e.g. 1,17,200")->required();
  app.add_flag("--skip-special", skip_special, "Drop special tokens such as <|startoftext|>");
  LFM_CLI_PARSE(app, argc, argv);

  const std::vector<int32_t> ids = parse_id_list(id_list, "detokenize");
  const auto tokenizer = load_tokenizer(resolve_model_arg(model, hub::Need::kTokenizer));
  std::cout << tokenizer->decode(ids, skip_special) << std::flush;
  return 0;
}

CommandRegistrar reg_tokenize({"tokenize", "text to token ids (tokenizer files only)", run_tokenize});
CommandRegistrar reg_detokenize({"detokenize", "token ids to text (tokenizer files only)", run_detokenize});

}  // namespace
}  // namespace lfm::cli
