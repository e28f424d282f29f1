#include "engine/chat_turn.h"

#include <algorithm>
#include <cctype>

#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace lfm {

namespace {
std::optional<std::string> opt_str(const std::string& s) {
  return s.empty() ? std::nullopt : std::optional<std::string>(s);
}
}  // namespace

ChatTurnBuilder::ChatTurnBuilder(const Tokenizer& tok, std::shared_ptr<const ImagePromptSetup> images)
    : tok_(tok), images_(std::move(images)) {
  if (!tok.chat_template().empty())
    tpl_ = std::make_unique<ChatTemplate>(tok.chat_template(), opt_str(tok.bos_token()), opt_str(tok.eos_token()),
                                          opt_str(tok.pad_token()));
  if (auto im_end = tok.token_to_id("<|im_end|>")) stop_ids_.push_back(*im_end);
  for (std::string_view m : {chat::kThinkOpen, chat::kThinkClose})
    if (auto id = tok.token_to_id(m)) think_ids_.push_back(*id);
  for (std::string_view m : {chat::kToolCallStart, chat::kToolCallEnd})
    if (auto id = tok.token_to_id(m)) tool_call_ids_.push_back(*id);
}

ChatTurnBuilder::~ChatTurnBuilder() = default;

ChatTurn ChatTurnBuilder::build(const ChatTurnInput& in) const {
  LFM_CHECK(tpl_, "chat: the model ships no chat template (chat_template.jinja, tokenizer_config.json or GGUF "
                  "tokenizer.chat_template)");
  std::string text = tpl_->render(in.messages, in.tools, true, in.template_kwargs, in.date);
  std::string tail = text;
  while (!tail.empty() && std::isspace(static_cast<unsigned char>(tail.back()))) tail.pop_back();
  const bool in_reasoning = tail.ends_with(chat::kThinkOpen);
  ChatTurn t;
  // tool_choice required / named: the assistant turn starts inside a call (without grammar
  // constraints, this is how the choice is enforced: the model continues the call).
  if (in.named_tool)
    t.forced = std::string(chat::kToolCallStart) + "[" + in.tool_choice + "(";
  else if (in.tool_choice == "required")
    t.forced = std::string(chat::kToolCallStart) + "[";
  text += t.forced;
  t.prompt = tok_.encode(text, /*add_special=*/false);  // the template writes its own BOS
  if (!images_) {
    LFM_CHECK(in.images.empty(), "chat: the conversation has ", in.images.size(),
              " images but the model has no vision tower (images need an LFM2-VL model)");
  } else {
    // Every placeholder must be an image part's: one typed in the text would take an image's
    // place (or be left without one).
    const size_t placeholders =
        static_cast<size_t>(std::count(t.prompt.begin(), t.prompt.end(), images_->image_token_id));
    LFM_CHECK(placeholders == in.images.size(), "chat: the rendered conversation has ", placeholders,
              " image placeholders (<image>) for ", in.images.size(),
              " images; each image part makes one, and the text may not contain the placeholder itself");
    if (!in.images.empty()) {
      ImagePrompt laid = expand_images(t.prompt, in.images, *images_);
      t.prompt = std::move(laid.ids);
      t.images = std::move(laid.images);
    }
  }
  t.stop_ids = stop_ids_;
  t.parser.parse_reasoning = true;
  t.parser.starts_in_reasoning = in_reasoning && t.forced.empty();
  t.parser.parse_tool_calls = !in.tools.is_null() || in.parse_tool_calls_without_tools;
  t.show_special = think_ids_;
  if (t.parser.parse_tool_calls) t.show_special.insert(t.show_special.end(), tool_call_ids_.begin(), tool_call_ids_.end());
  return t;
}

void ChatTurn::apply(Request& r) const {
  r.prompt = prompt;
  r.images = images;
  r.stop_ids.insert(r.stop_ids.end(), stop_ids.begin(), stop_ids.end());
  r.show_special = show_special;
}

}  // namespace lfm
