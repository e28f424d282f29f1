// A small persistent thread pool with a blocking parallel_for. The calling thread takes part,
// so a pool of N threads runs N-1 workers. Work is split into contiguous ranges so each output
// row is always computed by exactly one thread in one fixed order: results never depend on the
// thread count or on what else is in the batch.
//
// parallel_for_balanced splits the same way but in chunks: a thread that runs out of its own
// share takes chunks from the far end of another's. For memory-bound passes whose halves do
// not finish together (on a shared VM one core's bandwidth moves from pass to pass); the
// callable must give the same results whichever thread runs a chunk.
//
// Cheap enough to call hundreds of times per decode step: no allocation and no std::function
// per call (the callable is passed by reference), workers spin (~0.25 ms) on an atomic generation
// counter before sleeping, and the caller spins on a completion counter before sleeping.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

namespace lfm {

class ThreadPool {
 public:
  // Starts one worker thread running `body`; std::thread by default. Tests substitute one that
  // throws std::system_error, which is what std::thread does when the OS refuses a thread.
  using Spawner = std::function<std::thread(std::function<void()> body)>;
  static constexpr int kMaxThreads = 1024;  // requests above this are clamped

  // 0: hardware concurrency. When the OS refuses a thread the pool runs with the workers it got
  // (size() says how many); it never waits for a worker that does not exist.
  explicit ThreadPool(int n_threads = 0);
  ThreadPool(int n_threads, const Spawner& spawn);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }

  // Calls fn(begin, end) over [0, n) in at most size() chunks, each at least `grain` long.
  // Calls from different threads take turns (one job at a time); fn must not call parallel_for.
  template <typename Fn>
  void parallel_for(int64_t n, int64_t grain, Fn&& fn) {
    using F = std::remove_reference_t<Fn>;
    run(n, grain, Job{const_cast<void*>(static_cast<const void*>(&fn)),
                      [](void* f, int64_t b, int64_t e) { (*static_cast<F*>(f))(b, e); }});
  }

  // Calls fn(begin, end) once per chunk [k·chunk, min(n, (k+1)·chunk)) of [0, n), every chunk
  // exactly once. Thread i starts on the i-th contiguous share of the chunks, in order; when its
  // share is done it takes the last remaining chunk of another thread's share, until none is left.
  template <typename Fn>
  void parallel_for_balanced(int64_t n, int64_t chunk, Fn&& fn) {
    using F = std::remove_reference_t<Fn>;
    run_balanced(n, chunk, Job{const_cast<void*>(static_cast<const void*>(&fn)),
                               [](void* f, int64_t b, int64_t e) { (*static_cast<F*>(f))(b, e); }});
  }

 private:
  struct Job {
    void* fn = nullptr;
    void (*call)(void*, int64_t, int64_t) = nullptr;
  };
  void run(int64_t n, int64_t grain, Job job);
  void run_balanced(int64_t n, int64_t chunk, Job job);
  void start_job(Job job, int64_t n, int chunks, int64_t chunk_size);
  void finish_job();
  void run_share(int index);
  void worker_loop(int index);
  void stop_and_join();

  int n_threads_ = 1;
  std::vector<std::thread> workers_;
  std::mutex call_mu_;  // one parallel_for at a time
  // The current job; written by the caller before generation_ is bumped (release), read by
  // workers after they see the new generation (acquire).
  Job job_;
  int64_t job_n_ = 0;
  int job_chunks_ = 0;           // static jobs: ranges handed out; balanced jobs: threads taking part
  int64_t job_chunk_size_ = 0;  // > 0: a balanced job in chunks of this many
  // Balanced jobs: thread i's share of the chunks still to run, [front, back) packed as
  // front | back << 32; the owner takes the front, other threads the back (one CAS each).
  struct alignas(64) Share {
    std::atomic<uint64_t> range{0};
  };
  std::vector<Share> shares_;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stop_{false};
  // Sleeping workers wait here after spinning for a while.
  std::mutex mu_;
  std::condition_variable cv_;       // workers wait for a job
  std::condition_variable cv_done_;  // the caller waits for the last chunk
  int sleepers_ = 0;
};

}  // namespace lfm
