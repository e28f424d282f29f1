#include "core/thread_pool.h"

#include <algorithm>
#include <system_error>

#include "core/error.h"

namespace lfm {

namespace {

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// Spins this many times (~0.1 ms) before a worker or the caller sleeps: long enough to bridge
// the gaps between the ops of one step, short enough not to starve other processes.
constexpr int kSpins = 2000;

inline void run_chunk(void (*call)(void*, int64_t, int64_t), void* fn, int64_t n, int chunks, int index) {
  const int64_t begin = n * index / chunks;
  const int64_t end = n * (index + 1) / chunks;
  if (begin < end) call(fn, begin, end);
}

}  // namespace

ThreadPool::ThreadPool(int n_threads)
    : ThreadPool(n_threads, [](std::function<void()> body) { return std::thread(std::move(body)); }) {}

ThreadPool::ThreadPool(int n_threads, const Spawner& spawn) {
  if (n_threads <= 0) n_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  n_threads = std::min(n_threads, kMaxThreads);
  // Reserved first: a reallocation failing after a thread started would leave it unowned.
  workers_.reserve(static_cast<size_t>(n_threads - 1));
  try {
    for (int i = 1; i < n_threads; ++i) {
      std::thread t = spawn([this, i] { worker_loop(i); });
      if (!t.joinable()) break;  // no thread: counting it would make run() wait for it forever
      workers_.push_back(std::move(t));
    }
  } catch (const std::system_error&) {
    // The OS refused a thread (process or memory limits): run with the workers we got. Workers
    // never read n_threads_; run() counts only the workers that exist.
  } catch (...) {
    stop_and_join();
    throw;
  }
  n_threads_ = static_cast<int>(workers_.size()) + 1;
}

ThreadPool::~ThreadPool() { stop_and_join(); }

void ThreadPool::stop_and_join() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_.store(true);
  }
  cv_.notify_all();
  for (auto& t : workers_)
    if (t.joinable()) t.join();
}

void ThreadPool::run(int64_t n, int64_t grain, Job job) {
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  const int chunks = static_cast<int>(std::min<int64_t>(n_threads_, (n + grain - 1) / grain));
  if (chunks <= 1) {
    job.call(job.fn, 0, n);
    return;
  }
  std::lock_guard<std::mutex> call(call_mu_);
  job_ = job;
  job_n_ = n;
  job_chunks_ = chunks;
  // Every worker acknowledges every job (also those without a chunk), so none can still be
  // reading this job's fields when the next one is written.
  pending_.store(n_threads_ - 1, std::memory_order_relaxed);
  {
    // Under mu_ so a worker between its last check and its wait cannot miss the wake-up.
    std::lock_guard<std::mutex> lock(mu_);
    generation_.fetch_add(1, std::memory_order_release);
    if (sleepers_ > 0) cv_.notify_all();
  }
  run_chunk(job.call, job.fn, n, chunks, 0);
  for (int spins = 0; pending_.load(std::memory_order_acquire) != 0 && spins < kSpins; ++spins) cpu_relax();
  if (pending_.load(std::memory_order_acquire) != 0) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_done_.wait(lock, [this] { return pending_.load(std::memory_order_acquire) == 0; });
  }
}

void ThreadPool::worker_loop(int index) {
  uint64_t seen = 0;
  for (;;) {
    uint64_t gen = generation_.load(std::memory_order_acquire);
    for (int spins = 0; gen == seen && spins < kSpins && !stop_.load(std::memory_order_relaxed); ++spins) {
      cpu_relax();
      gen = generation_.load(std::memory_order_acquire);
    }
    if (gen == seen) {
      std::unique_lock<std::mutex> lock(mu_);
      ++sleepers_;
      cv_.wait(lock, [&] { return stop_.load() || generation_.load(std::memory_order_acquire) != seen; });
      --sleepers_;
      gen = generation_.load(std::memory_order_acquire);
    }
    if (stop_.load()) return;
    seen = gen;
    const Job job = job_;
    const int64_t n = job_n_;
    const int chunks = job_chunks_;
    if (index < chunks) run_chunk(job.call, job.fn, n, chunks, index);
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      std::lock_guard<std::mutex> lock(mu_);  // the caller may be asleep in run()
      cv_done_.notify_all();
    }
  }
}

}  // namespace lfm
