// A request's sampled tokens and its end, on the scheduler thread: the grammar's step, the token
// event (text through the detokenizer and stop strings, speech after text), the finish checks,
// and the DONE event that every request gets exactly once (engine.cpp runs the steps).
#include <algorithm>

#include "engine/engine.h"
#include "engine/engine_active.h"
#include "model/waveform_decoder.h"

namespace lfm {

using Clock = std::chrono::steady_clock;

void Engine::after_token(Active& a, const std::function<SampleResult()>& choose) {
  // Sampling, the grammar's step, the detokenizer and stop strings all see this request's input.
  guarded(a, "sampling", [&] {
    if (a.matcher) prepare_mask(a);
    SampleResult r = choose();
    if (a.matcher && !accept_grammar(a, r.token)) return;
    deliver(a, std::move(r));
  });
}

void Engine::deliver(Active& a, SampleResult r) {
  const auto now = Clock::now();
  if (a.n_generated == 0) a.usage.first_token_seconds = seconds_between(a.submitted, now);
  a.tokens.push_back(r.token);
  ++a.n_generated;
  ++totals_.generated_tokens;
  Event ev;
  ev.kind = Event::Kind::kToken;
  ev.token = r.token;
  ev.logprob = r.logprob;
  ev.top_logprobs = std::move(r.top);
  const bool stop_id = std::find(a.stop_ids.begin(), a.stop_ids.end(), r.token) != a.stop_ids.end();
  if (!stop_id && a.detok) ev.text = a.stops->push(a.detok->push(r.token));
  a.stream->push(std::move(ev));
  if (a.speech && !stop_id) speech_after_text(a, r.token);
  if (stop_id) {
    finish(a, FinishReason::kStop);
  } else if (a.stops->matched()) {
    finish(a, FinishReason::kStop);
  } else if (static_cast<int64_t>(a.tokens.size()) >= a.limit) {
    finish(a, FinishReason::kLength);
  } else if (a.matcher && a.matcher->finished()) {
    finish(a, FinishReason::kStop);  // the grammar's text is complete and nothing can follow
  }
}

void Engine::finish(Active& a, FinishReason why, std::string error, std::string text) {
  if (a.finished) return;
  a.finished = true;
  if (a.seq) {
    cache_->close(a.seq);
    a.seq = nullptr;
  }
  close_draft(a);
  Event ev;
  ev.kind = Event::Kind::kDone;
  // A waveform in progress: its tail comes with the end (only when the request ended normally).
  if (a.speech && a.speech->detok_stream >= 0) {
    try {
      std::vector<float> tail = end_waveform(a);
      if (why == FinishReason::kStop || why == FinishReason::kLength) {
        a.usage.audio_seconds += static_cast<double>(tail.size()) / model_.detokenizer()->sample_rate();
        ev.audio = std::move(tail);
        ev.sample_rate = model_.detokenizer()->sample_rate();
      }
    } catch (...) {
      if (why != FinishReason::kError) {
        why = FinishReason::kError;
        error = "engine: the waveform's end failed: " + exception_text(std::current_exception());
      }
    }
  }
  ev.finish = why;
  ev.error = std::move(error);
  // The last text: finish() must push its DONE event whatever happens, so a failure here ends
  // the request with that error instead.
  try {
    if (a.stops && a.stops->matched()) {
      ev.stop = a.stops->matched_string();
    } else if (why == FinishReason::kStop || why == FinishReason::kLength) {
      if (a.detok) text += a.stops->push(a.detok->finish());
      text += a.stops->flush();
    }
  } catch (...) {
    why = ev.finish = FinishReason::kError;
    ev.error = "engine: the last text failed: " + exception_text(std::current_exception());
    text.clear();
  }
  ev.text = std::move(text);
  ev.request_error = why == FinishReason::kError && a.request_error;
  a.usage.completion_tokens = a.n_generated;
  a.usage.total_seconds = seconds_between(a.submitted, Clock::now());
  ev.usage = a.usage;
  totals_.prompt_tokens += a.n_prompt;
  if (why == FinishReason::kCancelled)
    ++totals_.cancelled;
  else if (why == FinishReason::kError)
    ++totals_.failed;
  else
    ++totals_.finished;
  a.stream->set_waker(nullptr);
  a.stream->push(std::move(ev));
  {
    std::lock_guard s(stats_mu_);
    streams_.erase(a.id);
    --outstanding_;
    if (!a.admitted) --queued_;
  }
}

}  // namespace lfm
