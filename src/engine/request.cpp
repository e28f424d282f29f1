#include "engine/request.h"

#include <cmath>

#include "core/error.h"

namespace lfm {

const char* drafter_name(Drafter d) {
  switch (d) {
    case Drafter::kNgram: return "ngram";
    case Drafter::kModel: return "model";
    case Drafter::kNone: break;
  }
  return "none";
}

Drafter parse_drafter(const std::string& name) {
  if (name == "none") return Drafter::kNone;
  if (name == "ngram") return Drafter::kNgram;
  if (name == "model") return Drafter::kModel;
  fail("speculative: unknown drafter '", name, "' (use none, ngram or model)");
}

const char* audio_out_mode_name(AudioOutMode m) {
  switch (m) {
    case AudioOutMode::kSequential: return "sequential";
    case AudioOutMode::kInterleaved: return "interleaved";
    case AudioOutMode::kNone: break;
  }
  return "none";
}

AudioOutMode parse_audio_out_mode(const std::string& name) {
  if (name == "none") return AudioOutMode::kNone;
  if (name == "sequential") return AudioOutMode::kSequential;
  if (name == "interleaved") return AudioOutMode::kInterleaved;
  fail("speech output: unknown generation mode '", name, "' (use sequential or interleaved)");
}

void AudioOutParams::validate() const {
  LFM_CHECK(std::isfinite(temperature) && temperature >= 0.0f && temperature <= 100.0f,
            "speech output: audio temperature ", temperature, " is not in [0, 100]");
  LFM_CHECK(top_k >= 0, "speech output: audio top_k ", top_k, " is negative");
}

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kCancelled: return "cancelled";
    case FinishReason::kError: return "error";
    case FinishReason::kNone: break;
  }
  return "none";
}

bool RequestStream::next(Event& ev) {
  std::unique_lock lock(mu_);
  if (done_taken_) return false;
  cv_.wait(lock, [&] { return !events_.empty(); });
  ev = std::move(events_.front());
  events_.pop_front();
  if (ev.kind == Event::Kind::kDone) done_taken_ = true;
  return true;
}

bool RequestStream::next_for(Event& ev, std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  if (done_taken_) return false;
  if (!cv_.wait_for(lock, timeout, [&] { return !events_.empty(); })) return false;
  ev = std::move(events_.front());
  events_.pop_front();
  if (ev.kind == Event::Kind::kDone) done_taken_ = true;
  return true;
}

bool RequestStream::finished() const {
  std::lock_guard lock(mu_);
  return done_taken_;
}

void RequestStream::cancel() {
  std::function<void()> wake;
  {
    std::lock_guard lock(mu_);
    cancel_ = true;
    wake = wake_;
  }
  if (wake) wake();
}

bool RequestStream::cancel_requested() const {
  std::lock_guard lock(mu_);
  return cancel_;
}

void RequestStream::push(Event ev) {
  {
    std::lock_guard lock(mu_);
    events_.push_back(std::move(ev));
  }
  cv_.notify_all();
}

void RequestStream::set_waker(std::function<void()> wake) {
  std::lock_guard lock(mu_);
  wake_ = std::move(wake);
}

}  // namespace lfm
