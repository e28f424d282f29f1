#include "core/thread_pool.h"

#include <algorithm>

namespace lfm {

ThreadPool::ThreadPool(int n_threads) {
  if (n_threads <= 0) n_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  n_threads_ = n_threads;
  for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_start_.notify_all();
  for (auto& t : workers_) t.join();
}

namespace {
void run_chunk(const std::function<void(int64_t, int64_t)>& fn, int64_t n, int chunks, int index) {
  const int64_t begin = n * index / chunks;
  const int64_t end = n * (index + 1) / chunks;
  if (begin < end) fn(begin, end);
}
}  // namespace

void ThreadPool::parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  const int chunks = static_cast<int>(std::min<int64_t>(n_threads_, (n + grain - 1) / grain));
  if (chunks <= 1) {
    fn(0, n);
    return;
  }
  std::lock_guard<std::mutex> call(call_mu_);
  {
    std::lock_guard<std::mutex> lock(mu_);
    job_ = &fn;
    job_n_ = n;
    job_chunks_ = chunks;
    pending_ = chunks - 1;
    ++generation_;
  }
  cv_start_.notify_all();
  run_chunk(fn, n, chunks, 0);
  std::unique_lock<std::mutex> lock(mu_);
  cv_done_.wait(lock, [this] { return pending_ == 0; });
  job_ = nullptr;
}

void ThreadPool::worker_loop(int index) {
  uint64_t seen = 0;
  for (;;) {
    const std::function<void(int64_t, int64_t)>* job;
    int64_t n;
    int chunks;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_start_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      job = job_;
      n = job_n_;
      chunks = job_chunks_;
      if (index >= chunks) continue;
    }
    run_chunk(*job, n, chunks, index);
    std::lock_guard<std::mutex> lock(mu_);
    if (--pending_ == 0) cv_done_.notify_one();
  }
}

}  // namespace lfm
