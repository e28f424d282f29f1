// A small fixed thread pool with a blocking parallel_for. The calling thread takes part, so a
// pool of N threads runs N-1 workers. Work is split into contiguous ranges so each output row is
// always computed by exactly one thread in one fixed order: results never depend on the
// thread count or on what else is in the batch.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace lfm {

class ThreadPool {
 public:
  explicit ThreadPool(int n_threads = 0);  // 0: hardware concurrency
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }

  // Calls fn(begin, end) over [0, n) in at most size() chunks, each at least `grain` long.
  // Calls from different threads take turns (one job at a time); fn must not call parallel_for.
  void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

 private:
  void worker_loop(int index);

  int n_threads_ = 1;
  std::vector<std::thread> workers_;
  std::mutex call_mu_;  // one parallel_for at a time
  std::mutex mu_;
  std::condition_variable cv_start_, cv_done_;
  const std::function<void(int64_t, int64_t)>* job_ = nullptr;
  int64_t job_n_ = 0;
  int job_chunks_ = 0;
  uint64_t generation_ = 0;
  int pending_ = 0;
  bool stop_ = false;
};

}  // namespace lfm
