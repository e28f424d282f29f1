// What the C API's handles hold, and the helpers every lfm_* function uses: arguments checked,
// exceptions turned into a status and this thread's lfm_last_error() message, versioned structs
// read and written up to their struct_size.
#pragma once

#include <cstring>
#include <exception>
#include <list>
#include <memory>
#include <mutex>
#include <new>
#include <span>
#include <string>

#include "chat/output_parser.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "engine/chat_turn.h"
#include "engine/embedder.h"
#include "engine/engine.h"
#include "engine/image_prompt.h"
#include "kernels/backend.h"
#include <lfm/lfm.h>
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace lfm {
class ChatTemplate;
namespace grammar {
class TokenGrammar;
}
}  // namespace lfm

// One loaded model: what runs it and what reads its text. Shared with the engines made on it.
struct lfm_model_state {
  std::unique_ptr<lfm::ThreadPool> pool;
  std::unique_ptr<lfm::Backend> backend;
  std::unique_ptr<lfm::Model> model;
  std::unique_ptr<lfm::Tokenizer> tokenizer;    // null when the model ships none
  std::string tokenizer_error;                  // why there is none
  std::unique_ptr<lfm::ChatTemplate> chat_template;   // null without one
  // The vision side (LFM2-VL with a tokenizer); null: images are refused with image_error.
  std::shared_ptr<const lfm::ImagePromptSetup> image_setup;
  std::string image_error;
  // The speech side (LFM2-Audio with a tokenizer); null: audio is refused with audio_error.
  std::shared_ptr<const lfm::AudioPromptSetup> audio_setup;
  std::string audio_error;
  std::unique_ptr<lfm::ChatTurnBuilder> chat;       // with a tokenizer; lays out images
  std::unique_ptr<lfm::ChatTurnBuilder> chat_text;  // the same, leaving each image token as it is
  bool bf16_activations = false;                    // as loaded (a draft model is loaded alike)
  // Retrievers (capi_embed.cpp): the model's embedder, or null with embed_error saying why (a
  // model the encoder cannot run). Its encoder keeps scratch buffers: one call at a time.
  std::unique_ptr<lfm::Embedder> embedder;
  std::string embed_error;
  std::mutex embed_mu;
  ~lfm_model_state();
};

struct lfm_model {
  std::shared_ptr<lfm_model_state> state;
};

struct lfm_engine {
  std::shared_ptr<lfm_model_state> model;  // outlives the engine
  std::unique_ptr<lfm::Model> draft;       // the draft model (on the model's backend), or null
  std::unique_ptr<lfm::Engine> engine;     // destroyed first: it uses both
  // Compiled grammars by their GBNF text, most recently used first: a schema used again keeps
  // its mask cache (as lfm serve's GrammarCache).
  std::mutex grammar_mu;
  std::list<std::pair<std::string, std::shared_ptr<const lfm::grammar::TokenGrammar>>> grammars;
};

struct lfm_request {
  std::shared_ptr<lfm::RequestStream> stream;
  std::mutex mu;      // one reader at a time; the strings of the last event
  lfm::Event last;    // what the last lfm_event's pointers point into
  bool done = false;  // the DONE event was read
  // Chat requests: the reply parsed as it streams; the assistant message at DONE.
  std::unique_ptr<lfm::chat::StreamingOutputParser> parser;
  lfm::chat::ParsedOutput parsed;
  std::string message_json;
  std::vector<int32_t> top_ids;  // the last event's alternatives, as lfm_event points at them
  std::vector<float> top_lps;
};

