#include "chat/output_parser.h"

#include <algorithm>
#include <new>
#include <utility>

#include "core/error.h"

namespace lfm::chat {
namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

// Length of the longest proper prefix of `marker` that `text` ends with: those bytes may be the
// beginning of a marker split across deltas, so they must not be emitted yet.
size_t partial_marker_suffix(std::string_view text, std::string_view marker) {
  for (size_t len = std::min(text.size(), marker.size() - 1); len > 0; --len) {
    if (text.substr(text.size() - len) == marker.substr(0, len)) return len;
  }
  return 0;
}

// Moves `cut` back to the start of a UTF-8 sequence that is not complete before it, so a delta
// never ends in the middle of a character (JSON serialisation of such a delta would fail).
size_t utf8_safe_cut(std::string_view text, size_t cut) {
  for (size_t back = 1; back <= 4 && back <= cut; ++back) {
    auto byte = static_cast<unsigned char>(text[cut - back]);
    if ((byte & 0xC0) == 0x80) continue;  // continuation byte: keep looking for the lead byte
    size_t needed = byte < 0x80 ? 1 : (byte >> 5) == 0x6 ? 2 : (byte >> 4) == 0xE ? 3 : (byte >> 3) == 0x1E ? 4 : 1;
    return back < needed ? cut - back : cut;
  }
  return cut;  // invalid bytes: nothing better to wait for
}

std::string_view trim_trailing_space(std::string_view text) {
  while (!text.empty() && is_space(text.back())) text.remove_suffix(1);
  return text;
}

}  // namespace

nlohmann::json to_openai_tool_call(const ParsedToolCall& call, const std::string& id) {
  // `replace` keeps serialisation from throwing on invalid UTF-8 the model may have produced.
  std::string arguments = call.arguments.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
  return nlohmann::json{{"id", id},
                        {"type", "function"},
                        {"function", {{"name", call.name}, {"arguments", std::move(arguments)}}}};
}

StreamingOutputParser::StreamingOutputParser(OutputParserOptions options)
    : options_(std::move(options)), state_(options_.parse_reasoning ? State::kStart : State::kContent) {}

std::vector<StreamEvent> StreamingOutputParser::feed(std::string_view delta) {
  LFM_CHECK(!finished_, "output parser: feed() after finish()");
  buffer_.append(delta);
  std::vector<StreamEvent> events;
  process(false, events);
  return events;
}

std::vector<StreamEvent> StreamingOutputParser::finish() {
  LFM_CHECK(!finished_, "output parser: finish() called twice");
  finished_ = true;
  std::vector<StreamEvent> events;
  process(true, events);
  buffer_.clear();
  return events;
}

void StreamingOutputParser::process(bool at_end, std::vector<StreamEvent>& events) {
  bool progressed = true;
  while (progressed) {
    switch (state_) {
      case State::kStart: progressed = step_start(at_end); break;
      case State::kReasoning: progressed = step_reasoning(at_end, events); break;
      case State::kContent: progressed = step_content(at_end, events); break;
      case State::kToolCall: progressed = step_tool_call(at_end, events); break;
    }
  }
}

void StreamingOutputParser::emit_text(StreamEvent::Kind kind, std::string_view text,
                                      std::vector<StreamEvent>& events) {
  if (text.empty()) return;
  if (!events.empty() && events.back().kind == kind) {
    events.back().text.append(text);
    return;
  }
  StreamEvent event;
  event.kind = kind;
  event.text = std::string(text);
  events.push_back(std::move(event));
}

bool StreamingOutputParser::trim_pending_leading_space() {
  if (!trim_leading_space_) return true;
  size_t spaces = 0;
  while (spaces < buffer_.size() && is_space(buffer_[spaces])) ++spaces;
  buffer_.erase(0, spaces);
  if (buffer_.empty()) return false;
  trim_leading_space_ = false;
  return true;
}

// Decides whether the output opens with `<think>` (after optional whitespace).
bool StreamingOutputParser::step_start(bool at_end) {
  size_t spaces = 0;
  while (spaces < buffer_.size() && is_space(buffer_[spaces])) ++spaces;
  std::string_view rest = std::string_view(buffer_).substr(spaces);
  if (rest.starts_with(kThinkOpen)) {
    buffer_.erase(0, spaces + kThinkOpen.size());
    state_ = State::kReasoning;
    trim_leading_space_ = true;
    return true;
  }
  if (!at_end && kThinkOpen.starts_with(rest)) return false;  // could still become `<think>`
  // No opening tag: the leading whitespace belongs to the content (or is trimmed reasoning).
  state_ = options_.starts_in_reasoning ? State::kReasoning : State::kContent;
  trim_leading_space_ = options_.starts_in_reasoning;
  return true;
}

