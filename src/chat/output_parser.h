// Splits what an LFM2 model generates into OpenAI-style assistant message parts:
//   reasoning_content  — the `<think>…</think>` block at the start of the output,
//   content            — all remaining text (before, between and after tool-call blocks),
//   tool_calls         — every well-formed `<|tool_call_start|>…<|tool_call_end|>` block.
//
// Each tool call is {"id": "<prefix><n>", "type": "function",
//                    "function": {"name": "...", "arguments": "<compact JSON object>"}}
// where n counts calls from 0 within one output and the arguments keep the key order the
// model wrote. The block syntax (Pythonic calls or JSON objects) is documented in
// chat/pythonic_call_parser.h.
//
// Rules, identical for the one-shot and the streaming parser:
//   * Reasoning is recognised only at the very start (after optional whitespace) or, with
//     `starts_in_reasoning`, from the first byte (a repeated `<think>` there is dropped).
//     Whitespace right after `<think>` and right before `</think>` is trimmed, as is the
//     whitespace that follows `</think>` before the content. Reasoning without `</think>`
//     stays reasoning up to the end of the output (it was streamed as reasoning already).
//     Markers inside reasoning are reasoning text; a later `<think>` is plain content.
//   * A block ends at the first `<|tool_call_end|>` (the model emits it as one token, so it
//     cannot legitimately occur inside an argument string).
//   * A block that does not parse (bad literal, unbalanced brackets, nesting deeper than
//     max_nesting_depth, …) and a block still open at the end of the output are kept verbatim,
//     markers included, as content. An empty list `[]` yields no call and no content.
//   * Nothing throws for any model output; the parsers only throw lfm::Error on misuse
//     (feeding after finish()).
//
// Strings are passed through byte for byte; invalid UTF-8 from the model survives into
// content, so serialize responses with nlohmann's error_handler_t::replace. Streaming deltas
// never end inside a UTF-8 sequence (except the final flush of a truncated one).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "chat/pythonic_call_parser.h"

namespace lfm::chat {

inline constexpr std::string_view kThinkOpen = "<think>";
inline constexpr std::string_view kThinkClose = "</think>";
inline constexpr std::string_view kToolCallStart = "<|tool_call_start|>";
inline constexpr std::string_view kToolCallEnd = "<|tool_call_end|>";

struct OutputParserOptions {
  bool parse_reasoning = true;
  // The generation prompt already ended with `<think>`, so the output begins inside reasoning.
  // Only meaningful with parse_reasoning.
  bool starts_in_reasoning = false;
  // Off: tool-call markers are ordinary content (e.g. a request that offered no tools).
  bool parse_tool_calls = true;
  // Prepended to the per-output counter; a server can make ids unique across requests with
  // e.g. "call_<request id>_".
  std::string tool_call_id_prefix = "call_";
  int max_nesting_depth = kDefaultToolCallMaxDepth;
};

struct ParsedOutput {
  std::string content;
  std::string reasoning_content;
  nlohmann::json tool_calls = nlohmann::json::array();
};

// One piece of streamed output. Events come in output order; consecutive text of the same
// kind produced by one feed() is merged into one event.
struct StreamEvent {
  enum class Kind { kContent, kReasoning, kToolCall };
  Kind kind = Kind::kContent;
  std::string text;       // kContent / kReasoning: the delta
  nlohmann::json tool_call;  // kToolCall: one complete call (its index is the count of earlier calls)
};

// Incremental parser: feed() text deltas split anywhere (mid-marker, mid-UTF-8), then
// finish() once. Text that could still turn into a marker, a whole tool-call block until its
// end marker, and whitespace that may yet be trimmed are held back. Concatenating all events
// gives exactly parse_assistant_output() of the concatenated input.
class StreamingOutputParser {
 public:
  explicit StreamingOutputParser(OutputParserOptions options = {});

  std::vector<StreamEvent> feed(std::string_view delta);
  // Flushes everything held back (an unterminated tool-call block becomes content).
  std::vector<StreamEvent> finish();

  bool finished() const { return finished_; }
  size_t tool_call_count() const { return tool_call_count_; }

 private:
  enum class State { kStart, kReasoning, kContent, kToolCall };

  void process(bool at_end, std::vector<StreamEvent>& events);
  // Each step consumes from buffer_ and returns false when it must wait for more input.
  bool step_start(bool at_end);
  bool step_reasoning(bool at_end, std::vector<StreamEvent>& events);
  bool step_content(bool at_end, std::vector<StreamEvent>& events);
  bool step_tool_call(bool at_end, std::vector<StreamEvent>& events);
  // Drops whitespace at the front of buffer_ while trimming is pending; false when buffer_
  // emptied before a non-space byte arrived.
  bool trim_pending_leading_space();
  void emit_text(StreamEvent::Kind kind, std::string_view text, std::vector<StreamEvent>& events);

  OutputParserOptions options_;
  State state_;
  std::string buffer_;  // received but not yet emitted
  bool trim_leading_space_ = false;
  size_t tool_call_end_search_from_ = 0;  // inside buffer_ while in kToolCall
  size_t tool_call_count_ = 0;
  bool finished_ = false;
};

// One-shot parse of a complete output.
ParsedOutput parse_assistant_output(std::string_view text, const OutputParserOptions& options = {});

// Appends streamed events to an accumulated result (content and reasoning concatenated,
// tool calls pushed in order).
void append_events(ParsedOutput& output, const std::vector<StreamEvent>& events);

// The OpenAI-style object for one parsed call: id, type "function", arguments as a JSON string.
nlohmann::json to_openai_tool_call(const ParsedToolCall& call, const std::string& id);

}  // namespace lfm::chat
