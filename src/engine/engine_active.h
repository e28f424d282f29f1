// The scheduler's record of one request (engine-internal: shared by the engine*.cpp files only).
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <random>
#include <unordered_map>
#include <vector>

#include "engine/engine.h"
#include "grammar/grammar_matcher.h"
#include "engine/ngram_drafter.h"
#include "engine/stop_strings.h"
#include "model/audio_model.h"
#include "model/vision_model.h"
#include "tokenizer/streaming_detokenizer.h"

namespace lfm {

inline double seconds_between(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// An exception's message (engine_failures.cpp), whatever its type.
std::string exception_text(const std::exception_ptr& e);

struct Engine::Active {
  uint64_t id = 0;
  Request req;
  std::shared_ptr<RequestStream> stream;
  std::vector<int32_t> tokens;  // prompt, then every generated id
  int64_t n_prompt = 0;
  int64_t n_generated = 0;
  int64_t limit = 0;            // most tokens in all (prompt + generated)
  std::vector<int32_t> stop_ids;
  Sequence* seq = nullptr;      // while running
  int64_t n_fed = 0;            // tokens in the sequence's state
  bool admitted = false, finished = false;
  bool request_error = false;   // ended by an error of its own input (Event::request_error)
  // Its next step is one decode token (or a verification): everything but the last token is in
  // the state, and that token was generated (a resumed request recomputes its tokens as prompt).
  bool decoding() const { return n_generated > 0 && static_cast<int64_t>(tokens.size()) - n_fed == 1; }
  std::unique_ptr<Sampler> sampler;
  std::vector<LogitEdit> edits;  // this step's sampler edits, for the step's shortlist
  ShortlistRequest shortlist;
  std::unique_ptr<StreamingDetokenizer> detok;
  std::unique_ptr<StopStrings> stops;
  Usage usage;
  std::chrono::steady_clock::time_point submitted;
  // Speculative decoding: most drafts per step (0: off), the adaptive length, and this step's
  // verification tokens (the last sampled token, then the drafts; empty: a plain step). With a
  // draft model: its sequence (every token but the last sampled one, once caught up), whether a
  // chain of this step's drafts is open in it, and for a non-plain-greedy request the sampler the
  // drafts are drawn with and each draft's distribution q.
  int64_t max_drafts = 0;
  std::unique_ptr<DraftLength> draft_len;
  std::vector<int32_t> verify;
  Sequence* draft_seq = nullptr;
  bool draft_chain = false;
  std::optional<Sampler> draft_sampler;
  std::vector<TokenProbs> draft_q;
  // Structured output: the grammar's state after every generated token, and the mask of the
  // next token (mask_ready: filled for the current state, e.g. while the step ran).
  std::unique_ptr<grammar::GrammarMatcher> matcher;
  std::vector<uint64_t> mask;
  bool mask_ready = false;
  bool drafts_forced = false;  // this step's drafts are the grammar's forced text (jump-forward)
  std::unique_ptr<DraftLength> forced_len;  // how much forced text to draft, from what was accepted
  // Images and audio: the prompt as the state cache keys it (each image or audio token keyed by
  // its medium's content, engine_images.cpp; empty without either), and every image tile's and
  // audio clip's rows with their embeddings once encoded.
  std::vector<int32_t> prompt_keys;
  struct TileRows {
    const ImageInput::Tile* tile = nullptr;  // an image tile, or
    const AudioInput* clip = nullptr;        // an audio clip
    uint64_t media_hash = 0;                 // its image's or clip's content hash
    int tile_index = 0;                      // the tile's index in its image (0 for a clip)
    std::shared_ptr<const std::vector<float>> embeds;  // [tokens(), hidden]
    int64_t position() const { return tile ? tile->position : clip->position; }
    int64_t tokens() const { return tile ? tile->tokens : clip->tokens; }
  };
  std::vector<TileRows> tiles;
  // An encoding in progress (engine_images.cpp), possibly over several steps: image tiles by the
  // vision tower or audio clips by the speech encoder (one kind per encoding), and the rows it
  // covers (indices into `tiles`, in its order).
  std::unique_ptr<VisionEncoding> encoding;
  std::unique_ptr<AudioEncoding> audio_encoding;
  std::vector<size_t> encoding_tiles;
  // Speech output (engine_speech.cpp): whether the next output is an audio frame, the interleaved
  // run's steps left, whether interleaved text is over, the codes' generator, and every audio
  // frame's codes by prompt/sequence position (earlier spoken turns and generated frames: their
  // positions hold frame keys in `tokens`/`prompt_keys`, negative like media keys, and take the
  // sum of their codes' embeddings as input).
  struct Speech {
    bool audio = false;
    int64_t left = 0;
    bool text_done = false;
    std::mt19937_64 rng;
    std::unordered_map<int64_t, std::vector<int32_t>> frames;
    int detok_stream = -1;   // its waveform stream in the engine's detokenizer (-1: none)
    bool audio_ended = true;  // no frame since the last end-of-audio frame (the waveform is flushed)
  };
  std::unique_ptr<Speech> speech;
};

}  // namespace lfm
