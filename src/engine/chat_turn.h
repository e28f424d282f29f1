// One chat turn, built the same way for every front end (`lfm serve`'s chat completions, `lfm
// chat` and the C API): the model's template rendered with the generation prompt, the stop ids
// that end the assistant turn, the special ids whose text the output parser needs to see, and the
// parser's options. Keeping it in one place is what keeps them from drifting apart (lfm chat
// once parsed with markers the detokenizer had already dropped).
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "chat/chat_template.h"
#include "chat/output_parser.h"
#include "engine/audio_prompt.h"
#include "engine/image_prompt.h"
#include "engine/request.h"
#include "engine/spoken_turn.h"
#include "image/image.h"

namespace lfm {
class Tokenizer;
}

namespace lfm {

struct ChatTurnInput {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  nlohmann::ordered_json tools;      // null: no tools offered
  std::string tool_choice = "auto";  // auto | none | required | a function name (with named_tool)
  bool named_tool = false;
  nlohmann::ordered_json template_kwargs = nlohmann::ordered_json::object();
  std::optional<std::string> date;   // pins strftime_now (YYYY-MM-DD)
  // Parse tool calls even when `tools` is null: `lfm chat` users describe tools in the system
  // prompt, as LFM2's model cards show.
  bool parse_tool_calls_without_tools = false;
  // The images of the conversation's {"type": "image"} content parts, in order (LFM2-VL).
  std::vector<image::Image> images;
  // The clips of the conversation's {"type": "audio"} content parts, in order (LFM2-Audio): mono
  // samples at the model's rate. Each such part becomes the audio placeholder where it stands
  // (the message's parts joined into one text, as transformers' Lfm2AudioProcessor renders them).
  std::vector<std::vector<float>> audios;
  // Leave each audio part as the audio token once (no clips given, nothing laid out): what the C
  // API's lfm_chat_tokens returns.
  bool audio_placeholders_only = false;
  // Spoken replies (LFM2-Audio speech output, engine/spoken_turn.h) of the conversation's
  // {"type": "spoken"} content parts (assistant messages), in order: each is put back as it was
  // generated, its frames going to Request::audio_frames.
  std::vector<std::shared_ptr<const SpokenReply>> spoken;
};

struct ChatTurn {
  std::vector<int32_t> prompt;        // the rendered conversation, tokenized (the template writes BOS)
  std::vector<int32_t> stop_ids;      // <|im_end|>
  // Special ids shown in the text: only the markers the parser consumes, so special tokens never
  // leak into content (a tool-call marker in a reply to a request without tools is dropped).
  std::vector<int32_t> show_special;
  chat::OutputParserOptions parser;
  // Text the prompt ends with that the reply continues (tool_choice required / named): feed it
  // to the parser before the generated text.
  std::string forced;
  // The images, their placeholders in `prompt` laid out (expand_images), for Request::images.
  std::vector<std::shared_ptr<const ImageInput>> images;
  // The clips, their placeholders laid out (expand_audio), for Request::audios.
  std::vector<std::shared_ptr<const AudioInput>> audios;
  // The spoken replies' frames at their positions in `prompt`, for Request::audio_frames.
  std::vector<std::shared_ptr<const AudioOutFrames>> audio_frames;

  // Sets the request's prompt, images, clips and spoken frames, adds the stop ids and sets show_special.
  void apply(Request& r) const;
};

// Messages whose content lists an {"type": "audio"} (or {"type": "spoken"}) part, with that
// content joined into one text: each text part's text and, for each audio or spoken part, `placeholder` (transformers' Lfm2AudioProcessor
// template renders the parts so, one after the other). Other messages are unchanged. Throws
// lfm::Error for a message mixing audio with a part other than text.
nlohmann::ordered_json with_audio_placeholders(const nlohmann::ordered_json& messages, const std::string& placeholder);

class ChatTurnBuilder {
 public:
  // The tokenizer must outlive the builder. `images`: the model's vision side
  // (load_image_prompt_setup); null for a model that takes no images. `audio`: the model's speech
  // side (audio_prompt_setup with the tokenizer); null for a model that takes no audio.
  explicit ChatTurnBuilder(const Tokenizer& tok, std::shared_ptr<const ImagePromptSetup> images = nullptr,
                           std::shared_ptr<const AudioPromptSetup> audio = nullptr);
  ~ChatTurnBuilder();
  bool has_template() const { return tpl_ != nullptr; }
  bool takes_images() const { return images_ != nullptr; }
  bool takes_audio() const { return audio_ != nullptr; }
  const AudioPromptSetup* audio_setup() const { return audio_.get(); }
  // Throws lfm::Error when the model has no template, rendering fails, or the rendered
  // conversation's image placeholders are not one per image (e.g. "<image>" typed in the text).
  ChatTurn build(const ChatTurnInput& in) const;

 private:
  const Tokenizer& tok_;
  std::unique_ptr<ChatTemplate> tpl_;
  std::shared_ptr<const ImagePromptSetup> images_;
  std::shared_ptr<const AudioPromptSetup> audio_;
  std::vector<int32_t> stop_ids_;
  std::vector<int32_t> think_ids_, tool_call_ids_;  // the markers the tokenizer has as tokens
};

}  // namespace lfm
