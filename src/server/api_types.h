// OpenAI-compatible request parsing for `lfm serve`: JSON bodies → engine requests, every field
// checked with an error that names it. The HTTP layer (server.cpp) turns ApiError into OpenAI's
// error shape {"error": {"message", "type", "param", "code"}}.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/generation_config.h"
#include "engine/request.h"
#include "server/chat_audio.h"
#include "server/chat_images.h"

namespace lfm::server {

// `code`: OpenAI's string code ("context_length_exceeded", "model_not_found", …); empty: null.
class ApiError : public std::runtime_error {
 public:
  ApiError(int status, std::string message, std::string param = {}, std::string code = {})
      : std::runtime_error(message), status(status), param(std::move(param)), code(std::move(code)) {}
  int status;
  std::string param, code;
  int retry_after_s = 0;  // > 0: sent as Retry-After (a 429 or 503 the client may retry)
};

// Fields common to both endpoints, mapped onto the engine's request.
struct GenerationParams {
  Request req;                    // sampling, stop strings, max_tokens (prompt filled later)
  bool stream = false;
  bool include_usage = false;     // stream_options.include_usage
  bool logprobs = false;
  int top_logprobs = 0;
  std::optional<int64_t> max_tokens;
  // Choices returned per prompt, and candidates generated per prompt (best_of ≥ n: the n with
  // the highest cumulative logprob are returned; streaming needs best_of == n).
  int n = 1;
  int best_of = 1;
  // "speculative": {"draft": "ngram" | "model" | "none", "max_drafts": K}; unset: the server's
  // defaults (lfm serve --draft, --draft-model, --draft-max).
  std::optional<Drafter> drafter;
  std::optional<int64_t> max_drafts;
};

// POST /v1/chat/completions after validation. Messages are normalised for the model's template:
// content-part arrays joined into one string (or, in a user message with image or audio parts,
// kept as text, {"type": "image"} and {"type": "audio"} parts for the template, the images' URLs in
// `images`, the clips' data in `audios`), assistant
// tool_calls written back in LFM2's <|tool_call_start|>[name(arg=…)]<|tool_call_end|> form.
struct ChatParams {
  GenerationParams gen;
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  nlohmann::ordered_json tools;   // null when none (or tool_choice "none")
  std::string tool_choice = "auto";  // auto | none | required | a function name
  bool named_tool = false;
  nlohmann::ordered_json template_kwargs = nlohmann::ordered_json::object();
  std::vector<ImagePart> images;  // every image part, in the conversation's order
  std::vector<AudioPart> audios;  // every input_audio part, in the conversation's order
  // Assistant messages' "audio": {"id": …} (an earlier spoken reply, chat_speech.h), in order: each
  // such message's content is [{"type": "spoken"}] (its text is the stored reply's).
  struct SpokenRef {
    std::string id;
    std::string param;  // "messages[2].audio.id"
  };
  std::vector<SpokenRef> spoken;
};

// One prompt of a completions request: text, or token ids.
struct CompletionPrompt {
  std::optional<std::string> text;
  std::vector<int32_t> ids;
};

// POST /v1/completions after validation: one or more prompts (a string, token ids, or a list of
// either; choices are indexed prompt-major: prompt p's j-th choice is p * n + j).
struct CompletionParams {
  GenerationParams gen;
  std::vector<CompletionPrompt> prompts;
  bool echo = false;  // the prompt's text precedes each choice's text
};

inline constexpr int kMaxChoices = 16;  // n and best_of
inline constexpr size_t kMaxPrompts = 64;

// `vocab` bounds logit_bias token ids. `defaults` (generation_config.json) fill the sampling
// fields the body leaves unset; without them, OpenAI's defaults (temperature 1, top_p 1, …).
// `body` as parse_json_body (server_impl.h) parses it: ordered, and its objects capped in keys.
ChatParams parse_chat_request(const nlohmann::ordered_json& body, int64_t vocab, const SamplingDefaults& defaults = {});
CompletionParams parse_completion_request(const nlohmann::ordered_json& body, int64_t vocab,
                                          const SamplingDefaults& defaults = {});

// A JSON value as a Python literal (True/False/None, lists, dicts) for LFM2's Pythonic tool calls.
std::string python_literal(const nlohmann::ordered_json& v);

}  // namespace lfm::server
