// Continuous batching of embedding work from many callers (the server's /v1/embeddings and
// /v1/rerank, the C API): each call's texts join one queue, and a worker thread runs whatever
// is waiting, across calls, as one ragged batch per encoder pass (up to the token budget), so
// many small concurrent requests share passes. Results are per text and never depend on the
// batch they ran in (model/encoder.h). Every limit is checked when a call is submitted, before
// any work: a call too large for the limits is refused (lfm::Error), a full queue answers
// EngineBusy (the server's 429).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "engine/embedder.h"

namespace lfm {

struct EmbeddingServiceOptions {
  int64_t batch_tokens = 8192;        // tokens per encoder pass
  int64_t max_texts_per_call = 4096;  // texts (inputs, or documents + 1) in one call
  int64_t max_tokens_per_call = 1 << 20;
  int64_t max_queued_tokens = 1 << 21;  // every waiting call's tokens together
  int64_t max_result_floats = 1 << 25;  // one call's vectors (128 MiB): per-token vectors add up
};

struct EmbeddingServiceStats {
  int64_t calls_total = 0, texts_total = 0, tokens_total = 0, passes_total = 0;
  int64_t calls_waiting = 0, calls_running = 0, tokens_queued = 0;
  int64_t cancelled_total = 0;
};

class EmbeddingService {
 public:
  EmbeddingService(Embedder& embedder, EmbeddingServiceOptions opt = {});
  ~EmbeddingService();  // finishes the running pass, fails the waiting calls
  EmbeddingService(const EmbeddingService&) = delete;
  EmbeddingService& operator=(const EmbeddingService&) = delete;

  // A submitted call: wait() for its vectors, one per text in order, or the error that ended it.
  class Call {
   public:
    std::vector<Embedding> wait();
    // As wait(), giving up after `timeout` (nullopt: not finished yet).
    std::optional<std::vector<Embedding>> wait_for(std::chrono::milliseconds timeout);
    // Stops the call: texts not yet run are skipped, wait() throws "cancelled".
    void cancel();

   private:
    friend class EmbeddingService;
    std::mutex mu;
    std::condition_variable cv;
    std::vector<PreparedText> texts;
    std::optional<Pooling> pooling;
    std::vector<Embedding> results;
    size_t next = 0, done = 0;  // texts handed to a pass / finished
    int64_t tokens = 0;
    bool started = false;  // a text was handed to a pass
    bool stopped = false;  // no more texts are handed out (cancelled, or a pass failed)
    bool cancelled = false, finished = false;
    std::string error;
  };

  // Queues texts; throws lfm::Error when the call breaks a per-call limit, EngineBusy when the
  // queue is full. The texts must be non-empty (Embedder::prepare makes them so).
  std::shared_ptr<Call> submit(std::vector<PreparedText> texts, std::optional<Pooling> pooling = std::nullopt);
  EmbeddingServiceStats stats() const;
  const Embedder& embedder() const { return embedder_; }
  const EmbeddingServiceOptions& options() const { return opt_; }

 private:
  void loop();
  void finish(Call& c, const std::string& error);

  Embedder& embedder_;
  const EmbeddingServiceOptions opt_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Call>> queue_;
  EmbeddingServiceStats stats_;
  bool stop_ = false;
  std::thread worker_;
};

}  // namespace lfm
