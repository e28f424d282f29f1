// What a front end submits to the Engine and what it gets back.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "engine/audio_input.h"
#include "engine/image_input.h"
#include "engine/sampler.h"

namespace lfm::grammar {
class TokenGrammar;
}

namespace lfm {

// Who proposes the tokens a speculative step verifies.
enum class Drafter {
  kNone,
  kNgram,  // prompt lookup in the request's own prompt and output (engine/ngram_drafter.h)
  kModel,  // the engine's draft model (a smaller or quantized model with the same tokenizer)
};
const char* drafter_name(Drafter d);  // "none", "ngram", "model"
// "none", "ngram", "model" (case-sensitive); throws lfm::Error naming the bad value.
Drafter parse_drafter(const std::string& name);

// Speech output (LFM2-Audio): whether the model's turn may speak, and how its audio is sampled.
// kSequential: text until the model emits audio_start_token_id, then audio frames until the
// end-of-audio frame, then text again (TTS: the model starts speaking at once). kInterleaved: text
// and audio alternate in fixed runs (interleaved_n_text tokens, interleaved_n_audio frames) until
// text_end_token_id ends the text, then audio alone; the end-of-sequence id ends the turn. Each
// frame is one backbone step followed by the depth transformer's `codebooks` steps, one code each.
enum class AudioOutMode { kNone, kSequential, kInterleaved };
const char* audio_out_mode_name(AudioOutMode m);  // "none", "sequential", "interleaved"
AudioOutMode parse_audio_out_mode(const std::string& name);  // throws lfm::Error naming a bad value

struct AudioOutParams {
  AudioOutMode mode = AudioOutMode::kNone;
  // Each code is drawn from the depth transformer's logits: greedy when temperature <= 0 or
  // top_k == 1, else softmax(logits / temperature) over the top_k best (0: all), from the
  // request's seeded generator (SamplingParams::seed), after the text's draws.
  float temperature = 0.0f;
  int top_k = 0;
  // Decode frames to a waveform (the model's detokenizer, streamed in Event::audio as frames
  // come); false: codes only (Event::audio_codes).
  bool waveform = true;
  // Sequential only: the prompt ends with <|audio_start|> and the model speaks from its first
  // step, exactly as if it had generated that token itself (TTS where the text must be spoken).
  bool audio_first = false;
  void validate() const;  // throws lfm::Error naming the first bad field
};

// Audio frames already in the conversation (an earlier spoken turn): each of `frames` prompt
// positions from `position` on takes the sum of its codes' audio embeddings instead of a token's.
// codes: [frames, codebooks], every code in [0, audio_vocab_size). Shared, immutable.
struct AudioOutFrames {
  int64_t position = 0;
  int64_t frames = 0;
  std::vector<int32_t> codes;
  uint64_t hash = 0;  // of the codes (engine/speech_prompt.h): keys the positions in the prefix cache
};

struct Request {
  std::vector<int32_t> prompt;      // token ids, at least one
  SamplingParams sampling;
  int64_t max_tokens = -1;          // most tokens to generate; -1: until the context is full
  std::vector<int32_t> stop_ids;    // generation ends when one is sampled (its text is not emitted)
  std::vector<std::string> stop;    // generation ends when the text contains one (never emitted)
  bool ignore_eos = false;          // do not stop at the model's end-of-sequence ids
  std::vector<int32_t> show_special;  // special ids whose text is emitted anyway (e.g. tool-call markers)
  // Speculative decoding: a drafter proposes up to max_drafts tokens (at most the engine's room,
  // EngineOptions::state.draft_tokens; adapting to what gets accepted) and one step verifies them.
  // Greedy output is bit for bit the same as without; sampled output has the same distribution
  // (the rejection rule in Sampler::verify). kModel needs an engine with a draft model.
  Drafter drafter = Drafter::kNone;
  int64_t max_drafts = 8;
  // Structured output: every generated token keeps the text a prefix of the grammar's language
  // (Engine::compile_grammar), in every sampling mode; the end-of-sequence and stop ids are
  // allowed only where the text is complete, and generation stops when nothing can follow.
  std::shared_ptr<const grammar::TokenGrammar> grammar;
  // Jump-forward: where the grammar forces the next text (a property name, a closing bracket),
  // that text, tokenized, is drafted and verified in one step (it needs the engine's room for
  // drafts, EngineOptions::state.draft_tokens). Greedy output is unchanged; sampled output keeps
  // its distribution (the drafts are checked like any other).
  bool jump_forward = true;
  // Images (LFM2-VL): each one's tiles are encoded by the model's vision tower and their
  // embeddings take the place of the tile's image tokens in the prompt (expand_images lays the
  // prompt out). Needs a model with a vision tower.
  std::vector<std::shared_ptr<const ImageInput>> images;
  // Audio (LFM2-Audio): each clip is encoded by the model's speech encoder and its rows take the
  // place of the clip's audio tokens in the prompt (expand_audio lays the prompt out). Needs a
  // model with a speech encoder.
  std::vector<std::shared_ptr<const AudioInput>> audios;
  // Speech output (LFM2-Audio): needs a model with the audio-output head (Model::speech_out) and,
  // for waveforms, a detokenizer. Earlier spoken turns in the prompt go in audio_frames.
  AudioOutParams audio_out;
  std::vector<std::shared_ptr<const AudioOutFrames>> audio_frames;
};

enum class FinishReason { kNone, kStop, kLength, kCancelled, kError };
const char* finish_reason_name(FinishReason r);  // "stop", "length", "cancelled", "error"

struct Usage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t cached_tokens = 0;       // prompt tokens taken from the prefix cache
  double queue_seconds = 0;        // submit → first scheduled
  double first_token_seconds = 0;  // submit → first token
  double total_seconds = 0;        // submit → finish
  int64_t preemptions = 0;
  int64_t prefill_steps = 0;       // steps that fed part of the prompt (chunked prefill)
  int64_t drafted_tokens = 0;      // speculative decoding: tokens drafted and verified
  int64_t accepted_tokens = 0;     // of those, accepted (each one a token without its own step)
  int64_t verify_steps = 0;        // steps that verified drafts
  int64_t image_tiles = 0;          // image tiles encoded for this request (not found already encoded)
  int64_t audio_clips = 0;          // audio clips encoded for this request (likewise)
  double encode_seconds = 0;        // time the vision tower / speech encoder spent on them
  int64_t encode_steps = 0;         // scheduler steps that ran part of their encoding
  int64_t audio_frames = 0;         // speech output: frames generated (the end-of-audio frame too)
  double audio_seconds = 0;         // and the waveform's duration
  double first_audio_seconds = 0;   // submit → first waveform samples (0: none)
};

