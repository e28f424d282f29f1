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

// transformers' Lfm2AudioProcessor default template (docs/design/audio_input_research.md §1.5):
// BOS, then each message as <|im_start|>role\n content <|im_end|>\n (parts' texts joined), and the
// generation prompt.
const std::string kLfm2AudioChatTemplate =
    "{{- bos_token -}}"
    "{%- for message in messages -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' -}}"
    "{%- if message['content'] is string -%}{{- message['content'] -}}"
    "{%- else -%}{%- for part in message['content'] -%}{%- if part['type'] == 'text' -%}{{- part['text'] -}}"
    "{%- endif -%}{%- endfor -%}{%- endif -%}"
    "{{- '<|im_end|>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}";

// Per audio or spoken content part of the conversation, in order: whether it is a spoken reply's.
std::vector<bool> spoken_parts(const nlohmann::ordered_json& messages) {
  std::vector<bool> out;
  if (!messages.is_array()) return out;
  for (const auto& m : messages) {
    if (!m.is_object() || !m.contains("content") || !m["content"].is_array()) continue;
    for (const auto& p : m["content"])
      if (p.is_object() && p.contains("type") && (p["type"] == "audio" || p["type"] == "spoken"))
        out.push_back(p["type"] == "spoken");
  }
  return out;
}

}  // namespace

// Messages whose content lists an {"type": "audio"} part, with that content joined into one text:
// each text part's text and, for each audio part, the placeholder (transformers' Lfm2AudioProcessor
// template renders the parts so, one after the other). Other messages are unchanged.
nlohmann::ordered_json with_audio_placeholders(const nlohmann::ordered_json& messages, const std::string& placeholder) {
  nlohmann::ordered_json out = messages;
  if (!out.is_array()) return out;
  for (auto& m : out) {
    if (!m.is_object() || !m.contains("content") || !m["content"].is_array()) continue;
    const auto& parts = m["content"];
    const bool has_audio = std::any_of(parts.begin(), parts.end(), [](const auto& p) {
      return p.is_object() && p.contains("type") && (p["type"] == "audio" || p["type"] == "spoken");
    });
    if (!has_audio) continue;
    std::string text;
    for (const auto& p : parts) {
      LFM_CHECK(p.is_object() && p.contains("type") && p["type"].is_string(), "chat: a content part has no type");
      const std::string type = p["type"].get<std::string>();
      if (type == "audio" || type == "spoken") {
        text += placeholder;
      } else if (type == "text") {
        LFM_CHECK(p.contains("text") && p["text"].is_string(), "chat: a text part has no text");
        text += p["text"].get<std::string>();
      } else {
        fail("chat: a message with audio cannot also hold a '", type, "' part");
      }
    }
    m["content"] = text;
  }
  return out;
}

ChatTurnBuilder::ChatTurnBuilder(const Tokenizer& tok, std::shared_ptr<const ImagePromptSetup> images,
                                 std::shared_ptr<const AudioPromptSetup> audio)
    : tok_(tok), images_(std::move(images)), audio_(std::move(audio)) {
  // A speech model whose files carry no template (a GGUF converted without one) gets the one
  // transformers' Lfm2AudioProcessor falls back to.
  const std::string& tpl = !tok.chat_template().empty() || !audio_ ? tok.chat_template() : kLfm2AudioChatTemplate;
  if (!tpl.empty())
    tpl_ = std::make_unique<ChatTemplate>(tpl, opt_str(tok.bos_token()), opt_str(tok.eos_token()), opt_str(tok.pad_token()));
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
  LFM_CHECK(audio_ || in.audios.empty(), "chat: the conversation has ", in.audios.size(),
            " audio clips but the model has no speech encoder (audio needs an LFM2-Audio model)");
  std::string text = tpl_->render(audio_ ? with_audio_placeholders(in.messages, audio_->placeholder_text) : in.messages,
                                  in.tools, true, in.template_kwargs, in.date);
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
  LFM_CHECK(audio_ || in.spoken.empty(), "chat: the conversation has ", in.spoken.size(),
            " spoken replies but the model has no audio placeholder (spoken turns need an LFM2-Audio model)");
  if (audio_ && !in.audio_placeholders_only) {
    // Spoken replies first (their placeholders become the replies' ids and frames), then the
    // clips' placeholders are laid out, moving the frames after them.
    const std::vector<bool> is_spoken = spoken_parts(in.messages);
    const size_t placeholders =
        static_cast<size_t>(std::count(t.prompt.begin(), t.prompt.end(), audio_->audio_token_id));
    LFM_CHECK(placeholders == is_spoken.size(), "chat: the rendered conversation has ", placeholders,
              " audio placeholders (", audio_->placeholder_text, ") for ", in.audios.size(), " audio clips and ",
              in.spoken.size(), " spoken replies; each audio or spoken part makes one, and the text may not contain the "
              "placeholder itself");
    SpokenPrompt spoken = put_spoken_replies(t.prompt, audio_->audio_token_id, is_spoken, in.spoken, 0);
    t.prompt = std::move(spoken.ids);
    LFM_CHECK(spoken.kept.size() == in.audios.size(), "chat: the conversation has ", spoken.kept.size(),
              " audio parts for ", in.audios.size(), " audio clips");
    std::vector<int64_t> tokens;
    if (!in.audios.empty()) {
      AudioPrompt laid = expand_audio(t.prompt, in.audios, *audio_);
      t.prompt = std::move(laid.ids);
      t.audios = std::move(laid.audios);
      for (const auto& a : t.audios) tokens.push_back(a->tokens);
    }
    t.audio_frames = shift_frames(spoken, tokens);
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
  r.audios = audios;
  r.audio_frames = audio_frames;
  r.stop_ids.insert(r.stop_ids.end(), stop_ids.begin(), stop_ids.end());
  r.show_special = show_special;
}

}  // namespace lfm
