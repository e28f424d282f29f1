#include "kernels/replay_queue.h"

#include <algorithm>

#include "core/error.h"

namespace lfm {

namespace {

uint64_t mix(uint64_t h, uint64_t w) {
  h ^= w + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  return h * 0xff51afd7ed558ccdull;
}

constexpr size_t kStagingChunk = size_t{1} << 20;
constexpr size_t kStagingAlign = 64;
constexpr size_t kMaxSeen = 4096;  // signatures counted before the count starts over

}  // namespace

ReplayQueue::ReplayQueue(OpGraphs& graphs, Options options) : graphs_(graphs), options_(options) {
  LFM_CHECK(options_.record_after >= 1 && options_.max_graphs >= 1, "replay queue: record_after ",
            options_.record_after, " and max_graphs ", options_.max_graphs, " must be at least 1");
}

ReplayQueue::~ReplayQueue() {
  // The owner flushes (and waits) before it goes; what is left is released.
  for (auto& [h, g] : recorded_) graphs_.release(g.handle);
  for (const Chunk& c : chunks_) graphs_.free_staging(c.data);
  run_held_frees();
}

void ReplayQueue::push(std::span<const uint64_t> words, std::function<void()> op) {
  if (!options_.enabled) {
    op();
    return;
  }
  if (ops_.empty()) {
    std::lock_guard lock(gate_->mu_);
    gate_->holding_ = true;
  }
  for (uint64_t w : words) hash_ = mix(hash_, w);
  hash_ = mix(hash_, words.size());
  signature_.insert(signature_.end(), words.begin(), words.end());
  signature_.push_back(words.size());
  ops_.push_back(std::move(op));
}

void* ReplayQueue::stage(const void* src, size_t bytes) {
  if (staging_in_use_) {  // the last flush's ops may still read these bytes
    graphs_.wait();
    staging_in_use_ = false;
  }
  const size_t need = std::max<size_t>(kStagingAlign, (bytes + kStagingAlign - 1) / kStagingAlign * kStagingAlign);
  while (chunk_ < chunks_.size() && offset_ + need > chunks_[chunk_].size) ++chunk_, offset_ = 0;
  if (chunk_ == chunks_.size()) {
    const size_t size = std::max(kStagingChunk, need);
    chunks_.push_back({static_cast<uint8_t*>(graphs_.alloc_staging(size)), size});
    offset_ = 0;
  }
  uint8_t* dst = chunks_[chunk_].data + offset_;
  offset_ += need;
  if (bytes) std::memcpy(dst, src, bytes);
  return dst;
}

void ReplayQueue::flush(bool mid_step) {
  // Nothing queued: a mid_step flush still marks the step as going on (its next ops stage their
  // bytes whether or not ops came before), and the step's last one ends it.
  if (ops_.empty() && !mid_step_ && !mid_step) return;
  if (!mid_step) {
    const bool staged = chunk_ > 0 || offset_ > 0;
    chunk_ = 0;
    offset_ = 0;
    staging_in_use_ = staging_in_use_ || staged;
  }
  mid_step_ = mid_step;
  if (ops_.empty()) return;
  ++stats_.flushes;
  const uint64_t h = hash_;
  std::vector<std::function<void()>> ops = std::move(ops_);
  std::vector<uint64_t> signature = std::move(signature_);
  ops_.clear();
  signature_.clear();
  hash_ = 0;

  Graph* match = nullptr;
  auto [lo, hi] = recorded_.equal_range(h);
  for (auto it = lo; it != hi; ++it)
    if (it->second.signature == signature) match = &it->second;
  try {
    if (match) {
      match->last_used = ++clock_;
      graphs_.launch(match->handle);
      ++stats_.replayed;
    } else if (++seen_[h] >= options_.record_after) {
      seen_.erase(h);
      if (recorded_.size() >= options_.max_graphs) {  // the least recently launched goes
        auto oldest = std::min_element(recorded_.begin(), recorded_.end(), [](const auto& a, const auto& b) {
          return a.second.last_used < b.second.last_used;
        });
        graphs_.release(oldest->second.handle);
        recorded_.erase(oldest);
      }
      void* handle = graphs_.record(ops);
      Graph g{std::move(signature), handle, ++clock_};
      recorded_.emplace(h, std::move(g));
      graphs_.launch(handle);
      ++stats_.recorded;
    } else {
      if (seen_.size() > kMaxSeen) seen_.clear();
      for (const auto& op : ops) op();
      ++stats_.eager;
    }
  } catch (...) {
    run_held_frees();
    throw;
  }
  run_held_frees();
}

void ReplayQueue::run_held_frees() {
  std::vector<std::function<void()>> held;
  {
    std::lock_guard lock(gate_->mu_);
    gate_->holding_ = false;
    held.swap(gate_->held_);
  }
  if (held.empty()) return;
  graphs_.wait();
  staging_in_use_ = false;
  for (auto& f : held) f();
}

}  // namespace lfm
