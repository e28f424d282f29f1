// The C API's chat requests: messages (their image parts, tool_choice) into the chat turn every
// front end builds (engine/chat_turn.h), and the reply parsed as lfm serve's
// /v1/chat/completions parses it (chat/output_parser.h) into the DONE event's message_json.
#include <cstring>

#include "capi/capi_internal.h"

using lfm::capi::fail;
using lfm::capi::require;

namespace lfm::capi {

namespace {

using ojson = nlohmann::ordered_json;

// The URL of an image part, as lfm serve reads it (OpenAI's {"type": "image_url", "image_url":
// {"url": ...}} or a bare string there; Hugging Face's {"type": "image", "url" | "image": ...}),
// or null for {"type": "image"} alone.
const ojson* part_url(const ojson& part, const std::string& type, const std::string& where) {
  for (const char* key : {"image_url", "url", "image"}) {
    auto it = part.find(key);
    if (it == part.end() || it->is_null() || (type == "image_url" && std::string(key) != "image_url")) continue;
    if (it->is_string()) return &*it;
    if (std::string(key) == "image_url" && it->is_object()) {
      auto u = it->find("url");
      if (u == it->end() || !u->is_string())
        fail(LFM_ERR_INVALID_ARGUMENT, "chat: " + where + ".image_url.url must be a string (a data:image/...;base64 URI)");
      return &*u;
    }
    fail(LFM_ERR_INVALID_ARGUMENT, "chat: " + where + "." + key + " must be an object {\"url\": ...} or a URL string");
  }
  if (type == "image_url")
    fail(LFM_ERR_INVALID_ARGUMENT, "chat: " + where + ".image_url must be an object {\"url\": \"data:image/png;base64,...\"}");
  return nullptr;
}

void apply_tool_choice(ChatTurnInput& in, const char* tool_choice) {
  if (!tool_choice || std::strcmp(tool_choice, "auto") == 0) return;
  const std::string tc = tool_choice;
  if (tc == "none") {
    in.tools = nullptr;  // not offered, and markers in the reply stay text (as lfm serve does)
    return;
  }
  require(!in.tools.is_null(), ("chat: tool_choice '" + tc + "' needs tools_json").c_str());
  in.tool_choice = tc;
  if (tc == "required") return;
  bool found = false;
  for (const auto& t : in.tools)
    found = found || (t.is_object() && t.contains("function") && t["function"].is_object() &&
                      t["function"].value("name", "") == tc);
  require(found, ("chat: tool_choice names function '" + tc +
                  "', which is not in tools_json ('auto', 'none', 'required' or a function's name)")
                     .c_str());
  in.named_tool = true;
}

}  // namespace

ChatTurnInput chat_input(const lfm_model_state& s, const char* messages_json, const char* tools_json,
                         const char* tool_choice, std::vector<PendingImage>* images,
                         std::vector<std::vector<float>>* audios, double max_audio_seconds) {
  require(messages_json != nullptr, "chat: messages_json is NULL");
  model_tokenizer(s);
  ChatTurnInput in;
  in.messages = parse_json(messages_json, "chat: messages_json", true);
  if (tools_json) in.tools = parse_json(tools_json, "chat: tools_json", true);
  apply_tool_choice(in, tool_choice);
  std::vector<PendingImage> given = images ? std::move(*images) : std::vector<PendingImage>();
  std::vector<PendingImage> ordered;  // the parts' images, decoded together at the end
  size_t taken = 0;  // of `given`, by parts without a URL
  std::vector<std::vector<float>> given_audio = audios ? std::move(*audios) : std::vector<std::vector<float>>();
  std::vector<std::vector<float>> ordered_audio;  // the parts' clips, in order
  size_t taken_audio = 0;  // of `given_audio`, by {"type": "audio"} parts
  for (size_t i = 0; i < in.messages.size(); ++i) {
    ojson& m = in.messages[i];
    if (!m.is_object() || !m.contains("content") || !m["content"].is_array()) continue;
    const std::string role = m.contains("role") && m["role"].is_string() ? m["role"].get<std::string>() : "";
    for (size_t j = 0; j < m["content"].size(); ++j) {
      ojson& part = m["content"][j];
      if (!part.is_object() || !part.contains("type") || !part["type"].is_string()) continue;
      const std::string type = part["type"].get<std::string>();
      const std::string where = "messages[" + std::to_string(i) + "].content[" + std::to_string(j) + "]";
      if (type == "audio" || type == "input_audio") {
        if (role != "user")
          fail(LFM_ERR_INVALID_ARGUMENT, "chat: " + where + " is an audio part; audio is accepted in user messages only");
        audio_setup(s);  // a model without a speech encoder: refused before anything is decoded
        if (audios) {
          if (type == "input_audio") {
            ordered_audio.push_back(audio_from_part(s, part.contains("input_audio") ? part["input_audio"] : ojson(),
                                                    "chat: " + where, max_audio_seconds));
          } else {
            if (taken_audio == given_audio.size())
              fail(LFM_ERR_INVALID_ARGUMENT, "chat: " + where + " is an audio part without data, and the prompt has only " +
                                                 std::to_string(given_audio.size()) +
                                                 " clips for such parts (lfm_prompt.audio_paths / audio_data / audio_pcm)");
            ordered_audio.push_back(std::move(given_audio[taken_audio++]));
          }
        }
        part = ojson{{"type", "audio"}};  // the chat turn writes the model's placeholder
        continue;
      }
      if (type != "image" && type != "image_url") continue;
      if (role != "user")
        fail(LFM_ERR_INVALID_ARGUMENT, "chat: " + where + " is an image part; images are accepted in user messages only");
      const ojson* url = part_url(part, type, where);
      if (images) {
        image_setup(s);  // a model without a vision tower: refused before anything is decoded
        if (url) {
          ordered.push_back(image_from_data_uri(url->get<std::string>(), "chat: " + where));
        } else {
          if (taken == given.size())
            fail(LFM_ERR_INVALID_ARGUMENT, "chat: " + where + " is an image part without a URL, and the prompt has only " +
                                               std::to_string(given.size()) +
                                               " images for such parts (lfm_prompt.image_paths / image_data)");
          ordered.push_back(std::move(given[taken++]));
        }
      }
      part = ojson{{"type", "image"}};  // the template writes the model's placeholder
    }
  }
  if (images && taken != given.size())
    fail(LFM_ERR_INVALID_ARGUMENT, "chat: the prompt has " + std::to_string(given.size()) + " images but the messages " +
                                       "have " + std::to_string(taken) +
                                       " image parts without a URL to place them ({\"type\": \"image\"})");
  if (audios && taken_audio != given_audio.size())
    fail(LFM_ERR_INVALID_ARGUMENT, "chat: the prompt has " + std::to_string(given_audio.size()) +
                                       " audio clips but the messages have " + std::to_string(taken_audio) +
                                       " audio parts without data to place them ({\"type\": \"audio\"})");
  if (audios) in.audios = std::move(ordered_audio);
  else in.audio_placeholders_only = true;
  if (images) in.images = decode_images(s, std::move(ordered));
  return in;
}

ChatTurn chat_turn(const lfm_model_state& s, const ChatTurnInput& in, bool laid_out) {
  model_tokenizer(s);
  const ChatTurnBuilder& b = laid_out ? *s.chat : *s.chat_text;
  if (!b.has_template()) fail(LFM_ERR_UNSUPPORTED, "chat: the model ships no chat template");
  return b.build(in);
}

void start_chat_parser(lfm_request& r, const ChatTurn& turn) {
  chat::OutputParserOptions po = turn.parser;
  po.tool_call_id_prefix = "call_" + std::to_string(r.stream->id()) + "_";
  r.parser = std::make_unique<chat::StreamingOutputParser>(po);
  chat::append_events(r.parsed, r.parser->feed(turn.forced));  // held back: the reply completes it
}

void parse_chat_event(lfm_request& r) {
  if (!r.parser) return;
  chat::append_events(r.parsed, r.parser->feed(r.last.text));
  if (r.last.kind != Event::Kind::kDone) return;
  chat::append_events(r.parsed, r.parser->finish());
  const bool calls = !r.parsed.tool_calls.empty();
  ojson msg = {{"role", "assistant"}, {"content", r.parsed.content.empty() && calls ? ojson() : ojson(r.parsed.content)}};
  if (!r.parsed.reasoning_content.empty()) msg["reasoning_content"] = r.parsed.reasoning_content;
  if (calls) msg["tool_calls"] = ojson(r.parsed.tool_calls);
  // Invalid UTF-8 from the model is replaced, not thrown on (as the server writes it).
  r.message_json = msg.dump(-1, ' ', false, ojson::error_handler_t::replace);
}

}  // namespace lfm::capi
