#include "kernels/cuda/cuda_profile.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace lfm::cuda {

namespace {
constexpr size_t kDrainEvery = 4096;  // pending ops read back at once (each holds two events)
}  // namespace

OpProfile::OpProfile() {
  const char* env = std::getenv("LFM_CUDA_PROFILE");
  if (!env || !*env || std::strcmp(env, "0") == 0) return;
  mode_ = std::strcmp(env, "sync") == 0 ? Mode::kSync : Mode::kEvents;
}

OpProfile::~OpProfile() {
  for (cudaEvent_t e : all_events_) cudaEventDestroy(e);
}

cudaEvent_t OpProfile::take_event() {
  if (!free_events_.empty()) {
    cudaEvent_t e = free_events_.back();
    free_events_.pop_back();
    return e;
  }
  cudaEvent_t e = nullptr;
  if (cudaEventCreate(&e) != cudaSuccess) return nullptr;
  all_events_.push_back(e);
  return e;
}

void OpProfile::add(const std::string& name, double seconds) {
  auto& e = table_[name];
  e.first += seconds;
  e.second += 1;
}

void OpProfile::drain() {
  if (pending_.empty()) return;
  cudaEventSynchronize(pending_.back().end);  // the stream runs in order: every earlier one is done
  for (const Pending& p : pending_) {
    float ms = 0;
    if (cudaEventElapsedTime(&ms, p.start, p.end) == cudaSuccess) add(p.name, ms * 1e-3);
    free_events_.push_back(p.start);
    free_events_.push_back(p.end);
  }
  pending_.clear();
}

OpProfile::Timer::Timer(OpProfile* profile, cudaStream_t stream, std::string_view name)
    : profile_(profile), stream_(stream) {
#ifdef LFM_CUDA_EMULATION
  ::lfm_emu::trace::set_op(name);  // the emulator's cost-model trace labels launches by op
#endif
  if (!profile_) return;
  name_ = name;
  if (profile_->mode_ == Mode::kSync) {
    cudaStreamSynchronize(stream_);
    t0_ = std::chrono::steady_clock::now();
    return;
  }
  start_ = profile_->take_event();
  if (start_ && cudaEventRecord(start_, stream_) != cudaSuccess) start_ = nullptr;
}

OpProfile::Timer::~Timer() {
#ifdef LFM_CUDA_EMULATION
  ::lfm_emu::trace::set_op({});
#endif
  if (!profile_) return;
  if (profile_->mode_ == Mode::kSync) {
    cudaStreamSynchronize(stream_);
    profile_->add(name_, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count());
    return;
  }
  if (!start_) return;  // no event to time it with: the op is left out of the table
  cudaEvent_t end = profile_->take_event();
  if (!end || cudaEventRecord(end, stream_) != cudaSuccess) {
    profile_->free_events_.push_back(start_);
    if (end) profile_->free_events_.push_back(end);
    return;
  }
  profile_->pending_.push_back({std::move(name_), start_, end});
  if (profile_->pending_.size() >= kDrainEvery) profile_->drain();
}

void OpProfile::print(const std::string& backend) {
  drain();
  std::vector<std::pair<std::string, std::pair<double, int64_t>>> rows(table_.begin(), table_.end());
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.first > b.second.first; });
  double total = 0;
  for (const auto& r : rows) total += r.second.first;
  std::fprintf(stderr, "cuda profile (%s; %s): op, calls, total ms, us per call, share\n", backend.c_str(),
               mode_ == Mode::kSync ? "wall time, each op waited for" : "GPU time between events, no waits");
  for (const auto& r : rows)
    std::fprintf(stderr, "  %-16s %9lld %10.2f %9.2f %5.1f%%\n", r.first.c_str(), static_cast<long long>(r.second.second),
                 r.second.first * 1e3, r.second.first * 1e6 / static_cast<double>(r.second.second),
                 total > 0 ? 100.0 * r.second.first / total : 0.0);
}

}  // namespace lfm::cuda
