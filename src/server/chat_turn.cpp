#include "server/chat_turn.h"

#include <cctype>

#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace lfm::server {

namespace {
std::optional<std::string> opt_str(const std::string& s) {
  return s.empty() ? std::nullopt : std::optional<std::string>(s);
}
}  // namespace

ChatTurnBuilder::ChatTurnBuilder(const Tokenizer& tok) : tok_(tok) {
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
  r.stop_ids.insert(r.stop_ids.end(), stop_ids.begin(), stop_ids.end());
  r.show_special = show_special;
}

}  // namespace lfm::server
