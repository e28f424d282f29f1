// LFM_CUDA_PROFILE=1: every op of the CUDA backend waits for the GPU before and after itself, and
// its wall time goes to a table (op, weight type) printed to stderr when the backend closes. The
// waits slow the run down; the table says where a step's time goes, launch overhead included.
#pragma once

#include <cuda_runtime.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>

namespace lfm::cuda {

class OpProfile {
 public:
  OpProfile();  // enabled by LFM_CUDA_PROFILE (set, not "0")
  bool enabled() const { return enabled_; }

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
  };
  Timer time(cudaStream_t stream, std::string_view name) { return Timer(enabled_ ? this : nullptr, stream, name); }

  // The table, slowest op first, headed by the backend's name.
  void print(const std::string& backend) const;

 private:
  bool enabled_;
  std::map<std::string, std::pair<double, int64_t>> table_;  // op → (seconds, calls)
};

}  // namespace lfm::cuda
