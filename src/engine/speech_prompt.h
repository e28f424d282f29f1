// Speech output (LFM2-Audio / LFM2.5-Audio) as the checkpoints are asked for it: the voices their
// system prompts define, the TTS turn and the spoken-chat system prompt, rendered through the
// model's chat template like every chat turn (engine/chat_turn.h), and the content hash of
// spoken frames already in a conversation (AudioOutFrames, engine/request.h).
//
// Prompts (liquid-audio's examples and the model cards):
//   TTS          system "Perform TTS. Use the <voice> voice.", user = the text, the assistant
//                turn opened; generated in AudioOutMode::kSequential (the model opens the audio
//                with <|audio_start|> and speaks the text).
//   spoken chat  system "Respond with interleaved text and audio.", the conversation, generated
//                in AudioOutMode::kInterleaved (text and audio alternate).
// Voices: the four the checkpoints were trained with — "US male", "US female", "UK male",
// "UK female". Their ids here are us_male, us_female, uk_male, uk_female; parse_voice takes either
// form in any case, with spaces, '-' or '_' between the words. Other names (OpenAI's alloy, echo,
// …) are refused with the list: the model knows no other voice, and mapping them would pretend.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "engine/chat_turn.h"
#include "engine/request.h"

namespace lfm {

struct SpeechVoice {
  const char* id;           // "us_female"
  const char* prompt_name;  // "US female": as it stands in the system prompt
};

// The four voices, in the order above.
std::span<const SpeechVoice> speech_voices();
// "us_male, us_female, uk_male, uk_female": for messages and help texts.
std::string speech_voice_list();
// The voice `name` stands for (see above); throws lfm::Error naming the value and listing the
// voices when it is none of them.
const SpeechVoice& parse_voice(const std::string& name);

inline constexpr const char* kDefaultVoice = "us_female";
inline constexpr const char* kSpokenChatSystemPrompt = "Respond with interleaved text and audio.";

// "Perform TTS. Use the US female voice."
std::string tts_system_prompt(const SpeechVoice& voice);
// The TTS conversation: the system prompt for `voice`, then `text` as the user's message.
nlohmann::ordered_json tts_messages(const std::string& text, const SpeechVoice& voice);
// The conversation with the spoken-chat system prompt first: `messages` must not begin with a
// system message of their own (the checkpoints know this one only; an lfm::Error says so).
nlohmann::ordered_json spoken_chat_messages(const nlohmann::ordered_json& messages);

// The TTS turn rendered by the model's template (ChatTurnBuilder::build: generation prompt added,
// <|im_end|> a stop id). Throws lfm::Error for empty text.
ChatTurn tts_turn(const ChatTurnBuilder& chat, const std::string& text, const SpeechVoice& voice);
// A request for that turn: its prompt and stop ids, audio_out in kSequential mode with `audio`'s
// sampling (mode set here), the text's sampling from `sampling`.
Request tts_request(const ChatTurnBuilder& chat, const std::string& text, const SpeechVoice& voice,
                    const AudioOutParams& audio, const SamplingParams& sampling);

// The hash of spoken frames (AudioOutFrames::hash): SHA-256 (engine/content_hash.h) of a domain
// tag, the frame and codebook counts and the codes [frames, codebooks].
uint64_t audio_frames_hash(int64_t frames, int64_t codebooks, std::span<const int32_t> codes);
// AudioOutFrames for `codes` [frames, codebooks] placed at `position`, hash filled in. Throws
// lfm::Error when the size is not a whole number of frames or a code is outside
// [0, audio_vocab_size).
std::shared_ptr<const AudioOutFrames> make_audio_out_frames(int64_t position, int64_t codebooks,
                                                            std::vector<int32_t> codes, int64_t audio_vocab_size);

}  // namespace lfm