namespace lfm::capi {

// Errors the C API reports with a status other than LFM_ERR_INTERNAL.
struct ApiError : Error {
  ApiError(lfm_status s, const std::string& msg) : Error(msg), status(s) {}
  lfm_status status;
};

void set_error(const std::string& message);
void clear_error();

// Runs `body`, mapping exceptions to statuses (ApiError: its own; EngineBusy: LFM_ERR_BUSY;
// lfm::Error and JSON errors: `fallback`; std::bad_alloc and the rest: LFM_ERR_INTERNAL).
lfm_status guard(lfm_status fallback, const auto& body) noexcept;
lfm_status to_status(std::exception_ptr e, lfm_status fallback) noexcept;

lfm_status guard(lfm_status fallback, const auto& body) noexcept {
  try {
    body();
    return LFM_OK;
  } catch (...) {
    return to_status(std::current_exception(), fallback);
  }
}

[[noreturn]] inline void fail(lfm_status s, const std::string& msg) { throw ApiError(s, msg); }
inline void require(bool ok, const char* what) {
  if (!ok) fail(LFM_ERR_INVALID_ARGUMENT, what);
}

// A caller's versioned struct read into a full one holding the defaults: its first struct_size
// bytes are taken (struct_size must be at least the size of the field itself).
template <class T>
T read_struct(const T* in, const T& defaults, const char* name) {
  T out = defaults;
  if (!in) return out;
  require(in->struct_size >= sizeof(size_t), (std::string(name) + ": struct_size is not set").c_str());
  std::memcpy(&out, in, in->struct_size < sizeof(T) ? in->struct_size : sizeof(T));
  out.struct_size = sizeof(T);
  return out;
}
// A full struct written into the caller's, up to its struct_size.
template <class T>
void write_struct(T* out, const T& full, const char* name) {
  require(out != nullptr, (std::string(name) + ": the output struct is NULL").c_str());
  const size_t n = out->struct_size;
  require(n >= sizeof(size_t), (std::string(name) + ": struct_size is not set").c_str());
  std::memcpy(reinterpret_cast<char*>(out) + sizeof(size_t), reinterpret_cast<const char*>(&full) + sizeof(size_t),
              (n < sizeof(T) ? n : sizeof(T)) - sizeof(size_t));
}

const lfm_model_state& model_state(const lfm_model* m);
// The model's tokenizer (LFM_ERR_UNSUPPORTED when it has none).
const Tokenizer& model_tokenizer(const lfm_model_state& s);
// `text` parsed as JSON in its key order, linearly, nesting and keys per object capped
// (parse_request_json); LFM_ERR_INVALID_ARGUMENT naming `what` when it is not; `array`: it must
// be an array.
nlohmann::ordered_json parse_json(const char* text, const char* what, bool array);

struct PendingImage;  // capi_images.cpp, below

// Chat (capi_chat.cpp). The turn's input from JSON messages and tools (tools_json may be NULL),
// tool_choice (NULL: auto) and the prompt's images: image parts become {"type": "image"} and,
// with `images` (else they are left out), their images in order: data URIs decoded, the others
// taken from `images` in turn (all of which must be used).
// Audio parts likewise: {"type": "audio"} takes the next of `audios` (all of which must be used),
// {"type": "input_audio", …} carries its own clip; with `audios` null they are left as placeholders.
ChatTurnInput chat_input(const lfm_model_state& s, const char* messages_json, const char* tools_json,
                         const char* tool_choice, std::vector<PendingImage>* images,
                         std::vector<std::vector<float>>* audios = nullptr, double max_audio_seconds = 0);
// A chat turn over JSON messages and tools, images laid out (`laid_out`) or each left as the
// image token once.
ChatTurn chat_turn(const lfm_model_state& s, const ChatTurnInput& in, bool laid_out);
// The chat reply's parser (the turn's options, the forced prefix fed) for a request's stream.
void start_chat_parser(lfm_request& r, const ChatTurn& turn);
// Feeds one event's text to the request's parser; at DONE, writes r.message_json.
void parse_chat_event(lfm_request& r);

// Images (capi_images.cpp). An image read and its header checked, not decoded yet: `bytes` are
// `owned` or the caller's (lfm_prompt.image_data); `what` names it in errors.
struct PendingImage {
  std::vector<uint8_t> owned;
  std::span<const uint8_t> bytes;
  image::ImageHeader header;
  std::string what;
};
// The prompt's images, in order (LFM_ERR_UNSUPPORTED when the model takes none,
// LFM_ERR_INVALID_ARGUMENT naming an image that cannot be read or whose header is refused).
std::vector<PendingImage> prompt_images(const lfm_model_state& s, const lfm_prompt& p);
// The images decoded, in order, once their memory (image/image_memory.h) is within the per-request
// limit (LFM_ERR_INVALID_ARGUMENT saying what they need, before any is decoded).
std::vector<image::Image> decode_images(const lfm_model_state& s, std::vector<PendingImage> pending);
// The model's vision side (LFM_ERR_UNSUPPORTED saying why when it has none).
const ImagePromptSetup& image_setup(const lfm_model_state& s);
// The image behind a chat image part's URL: a data:image/...;base64 URI (`where` names the part).
PendingImage image_from_data_uri(const std::string& url, const std::string& where);

// Audio (capi_audio.cpp). The model's speech side (LFM_ERR_UNSUPPORTED saying why when it has none),
// and why the model takes no audio (empty when it does).
const AudioPromptSetup& audio_setup(const lfm_model_state& s);
void load_audio_setup(lfm_model_state& s);
// The prompt's clips, decoded to mono at the model's rate, in order (LFM_ERR_UNSUPPORTED when the
// model takes none, LFM_ERR_INVALID_ARGUMENT naming a clip that cannot be read or decoded).
std::vector<std::vector<float>> prompt_audio(const lfm_model_state& s, const lfm_prompt& p);
// The clip of a chat input_audio part ({"data": base64, "format": …}; `where` names the part).
std::vector<float> audio_from_part(const lfm_model_state& s, const nlohmann::ordered_json& input_audio,
                                   const std::string& where, double max_seconds);
// The longest clip accepted when the caller says 0.
inline constexpr double kDefaultMaxAudioSeconds = 600;

// Speech output (capi_speech.cpp, lfm_prompt [5]). Whether the prompt asks for any; the spoken-chat
// system message of an interleaved chat (unless it has one); the TTS turn of speak_text; audio_out
// and earlier frames onto the request (LFM_ERR_UNSUPPORTED for a model that does not speak,
// LFM_ERR_INVALID_ARGUMENT naming a bad field).
bool wants_speech(const lfm_prompt& p);
void prepare_spoken_chat(const lfm_prompt& p, ChatTurnInput& in);
ChatTurn speak_turn(const lfm_model_state& s, const lfm_prompt& p);
void apply_speech(const lfm_model_state& s, const lfm_prompt& p, Request& r);

// Structured output (capi_structured.cpp): the compiled grammar the params ask for, or null. With
// `turn` (a chat request), strict tools and a required or named tool_choice constrain the tool
// calls too (engine/tool_grammar.h).
std::shared_ptr<const grammar::TokenGrammar> request_grammar(lfm_engine& e, const lfm_sampling_params& sp,
                                                             const ChatTurnInput* turn = nullptr);

}  // namespace lfm::capi
