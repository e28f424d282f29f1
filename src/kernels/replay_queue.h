// Ops a device backend queues instead of launching at once, launched together when the host next
// waits for the device (a download). A run of ops whose signature (every op's kind and arguments,
// the addresses it reads and writes included) equals a run seen before is launched as the graph
// recorded from that run: one launch instead of hundreds (CUDA graphs). Replaying the recorded ops
// is the same as launching the queued ones, because equal signatures mean equal ops on equal
// addresses; what differs between the runs is only the contents of memory, device buffers and
// the staged bytes of uploads (stage() places the same sequence of sizes at the same addresses).
// A decode step of a steady batch is such a run: its ids, positions and descriptors are uploaded,
// and nothing else about it changes.
//
// Rules for the backend using it: allocate at the op's call (never inside a queued op), give
// every host value an op depends on to enqueue() (it becomes part of the signature), copy host
// bytes a queued op reads with stage(), and free device memory through the FreeGate (memory a
// queued op may use is freed only after the flush has run it).
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <tuple>
#include <type_traits>
#include <unordered_map>
#include <vector>

namespace lfm {

// What records and launches graphs, and the host memory staged uploads are read from.
class OpGraphs {
 public:
  virtual ~OpGraphs() = default;
  // Records the ops (a CUDA backend runs them under stream capture) and returns a handle that
  // launches them again.
  virtual void* record(std::span<const std::function<void()>> ops) = 0;
  virtual void launch(void* graph) = 0;
  virtual void release(void* graph) = 0;
  // Waits until everything launched has run.
  virtual void wait() = 0;
  // Host memory the device can copy from (pinned for CUDA), and its release.
  virtual void* alloc_staging(size_t bytes) = 0;
  virtual void free_staging(void* p) = 0;
};

// Device memory frees that wait while ops that may use the memory are queued.
class FreeGate {
 public:
  // Runs `free` now, or after the queue's next flush when ops are queued.
  void release(std::function<void()> free) {
    std::unique_lock lock(mu_);
    if (!holding_) {
      lock.unlock();
      free();
      return;
    }
    held_.push_back(std::move(free));
  }

 private:
  friend class ReplayQueue;
  std::mutex mu_;
  bool holding_ = false;
  std::vector<std::function<void()>> held_;
};

// A signature word of an op argument: pointers by address, numbers by value (floats by bits).
// Other argument types supply an overload of append_signature found by argument-dependent lookup.
template <typename T>
  requires std::is_pointer_v<T> || std::is_arithmetic_v<T> || std::is_enum_v<T>
void append_signature(std::vector<uint64_t>& words, const T& v) {
  if constexpr (std::is_pointer_v<T>) {
    words.push_back(reinterpret_cast<uintptr_t>(v));
  } else if constexpr (std::is_floating_point_v<T>) {
    double d = static_cast<double>(v);
    uint64_t bits;
    std::memcpy(&bits, &d, sizeof bits);
    words.push_back(bits);
  } else {
    words.push_back(static_cast<uint64_t>(v));
  }
}

// The signature words of several values in order (a struct's fields).
template <typename... T>
void append_signatures(std::vector<uint64_t>& words, const T&... values) {
  (append_signature(words, values), ...);
}

class ReplayQueue {
 public:
  struct Options {
    bool enabled = true;      // false: every op runs at once (no queue, no graphs)
    int record_after = 2;     // a run is recorded the n-th time its signature is seen
    size_t max_graphs = 64;   // recorded graphs kept (the least recently launched go first)
  };
  struct Stats {
    int64_t flushes = 0;   // flushes that had ops
    int64_t eager = 0;     // of them, launched op by op
    int64_t recorded = 0;  // recorded into a new graph (and launched)
    int64_t replayed = 0;  // launched as a graph recorded before
  };

  ReplayQueue(OpGraphs& graphs, Options options);
  ~ReplayQueue();
  ReplayQueue(const ReplayQueue&) = delete;
  ReplayQueue& operator=(const ReplayQueue&) = delete;

  bool enabled() const { return options_.enabled; }
  bool empty() const { return ops_.empty(); }
  // Whether the step goes on after a mid_step flush: what it launched may still run, so host
  // bytes for the next ops are staged (an owner's direct copy could have to wait for them).
  bool mid_step() const { return mid_step_; }
  // Nothing queued and no step going on: the owner may copy host bytes to the device directly
  // (in order with what it launched before) instead of staging them.
  bool idle() const { return ops_.empty() && !mid_step_; }

  // Queues fn(args...) (runs it at once when disabled). `name` must be a string literal naming
  // the op (its address is a signature word); every value the launch depends on besides memory
  // contents must be among `args`, which are copied.
  template <typename Fn, typename... Args>
  void enqueue(const char* name, Fn fn, const Args&... args) {
    if (!options_.enabled) {
      fn(args...);
      return;
    }
    scratch_.clear();
    scratch_.push_back(reinterpret_cast<uintptr_t>(name));
    (append_signature(scratch_, args), ...);
    push(scratch_, [fn = std::move(fn), tup = std::make_tuple(args...)]() { std::apply(fn, tup); });
  }
  // Queues an op whose signature the caller built.
  void push(std::span<const uint64_t> words, std::function<void()> op);

  // A copy of `bytes` host bytes that a queued op may read when it runs: valid until the flush
  // after next (or the next flush followed by a wait, which stage() does when it reuses memory).
  void* stage(const void* src, size_t bytes);
  // The owner waited for the device after the last flush (its stream synchronized: every op the
  // flush launched has run), so staged bytes are no longer read and the next stage() need not wait.
  void waited() { staging_in_use_ = false; }

  // Launches every queued op: as a recorded graph when its signature was recorded, by recording
  // it when this is the record_after-th time it is seen, else one by one. Then the frees held
  // meanwhile run (after waiting for the device).
  // mid_step: the ops queued next belong to the same step (Backend::launch_queued: what came
  // before a decode step, its layers, its head, each a run). Their staged bytes then go after
  // these, which the launched ops may still read, so the next stage() neither waits nor
  // overwrites them; the next flush that is not mid_step starts the staging over, as for a
  // whole step. A mid_step flush with nothing queued still marks the step as going on.
  void flush(bool mid_step = false);

  std::shared_ptr<FreeGate> free_gate() const { return gate_; }
  const Stats& stats() const { return stats_; }

 private:
  struct Graph {
    std::vector<uint64_t> signature;
    void* handle = nullptr;
    uint64_t last_used = 0;
  };
  struct Chunk {
    uint8_t* data;
    size_t size;
  };
  void run_held_frees();

  OpGraphs& graphs_;
  Options options_;
  std::vector<uint64_t> scratch_;
  std::vector<uint64_t> signature_;  // of the queued ops, words of every op in order
  uint64_t hash_ = 0;
  std::vector<std::function<void()>> ops_;
  std::unordered_multimap<uint64_t, Graph> recorded_;
  std::unordered_map<uint64_t, int> seen_;  // signature hash → times seen, not yet recorded
  uint64_t clock_ = 0;
  // Staging: chunks of host memory, used from the first in order by each run of ops.
  std::vector<Chunk> chunks_;
  size_t chunk_ = 0, offset_ = 0;
  bool staging_in_use_ = false;  // a flush launched ops that may read staged bytes
  bool mid_step_ = false;        // the last flush was mid_step
  std::shared_ptr<FreeGate> gate_ = std::make_shared<FreeGate>();
  Stats stats_;
};

}  // namespace lfm
