// lfm template: renders a model's chat template for a conversation, byte-identical to
// transformers' apply_chat_template(tokenize=False), and writes it to stdout unchanged.
#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "chat/chat_template.h"
#include "cli/command.h"
#include "cli/common.h"
#include "core/error.h"
#include "core/json_guard.h"

namespace lfm::cli {
namespace {

using ojson = nlohmann::ordered_json;

// Parses a JSON file keeping object key order (tojson must print keys as given).
// A directory or missing file is named as such; nesting is bounded (core/json_guard.h).
ojson read_json_file(const std::string& path, const char* what) {
  const std::string text = read_text_file(path, cat("template: ", what, " file"));
  return parse_ordered_json(text, cat("template: ", what, " file '", path, "'"));
}

int run_template(int argc, char** argv) {
  CLI::App app{"Render a model's chat template for a conversation (as Hugging Face transformers does)."};
  configure_app(app);
  std::string model, messages_path, tools_path, date;
  std::vector<std::string> vars;
  bool no_generation_prompt = false;
  app.add_option("-m,--model", model,
                 std::string("Model folder (chat_template.jinja or tokenizer_config.json)") + kModelRefHelp)
      ->required();
  app.add_option("--messages", messages_path, "JSON file with the list of messages")->required();
  app.add_option("--tools", tools_path, "JSON file with the list of tool definitions");
  app.add_flag("--no-generation-prompt", no_generation_prompt, "Do not append the assistant generation prompt");
  app.add_option("--var", vars, "Extra template variable as name=JSON, repeatable (e.g. keep_past_thinking=true)")
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  app.add_option("--date", date, "Pin strftime_now() to this day, YYYY-MM-DD (default: today)");
  LFM_CLI_PARSE(app, argc, argv);

  const ojson messages = read_json_file(messages_path, "--messages");
  LFM_CHECK(messages.is_array(), "template: --messages file '", messages_path, "' must hold a JSON list of messages");
  ojson tools = nullptr;
  if (!tools_path.empty()) {
    tools = read_json_file(tools_path, "--tools");
    LFM_CHECK(tools.is_array() || tools.is_null(), "template: --tools file '", tools_path, "' must hold a JSON list");
  }
  ojson extra = ojson::object();
  for (const std::string& v : vars) {
    const size_t eq = v.find('=');
    LFM_CHECK(eq != std::string::npos && eq > 0, "template: --var '", v, "' is not name=JSON");
    const std::string name = v.substr(0, eq);
    check_json_depth(std::string_view(v).substr(eq + 1), cat("template: --var '", name, "'"));
    try {
      extra[name] = ojson::parse(v.substr(eq + 1));
    } catch (const nlohmann::json::exception&) {
      fail("template: --var '", name, "': value '", v.substr(eq + 1), "' is not JSON (quote strings: ", name,
           "='\"text\"')");
    }
  }

  const ChatTemplate tpl(load_chat_template_source(resolve_model_arg(model, hub::Need::kTokenizer)));
  const std::string out = tpl.render(messages, tools, !no_generation_prompt, extra,
                                     date.empty() ? std::nullopt : std::optional<std::string>(date));
  std::fwrite(out.data(), 1, out.size(), stdout);
  std::fflush(stdout);
  return 0;
}

CommandRegistrar reg({"template", "render a model's chat template for a conversation", run_template});

}  // namespace
}  // namespace lfm::cli
