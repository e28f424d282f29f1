// LFM_CUDA_PROFILE: where a CUDA step's time goes, op by op, in a table (op, weight type) printed
// to stderr when the backend closes. Ops launch one by one while it is on (no CUDA graphs).
//   LFM_CUDA_PROFILE=1 (or any value but "sync" and "0"): a CUDA event recorded before and after
//     each op on the stream, read back in batches, so the table holds the GPU's time per op with
//     no host wait between ops (launch gaps fall between the events, not in them);
//   LFM_CUDA_PROFILE=sync: every op waits for the GPU before and after itself and its wall time
//     is counted, launch overhead and the waits (~10 µs an op) included.
#pragma once

#include <cuda_runtime.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace lfm::cuda {

class OpProfile {
 public:
  OpProfile();  // reads LFM_CUDA_PROFILE
  ~OpProfile();
  OpProfile(const OpProfile&) = delete;
  OpProfile& operator=(const OpProfile&) = delete;
  bool enabled() const { return mode_ != Mode::kOff; }

  // Times one op on `stream` when enabled, else nothing.
  class Timer {
   public:
    // The name is copied only when timing: ops name themselves on every call.
    Timer(OpProfile* profile, cudaStream_t stream, std::string_view name);
    ~Timer();
    Timer(const Timer&) = delete;
    Timer& operator=(const Timer&) = delete;

   private:
    OpProfile* profile_;
    cudaStream_t stream_;
    std::string name_;
    std::chrono::steady_clock::time_point t0_;
    cudaEvent_t start_ = nullptr;
  };
  Timer time(cudaStream_t stream, std::string_view name) { return Timer(enabled() ? this : nullptr, stream, name); }

  // The table, slowest op first, headed by the backend's name (events still pending read first).
  void print(const std::string& backend);

 private:
  enum class Mode { kOff, kEvents, kSync };
  struct Pending {
    std::string name;
    cudaEvent_t start, end;
  };
  cudaEvent_t take_event();
  void add(const std::string& name, double seconds);
  // Waits for the pending ops' end events and adds their times to the table.
  void drain();

  Mode mode_ = Mode::kOff;
  std::map<std::string, std::pair<double, int64_t>> table_;  // op → (seconds, calls)
  std::vector<Pending> pending_;
  std::vector<cudaEvent_t> free_events_, all_events_;
};

}  // namespace lfm::cuda
