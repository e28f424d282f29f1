#include "engine/embedding_service.h"

#include <algorithm>

#include "core/error.h"
#include "engine/engine.h"

namespace lfm {

EmbeddingService::EmbeddingService(Embedder& embedder, EmbeddingServiceOptions opt)
    : embedder_(embedder), opt_(opt) {
  LFM_CHECK(opt_.batch_tokens > 0 && opt_.max_texts_per_call > 0 && opt_.max_tokens_per_call > 0 &&
                opt_.max_queued_tokens > 0,
            "embedding service: every limit must be positive");
  worker_ = std::thread([this] { loop(); });
}

EmbeddingService::~EmbeddingService() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  worker_.join();
}

std::vector<Embedding> EmbeddingService::Call::wait() {
  std::unique_lock lock(mu);
  cv.wait(lock, [this] { return finished; });
  if (!error.empty()) throw Error(error);
  return std::move(results);
}

std::optional<std::vector<Embedding>> EmbeddingService::Call::wait_for(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu);
  if (!cv.wait_for(lock, timeout, [this] { return finished; })) return std::nullopt;
  if (!error.empty()) throw Error(error);
  return std::move(results);
}

void EmbeddingService::Call::cancel() {
  std::lock_guard lock(mu);
  cancelled = true;
}

std::shared_ptr<EmbeddingService::Call> EmbeddingService::submit(std::vector<PreparedText> texts,
                                                                 std::optional<Pooling> pooling) {
  LFM_CHECK(!texts.empty(), "embeddings: no input texts");
  LFM_CHECK(static_cast<int64_t>(texts.size()) <= opt_.max_texts_per_call, "embeddings: ", texts.size(),
            " texts in one call, past the limit of ", opt_.max_texts_per_call);
  int64_t tokens = 0;
  for (const PreparedText& t : texts) {
    LFM_CHECK(!t.ids.empty(), "embeddings: an input with no tokens");
    tokens += static_cast<int64_t>(t.ids.size());
  }
  LFM_CHECK(tokens <= opt_.max_tokens_per_call, "embeddings: ", tokens, " tokens in one call, past the limit of ",
            opt_.max_tokens_per_call);
  const bool per_token = pooling.value_or(embedder_.config().pooling) == Pooling::kNone;
  const int64_t floats = (per_token ? tokens : static_cast<int64_t>(texts.size())) * embedder_.dim();
  LFM_CHECK(floats <= opt_.max_result_floats, "embeddings: the call's vectors would take ", floats,
            " floats, past the limit of ", opt_.max_result_floats, " per call (send fewer or shorter texts)");
  auto call = std::make_shared<Call>();
  call->texts = std::move(texts);
  call->pooling = pooling;
  call->tokens = tokens;
  call->results.resize(call->texts.size());
  {
    std::lock_guard lock(mu_);
    if (stop_) throw EngineBusy("embeddings: the service is shutting down");
    if (stats_.tokens_queued + tokens > opt_.max_queued_tokens)
      throw EngineBusy(cat("embeddings: ", stats_.tokens_queued, " tokens are already waiting; try again shortly"));
    stats_.tokens_queued += tokens;
    ++stats_.calls_waiting;
    queue_.push_back(call);
  }
  cv_.notify_one();
  return call;
}

EmbeddingServiceStats EmbeddingService::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

void EmbeddingService::finish(Call& c, const std::string& error) {
  // Caller holds mu_ and c.mu. A call is waiting until its first text is handed to a pass, then
  // running until it finishes.
  if (c.started)
    --stats_.calls_running;
  else
    --stats_.calls_waiting;
  ++stats_.calls_total;
  for (size_t i = c.next; i < c.texts.size(); ++i) stats_.tokens_queued -= static_cast<int64_t>(c.texts[i].ids.size());
  c.next = c.texts.size();
  c.error = error;
  c.finished = true;
  c.cv.notify_all();
}

void EmbeddingService::loop() {
  struct Piece {
    std::shared_ptr<Call> call;
    size_t index;
  };
  for (;;) {
    std::vector<Piece> pass;
    std::vector<PreparedText> texts;
    std::optional<Pooling> pooling;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
      if (stop_) {
        for (auto& c : queue_) {
          std::lock_guard cl(c->mu);
          if (!c->finished) finish(*c, "embeddings: the service shut down");
        }
        queue_.clear();
        return;
      }
      // Cancelled calls leave the queue (finished now, or when their texts in a pass are done);
      // the others give texts, front first and of one pooling, up to the pass's token budget.
      int64_t tokens = 0;
      bool full = false;
      for (auto it = queue_.begin(); it != queue_.end() && !full;) {
        Call& c = **it;
        std::lock_guard cl(c.mu);
        if (c.cancelled) {
          ++stats_.cancelled_total;
          c.stopped = true;
          if (c.done == c.next) finish(c, "embeddings: cancelled");
          it = queue_.erase(it);
          continue;
        }
        if (!pass.empty() && c.pooling != pooling) break;
        pooling = c.pooling;
        while (c.next < c.texts.size()) {
          const int64_t n = static_cast<int64_t>(c.texts[c.next].ids.size());
          if (!pass.empty() && tokens + n > opt_.batch_tokens) {
            full = true;
            break;
          }
          if (!c.started) {
            c.started = true;
            --stats_.calls_waiting;
            ++stats_.calls_running;
          }
          tokens += n;
          stats_.tokens_queued -= n;
          pass.push_back({*it, c.next});
          texts.push_back(c.texts[c.next]);
          ++c.next;
        }
        // A call whose texts are all handed out leaves the queue; its pass finishes it.
        it = c.next == c.texts.size() ? queue_.erase(it) : std::next(it);
      }
      if (pass.empty()) continue;
      ++stats_.passes_total;
    }

    std::vector<Embedding> out;
    std::string error;
    try {
      out = embedder_.embed(texts, pooling);
    } catch (const std::exception& e) {
      error = e.what();  // ends the calls of this pass only
    }
    std::lock_guard lock(mu_);
    for (size_t i = 0; i < pass.size(); ++i) {
      Call& c = *pass[i].call;
      std::lock_guard cl(c.mu);
      if (c.finished) continue;
      ++c.done;
      ++stats_.texts_total;
      stats_.tokens_total += static_cast<int64_t>(c.texts[pass[i].index].ids.size());
      if (!error.empty()) {
        // The rest of a failed call is not run.
        c.stopped = true;
        queue_.erase(std::remove(queue_.begin(), queue_.end(), pass[i].call), queue_.end());
        if (c.done == c.next) finish(c, error);
        continue;
      }
      c.results[pass[i].index] = std::move(out[i]);
      if ((c.stopped || c.next == c.texts.size()) && c.done == c.next)
        finish(c, c.stopped && c.cancelled ? std::string("embeddings: cancelled") : c.error);
    }
  }
}

}  // namespace lfm
