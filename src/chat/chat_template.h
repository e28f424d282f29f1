// Chat-template rendering that reproduces Hugging Face transformers' apply_chat_template
// (jinja2 ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loopcontrols,
// {% generation %}, tojson = json.dumps(ensure_ascii=False), raise_exception, strftime_now)
// byte for byte, on our own Jinja interpreter (src/chat/jinja_*).
#pragma once

#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace lfm {

namespace jinja {
class Template;
}

// Where a model's chat template and special-token texts come from.
struct ChatTemplateSource {
  std::string template_text;
  std::optional<std::string> bos_token, eos_token, pad_token;  // absent tokens are undefined in the template
  std::string origin;  // e.g. ".../chat_template.jinja", for messages
};

// Reads a Hugging Face model folder: chat_template.jinja if present, else "chat_template" of
// tokenizer_config.json (a string, or a list of {name, template}: "default" or the first);
// token texts from tokenizer_config.json (strings or {"content": ...}). A path ending in .gguf
// throws: GGUF templates come through the tokenizer's TokenizerSpec.
ChatTemplateSource load_chat_template_source(const std::string& model_path);

class ChatTemplate {
 public:
  // Parses the template; throws lfm::Error on syntax errors or unsupported constructs.
  ChatTemplate(const std::string& source, std::optional<std::string> bos_token, std::optional<std::string> eos_token,
               std::optional<std::string> pad_token = std::nullopt);
  explicit ChatTemplate(const ChatTemplateSource& src);
  ~ChatTemplate();
  ChatTemplate(ChatTemplate&&) noexcept;
  ChatTemplate& operator=(ChatTemplate&&) noexcept;

  // Renders like tokenizer.apply_chat_template(messages, tools=tools, tokenize=False,
  // add_generation_prompt=..., **extra_vars). Use ordered_json so object key order is kept
  // (tojson preserves insertion order, as json.dumps does). tools: null when absent.
  // extra_vars: an object of additional template variables (e.g. {"keep_past_thinking": true}).
  // date: "YYYY-MM-DD" pins strftime_now() to that day at 00:00:00; otherwise local time now.
  // Throws lfm::Error with the template's message on template errors (raise_exception included).
  std::string render(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
                     bool add_generation_prompt,
                     const nlohmann::ordered_json& extra_vars = nlohmann::ordered_json::object(),
                     const std::optional<std::string>& date = std::nullopt) const;

 private:
  std::unique_ptr<jinja::Template> tpl_;
  std::optional<std::string> bos_, eos_, pad_;
};

}  // namespace lfm
