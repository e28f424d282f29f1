// The tool-call / reasoning output parser on arbitrary model output: one-shot, and streamed in
// chunks whose sizes come from the input's first byte. The streamed events must concatenate to
// exactly the one-shot result (the parser's documented contract); a difference aborts.
#include <cstdlib>

#include "chat/output_parser.h"
#include "core/error.h"
#include "fuzz_util.h"

namespace {

// Raw model bytes may put invalid UTF-8 into a tool name: replaced, as the server and CLI print it.
std::string dump(const nlohmann::json& j) { return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace); }

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const size_t chunk = 1 + data[0] % 7;
  const std::string_view text = lfm::fuzz::as_text(data + 1, size - 1);
  for (bool reasoning : {true, false}) {
    lfm::chat::OutputParserOptions opt;
    opt.parse_reasoning = reasoning;
    const lfm::chat::ParsedOutput whole = lfm::chat::parse_assistant_output(text, opt);
    lfm::chat::StreamingOutputParser stream(opt);
    lfm::chat::ParsedOutput pieces;
    for (size_t i = 0; i < text.size(); i += chunk) lfm::chat::append_events(pieces, stream.feed(text.substr(i, chunk)));
    lfm::chat::append_events(pieces, stream.finish());
    if (pieces.content != whole.content || pieces.reasoning_content != whole.reasoning_content ||
        dump(pieces.tool_calls) != dump(whole.tool_calls))
      std::abort();
  }
  return 0;
}
