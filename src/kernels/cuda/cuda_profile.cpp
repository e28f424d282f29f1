#include "kernels/cuda/cuda_profile.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace lfm::cuda {

OpProfile::OpProfile() {
  const char* env = std::getenv("LFM_CUDA_PROFILE");
  enabled_ = env && *env && std::strcmp(env, "0") != 0;
}

OpProfile::Timer::Timer(OpProfile* profile, cudaStream_t stream, std::string_view name)
    : profile_(profile), stream_(stream) {
#ifdef LFM_CUDA_EMULATION
  ::lfm_emu::trace::set_op(name);  // the emulator's cost-model trace labels launches by op
#endif
  if (!profile_) return;
  name_ = name;
  cudaStreamSynchronize(stream_);
  t0_ = std::chrono::steady_clock::now();
}

OpProfile::Timer::~Timer() {
#ifdef LFM_CUDA_EMULATION
  ::lfm_emu::trace::set_op({});
#endif
  if (!profile_) return;
  cudaStreamSynchronize(stream_);
  auto& e = profile_->table_[name_];
  e.first += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
  e.second += 1;
}

void OpProfile::print(const std::string& backend) const {
  std::vector<std::pair<std::string, std::pair<double, int64_t>>> rows(table_.begin(), table_.end());
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.first > b.second.first; });
  double total = 0;
  for (const auto& r : rows) total += r.second.first;
  std::fprintf(stderr, "cuda profile (%s): op, calls, total ms, us per call, share\n", backend.c_str());
  for (const auto& r : rows)
    std::fprintf(stderr, "  %-16s %9lld %10.2f %9.2f %5.1f%%\n", r.first.c_str(), static_cast<long long>(r.second.second),
                 r.second.first * 1e3, r.second.first * 1e6 / static_cast<double>(r.second.second),
                 100.0 * r.second.first / total);
}

}  // namespace lfm::cuda
