// Spoken chat (LFM2-Audio speech output) across turns, the same for every front end (`lfm serve`'s
// chat completions, `lfm chat --audio-out`, the C API): a spoken reply is recorded as the model
// made it — text ids and audio frames in the order generated — and put back, as it was, at its
// assistant turn's place in a later conversation's prompt, so the prefix cache finds the spoken
// turn like text (the engine keys each frame's position by its codes: engine/media_keys.h).
//
// In a conversation (ChatTurnInput::messages) an assistant message's content part
// {"type": "spoken"} takes the next of ChatTurnInput::spoken; the template renders it as the
// audio placeholder (like an audio clip's part), which the chat turn then replaces by the reply's
// ids, its frames' positions going to Request::audio_frames.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/request.h"

namespace lfm {

struct SpeechVoice;

// Spoken chat's system message, "Respond with interleaved text and audio. Use the <voice> voice."
// (the checkpoints' interleaved prompt with the voice phrased as their TTS prompts phrase it), put
// first unless the conversation has a system message of its own (then used as it is).
void add_spoken_chat_prompt(nlohmann::ordered_json& messages, const SpeechVoice& voice);

struct SpokenReply {
  // A position of `ids` that holds an audio frame (the next of `codes`' frames).
  static constexpr int32_t kFrame = -1;
  int64_t codebooks = 0;
  int64_t audio_vocab = 0;     // codes are in [0, audio_vocab)
  std::vector<int32_t> ids;    // the reply as generated: a text id or kFrame per position
  std::vector<int32_t> codes;  // [frames, codebooks], the frames in order (the end-of-audio frame too)
  std::string transcript;      // the reply's text (what the front end showed)
  int64_t frames() const { return codebooks > 0 ? static_cast<int64_t>(codes.size()) / codebooks : 0; }
  size_t bytes() const { return sizeof(SpokenReply) + (ids.size() + codes.size()) * sizeof(int32_t) + transcript.size(); }
};

// Builds a request's SpokenReply from its events, in order: kToken adds its id and text, kAudio
// with codes adds a frame (an event with samples only adds nothing), kDone adds its text and, when
// the request stopped at a stop id (finish kStop without a stop string), drops that last id: the
// template writes the turn's end itself.
class SpokenReplyRecorder {
 public:
  SpokenReplyRecorder(int64_t codebooks, int64_t audio_vocab);
  void add(const Event& ev);
  const SpokenReply& reply() const { return reply_; }
  SpokenReply take() { return std::move(reply_); }

 private:
  SpokenReply reply_;
  bool last_is_token_ = false;
};

// A prompt with spoken replies put in: `ids` with each reply's positions, and the frames for
// Request::audio_frames (one AudioOutFrames per run of consecutive frames).
struct SpokenPrompt {
  std::vector<int32_t> ids;
  std::vector<std::shared_ptr<const AudioOutFrames>> frames;
  // Where each of the input's placeholders that stayed (the clips') is in `ids`, in order.
  std::vector<int64_t> kept;
};

// Replaces, in `ids`, the occurrences of `placeholder` that `is_spoken` marks (is_spoken[i] for the
// i-th occurrence; as many entries as occurrences) by the next reply's ids, its frames' positions
// holding `frame_id` (any valid id: their rows are the frames' embeddings). Other occurrences stay
// (the clips', laid out afterwards: see shift_frames). Throws lfm::Error when the counts differ or a
// reply is empty or malformed (codes not whole frames, a code outside the audio vocabulary, more
// kFrame ids than frames).
SpokenPrompt put_spoken_replies(std::span<const int32_t> ids, int32_t placeholder, const std::vector<bool>& is_spoken,
                                std::span<const std::shared_ptr<const SpokenReply>> replies, int32_t frame_id);

// After the kept placeholders were each expanded into `tokens[i]` positions (expand_audio), the
// frames' positions moved: the new AudioOutFrames.
std::vector<std::shared_ptr<const AudioOutFrames>> shift_frames(const SpokenPrompt& p, std::span<const int64_t> tokens);

}  // namespace lfm
