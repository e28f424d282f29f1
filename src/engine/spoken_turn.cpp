#include "engine/spoken_turn.h"

#include <algorithm>

#include "core/error.h"
#include "engine/speech_prompt.h"

namespace lfm {

void add_spoken_chat_prompt(nlohmann::ordered_json& messages, const SpeechVoice& voice) {
  for (const auto& m : messages)
    if (m.is_object() && m.contains("role") && m["role"] == "system") return;
  nlohmann::ordered_json sys = {
      {"role", "system"}, {"content", std::string(kSpokenChatSystemPrompt) + " Use the " + voice.prompt_name + " voice."}};
  messages.insert(messages.begin(), std::move(sys));
}

SpokenReplyRecorder::SpokenReplyRecorder(int64_t codebooks, int64_t audio_vocab) {
  LFM_CHECK(codebooks > 0 && audio_vocab > 0, "spoken reply: ", codebooks, " codebooks and an audio vocabulary of ",
            audio_vocab, " (a model without speech output?)");
  reply_.codebooks = codebooks;
  reply_.audio_vocab = audio_vocab;
}

void SpokenReplyRecorder::add(const Event& ev) {
  switch (ev.kind) {
    case Event::Kind::kToken:
      reply_.ids.push_back(ev.token);
      reply_.transcript += ev.text;
      last_is_token_ = true;
      break;
    case Event::Kind::kAudio:
      if (ev.audio_codes.empty()) break;  // samples only
      LFM_CHECK(static_cast<int64_t>(ev.audio_codes.size()) == reply_.codebooks, "spoken reply: a frame of ",
                ev.audio_codes.size(), " codes, not ", reply_.codebooks);
      reply_.ids.push_back(SpokenReply::kFrame);
      reply_.codes.insert(reply_.codes.end(), ev.audio_codes.begin(), ev.audio_codes.end());
      last_is_token_ = false;
      break;
    case Event::Kind::kDone:
      reply_.transcript += ev.text;
      if (ev.finish == FinishReason::kStop && ev.stop.empty() && last_is_token_) reply_.ids.pop_back();
      last_is_token_ = false;
      break;
  }
}

SpokenPrompt put_spoken_replies(std::span<const int32_t> ids, int32_t placeholder, const std::vector<bool>& is_spoken,
                                std::span<const std::shared_ptr<const SpokenReply>> replies, int32_t frame_id) {
  const size_t occurrences = static_cast<size_t>(std::count(ids.begin(), ids.end(), placeholder));
  LFM_CHECK(occurrences == is_spoken.size(), "spoken turns: the prompt has ", occurrences, " audio placeholders for ",
            is_spoken.size(), " audio parts; the text may not contain the placeholder itself");
  const size_t wanted = static_cast<size_t>(std::count(is_spoken.begin(), is_spoken.end(), true));
  LFM_CHECK(wanted == replies.size(), "spoken turns: ", wanted, " spoken parts for ", replies.size(), " spoken replies");
  SpokenPrompt out;
  out.ids.reserve(ids.size());
  size_t occurrence = 0, next_reply = 0;
  for (int32_t id : ids) {
    if (id != placeholder || !is_spoken[occurrence++]) {
      if (id == placeholder) out.kept.push_back(static_cast<int64_t>(out.ids.size()));
      out.ids.push_back(id);
      continue;
    }
    const size_t r = next_reply++;
    const SpokenReply* reply = replies[r].get();
    LFM_CHECK(reply && !reply->ids.empty(), "spoken turns: spoken reply ", r, " is empty");
    const int64_t C = reply->codebooks, frames = reply->frames();
    LFM_CHECK(C > 0 && static_cast<int64_t>(reply->codes.size()) == frames * C, "spoken turns: spoken reply ", r, " holds ",
              reply->codes.size(), " codes, not whole frames of ", C);
    int64_t frame = 0, run_start = -1;
    auto close_run = [&](int64_t end_frame) {
      if (run_start < 0) return;
      const int64_t position = static_cast<int64_t>(out.ids.size()) - (end_frame - run_start);
      std::vector<int32_t> codes(reply->codes.begin() + run_start * C, reply->codes.begin() + end_frame * C);
      out.frames.push_back(make_audio_out_frames(position, C, std::move(codes), reply->audio_vocab));
      run_start = -1;
    };
    for (int32_t x : reply->ids) {
      if (x == SpokenReply::kFrame) {
        LFM_CHECK(frame < frames, "spoken turns: spoken reply ", r, " places more frames than its ", frames);
        if (run_start < 0) run_start = frame;
        ++frame;
        out.ids.push_back(frame_id);
      } else {
        close_run(frame);
        out.ids.push_back(x);
      }
    }
    close_run(frame);
    LFM_CHECK(frame == frames, "spoken turns: spoken reply ", r, " places ", frame, " of its ", frames, " frames");
  }
  return out;
}

std::vector<std::shared_ptr<const AudioOutFrames>> shift_frames(const SpokenPrompt& p, std::span<const int64_t> tokens) {
  LFM_CHECK(tokens.size() == p.kept.size(), "spoken turns: ", tokens.size(), " laid-out clips for ", p.kept.size(),
            " placeholders");
  std::vector<std::shared_ptr<const AudioOutFrames>> out;
  for (const auto& f : p.frames) {
    int64_t shift = 0;
    for (size_t i = 0; i < p.kept.size() && p.kept[i] < f->position; ++i) shift += tokens[i] - 1;
    if (shift == 0) {
      out.push_back(f);
      continue;
    }
    auto moved = std::make_shared<AudioOutFrames>(*f);
    moved->position += shift;
    out.push_back(std::move(moved));
  }
  return out;
}

}  // namespace lfm