struct Event {
  // kAudio comes only to requests with audio_out (speech output), between their kToken events.
  enum class Kind { kToken, kAudio, kDone };
  Kind kind = Kind::kToken;
  // kToken: one generated id and the text that became final with it (may be empty: text can be
  // held back by a stop string or an unfinished UTF-8 sequence, and stop ids add no text).
  int32_t token = -1;
  std::string text;
  float logprob = 0;
  std::vector<TokenLogprob> top_logprobs;
  // kAudio: one generated frame's codes [codebooks] (empty when the event only carries samples),
  // audio_end when that frame is the end-of-audio frame (its codes are all the end-of-audio
  // code), and waveform samples that became final (mono float, Event::sample_rate Hz; streamed:
  // the concatenation of a request's samples is its whole waveform). kDone may carry the last
  // samples (the detokenizer's tail).
  std::vector<int32_t> audio_codes;
  bool audio_end = false;
  std::vector<float> audio;
  int32_t sample_rate = 0;
  // kDone: why it ended, any remaining text, usage; `error` when kError.
  FinishReason finish = FinishReason::kNone;
  std::string stop;  // the stop string that ended it, if any
  std::string error;
  // kError caused by the request's own input (a grammar past the matcher's limits, an image the
  // vision tower refuses): a client error (HTTP 400), where other errors are the server's (500).
  bool request_error = false;
  Usage usage;
};

// The events of one request, in order, ending with exactly one kDone. Filled by the engine's
// scheduler thread, read by any one consumer thread.
class RequestStream {
 public:
  explicit RequestStream(uint64_t id) : id_(id) {}
  uint64_t id() const { return id_; }

  // Blocks until an event is available; false once the kDone event has been taken.
  bool next(Event& ev);
  // Like next(), waiting at most `timeout`; false on timeout too (see finished()).
  bool next_for(Event& ev, std::chrono::milliseconds timeout);
  bool finished() const;  // kDone taken
  // Asks the engine to stop the request; a kDone with kCancelled follows (unless it already ended).
  void cancel();
  bool cancel_requested() const;

  // Engine side.
  void push(Event ev);
  void set_waker(std::function<void()> wake);

 private:
  const uint64_t id_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Event> events_;
  bool done_taken_ = false;
  bool cancel_ = false;
  std::function<void()> wake_;
};

}  // namespace lfm