bool StreamingOutputParser::step_reasoning(bool at_end, std::vector<StreamEvent>& events) {
  if (!trim_pending_leading_space()) return false;
  size_t close = buffer_.find(kThinkClose);
  if (close != std::string::npos) {
    emit_text(StreamEvent::Kind::kReasoning, trim_trailing_space(std::string_view(buffer_).substr(0, close)), events);
    buffer_.erase(0, close + kThinkClose.size());
    state_ = State::kContent;
    trim_leading_space_ = true;
    return true;
  }
  if (at_end) {
    emit_text(StreamEvent::Kind::kReasoning, trim_trailing_space(buffer_), events);
    buffer_.clear();
    return false;
  }
  // Hold back a possible partial `</think>` and the whitespace before it (trimmed if the tag
  // follows).
  std::string_view safe = std::string_view(buffer_).substr(0, buffer_.size() - partial_marker_suffix(buffer_, kThinkClose));
  size_t cut = utf8_safe_cut(buffer_, trim_trailing_space(safe).size());
  emit_text(StreamEvent::Kind::kReasoning, std::string_view(buffer_).substr(0, cut), events);
  buffer_.erase(0, cut);
  return false;
}

bool StreamingOutputParser::step_content(bool at_end, std::vector<StreamEvent>& events) {
  if (!trim_pending_leading_space()) return false;
  if (options_.parse_tool_calls) {
    size_t start = buffer_.find(kToolCallStart);
    if (start != std::string::npos) {
      emit_text(StreamEvent::Kind::kContent, std::string_view(buffer_).substr(0, start), events);
      buffer_.erase(0, start + kToolCallStart.size());
      state_ = State::kToolCall;
      tool_call_end_search_from_ = 0;
      return true;
    }
  }
  size_t cut = buffer_.size();
  if (!at_end) {
    if (options_.parse_tool_calls) cut -= partial_marker_suffix(buffer_, kToolCallStart);
    cut = utf8_safe_cut(buffer_, cut);
  }
  emit_text(StreamEvent::Kind::kContent, std::string_view(buffer_).substr(0, cut), events);
  buffer_.erase(0, cut);
  return false;
}

// buffer_ holds the block body after `<|tool_call_start|>`; nothing is emitted until its end
// marker arrives, so a client never sees half a call.
bool StreamingOutputParser::step_tool_call(bool at_end, std::vector<StreamEvent>& events) {
  size_t end = buffer_.find(kToolCallEnd, tool_call_end_search_from_);
  if (end == std::string::npos) {
    if (at_end) {  // never closed: the model's text is returned as it was written
      std::string verbatim = std::string(kToolCallStart) + buffer_;
      emit_text(StreamEvent::Kind::kContent, verbatim, events);
      buffer_.clear();
      state_ = State::kContent;
      return false;
    }
    // Only the last bytes can start a marker that later deltas complete.
    tool_call_end_search_from_ = buffer_.size() >= kToolCallEnd.size() ? buffer_.size() - kToolCallEnd.size() + 1 : 0;
    return false;
  }
  std::string_view body = std::string_view(buffer_).substr(0, end);
  std::vector<ParsedToolCall> calls;
  bool parsed = false;
  try {
    calls = parse_tool_call_block(body, options_.max_nesting_depth);
    parsed = true;
  } catch (const std::bad_alloc&) {
    throw;
  } catch (const std::exception&) {
    // Malformed block: falls back to content below; model output must never abort a response.
  }
  if (parsed) {
    for (const ParsedToolCall& call : calls) {
      StreamEvent event;
      event.kind = StreamEvent::Kind::kToolCall;
      event.tool_call = to_openai_tool_call(call, options_.tool_call_id_prefix + std::to_string(tool_call_count_++));
      events.push_back(std::move(event));
    }
  } else {
    std::string verbatim = std::string(kToolCallStart) + std::string(body) + std::string(kToolCallEnd);
    emit_text(StreamEvent::Kind::kContent, verbatim, events);
  }
  buffer_.erase(0, end + kToolCallEnd.size());
  state_ = State::kContent;
  return true;
}

void append_events(ParsedOutput& output, const std::vector<StreamEvent>& events) {
  for (const StreamEvent& event : events) {
    switch (event.kind) {
      case StreamEvent::Kind::kContent: output.content += event.text; break;
      case StreamEvent::Kind::kReasoning: output.reasoning_content += event.text; break;
      case StreamEvent::Kind::kToolCall: output.tool_calls.push_back(event.tool_call); break;
    }
  }
}

// One parser implementation serves both paths, so a streamed response can never disagree with
// the non-streamed one for the same text.
ParsedOutput parse_assistant_output(std::string_view text, const OutputParserOptions& options) {
  StreamingOutputParser parser(options);
  ParsedOutput output;
  append_events(output, parser.feed(text));
  append_events(output, parser.finish());
  return output;
}

}  // namespace lfm::chat
