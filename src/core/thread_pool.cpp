#include "core/thread_pool.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <system_error>

#include "core/error.h"

namespace lfm {

namespace {

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// How long a worker or the caller spins before it sleeps: long enough to bridge the gaps between
// the ops of one step and between decode steps (sampling and scheduling take tens of µs), short
// enough not to starve other processes. Timed, not counted: a pause lasts ~10 ns on the Xeon this
// was measured on and ~28 ns on a Zen 5 EPYC. (2000 pauses, ~19 µs here, let the
// worker fall asleep between decode steps and wake late into the next one's first pass: 1.2B
// Q4_0 tg128 +1–3% with ~0.2 ms, three alternations.)
constexpr auto kSpinTime = std::chrono::microseconds(250);

// Spins until done() holds (true) or kSpinTime has passed (false). Every 64 pauses it also
// yields the core: when more threads are runnable than there are cores (two lfm processes, ctest
// -j2, the server's HTTP threads) the thread being waited for may be queued behind this spinner,
// and without the yield each pass could wait out a scheduler slice (the MoE fixture tests under
// ctest -j2 took 31 s instead of 1.0 s on a 2-core Zen 5). Alone on its core a yield returns at
// once (~0.5 µs there, against ~1.8 µs for the 64 pauses).
template <typename Done>
bool spin_until(Done&& done) {
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 1; !done(); ++i) {
    cpu_relax();
    if (i % 64 != 0) continue;
    if (std::chrono::steady_clock::now() - t0 > kSpinTime) return done();
    std::this_thread::yield();
  }
  return true;
}

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
  shares_ = std::vector<Share>(static_cast<size_t>(n_threads_));
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

void ThreadPool::start_job(Job job, int64_t n, int chunks, int64_t chunk_size) {
  job_ = job;
  job_n_ = n;
  job_chunks_ = chunks;
  job_chunk_size_ = chunk_size;
  // Every worker acknowledges every job (also those without a chunk), so none can still be
  // reading this job's fields when the next one is written.
  pending_.store(n_threads_ - 1, std::memory_order_relaxed);
  // Under mu_ so a worker between its last check and its wait cannot miss the wake-up.
  std::lock_guard<std::mutex> lock(mu_);
  generation_.fetch_add(1, std::memory_order_release);
  if (sleepers_ > 0) cv_.notify_all();
}

void ThreadPool::finish_job() {
  if (!spin_until([this] { return pending_.load(std::memory_order_acquire) == 0; })) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_done_.wait(lock, [this] { return pending_.load(std::memory_order_acquire) == 0; });
  }
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
  start_job(job, n, chunks, 0);
  run_chunk(job.call, job.fn, n, chunks, 0);
  finish_job();
}

void ThreadPool::run_balanced(int64_t n, int64_t chunk, Job job) {
  if (n <= 0) return;
  chunk = std::max<int64_t>(chunk, 1);
  // Chunk indices travel in 32-bit halves of one atomic word.
  while ((n + chunk - 1) / chunk > int64_t{std::numeric_limits<int32_t>::max()}) chunk *= 2;
  const int64_t n_chunks = (n + chunk - 1) / chunk;
  if (n_threads_ == 1 || n_chunks <= 1) {
    for (int64_t k = 0; k < n_chunks; ++k) job.call(job.fn, k * chunk, std::min(n, (k + 1) * chunk));
    return;
  }
  std::lock_guard<std::mutex> call(call_mu_);
  const int threads = n_threads_;
  for (int i = 0; i < threads; ++i) {
    const auto lo = static_cast<uint64_t>(n_chunks * i / threads), hi = static_cast<uint64_t>(n_chunks * (i + 1) / threads);
    shares_[static_cast<size_t>(i)].range.store(lo | hi << 32, std::memory_order_relaxed);  // published by start_job
  }
  start_job(job, n, threads, chunk);
  run_share(0);
  finish_job();
}

void ThreadPool::run_share(int index) {
  const int threads = job_chunks_;
  const int64_t n = job_n_, size = job_chunk_size_;
  const auto run_chunk_at = [&](uint64_t k) {
    const auto b = static_cast<int64_t>(k) * size;
    job_.call(job_.fn, b, std::min(n, b + size));
  };
  // Takes the front (own share) or the back (another's) chunk of a share; false once it is empty.
  const auto take = [](Share& s, bool front, uint64_t& k) {
    uint64_t r = s.range.load(std::memory_order_acquire);
    for (;;) {
      const uint64_t lo = r & 0xffffffffu, hi = r >> 32;
      if (lo >= hi) return false;
      const uint64_t next = front ? (lo + 1) | hi << 32 : lo | (hi - 1) << 32;
      if (s.range.compare_exchange_weak(r, next, std::memory_order_acq_rel, std::memory_order_acquire)) {
        k = front ? lo : hi - 1;
        return true;
      }
    }
  };
  uint64_t k = 0;
  while (take(shares_[static_cast<size_t>(index)], true, k)) run_chunk_at(k);
  for (int d = 1; d < threads; ++d)  // the next threads' shares, from their far ends
    while (take(shares_[static_cast<size_t>((index + d) % threads)], false, k)) run_chunk_at(k);
}

void ThreadPool::worker_loop(int index) {
  uint64_t seen = 0;
  for (;;) {
    uint64_t gen = seen;
    spin_until([&] {
      gen = generation_.load(std::memory_order_acquire);
      return gen != seen || stop_.load(std::memory_order_relaxed);
    });
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
    if (job_chunk_size_ > 0) run_share(index);
    else if (index < chunks) run_chunk(job.call, job.fn, n, chunks, index);
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      std::lock_guard<std::mutex> lock(mu_);  // the caller may be asleep in run()
      cv_done_.notify_all();
    }
  }
}

}  // namespace lfm
