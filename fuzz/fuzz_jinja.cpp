// The Jinja lexer, parser and evaluator: the input is a template source, optionally followed by a
// NUL byte and a JSON object {"messages": …, "tools": …} for the render (else a fixed
// conversation). Limits are lowered so each input runs in milliseconds; the same code paths
// enforce the default limits.
#include <nlohmann/json.hpp>

#include "chat/jinja_eval.h"
#include "core/error.h"
#include "core/json_guard.h"
#include "fuzz_util.h"

namespace {

const nlohmann::ordered_json& default_vars() {
  static const nlohmann::ordered_json v = nlohmann::ordered_json::parse(R"({
    "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi <b>&"},
                 {"role": "assistant", "content": "Hello", "tool_calls": [{"type": "function",
                  "function": {"name": "f", "arguments": {"x": [1, 2.5, null, true]}}}]},
                 {"role": "tool", "content": "{\"ok\": 1}"}],
    "tools": [{"type": "function", "function": {"name": "f", "description": "d",
               "parameters": {"type": "object", "properties": {"x": {"type": "array"}}}}}]})");
  return v;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view all = lfm::fuzz::as_text(data, size);
  const size_t nul = all.find('\0');
  const std::string source(all.substr(0, nul));
  try {
    nlohmann::ordered_json vars = default_vars();
    if (nul != std::string_view::npos) vars = lfm::parse_ordered_json(all.substr(nul + 1), "vars");
    if (!vars.is_object()) return 0;
    lfm::jinja::Template t(source);
    lfm::jinja::VarList list;
    for (auto it = vars.begin(); it != vars.end(); ++it) list.emplace_back(it.key(), lfm::jinja::from_json(it.value()));
    list.emplace_back("bos_token", lfm::jinja::Value::string("<|startoftext|>"));
    list.emplace_back("add_generation_prompt", lfm::jinja::Value::boolean(true));
    lfm::jinja::RenderLimits lim;
    lim.max_output_bytes = 1 << 20;
    lim.max_steps = 200000;
    t.render(list, {}, lim);
  } catch (const lfm::Error&) {  // TemplateError derives from it
  }
  return 0;
}
