// prepare_cpu_weights (weight_pack.h): the CPU backends' weight preparation.
#include <algorithm>
#include <atomic>
#include <exception>
#include <mutex>
#include <system_error>
#include <thread>

#include "kernels/weight_pack.h"

namespace lfm {

namespace {

class CpuPreparedWeights final : public PreparedWeights {
 public:
  AlignedBuffer arena;  // every packed copy, one after another
};

}  // namespace

std::unique_ptr<PreparedWeights> prepare_cpu_weights(WeightSet& set) {
  auto out = std::make_unique<CpuPreparedWeights>();
  std::vector<TensorView*> todo;
  std::vector<PackedLayout> layouts;
  for (TensorView* t : set.matrices) {
    const PackedLayout layout = t->data ? cpu_packed_layout(*t) : PackedLayout::kNone;
    if (layout == PackedLayout::kNone) continue;
    todo.push_back(t);
    layouts.push_back(layout);
  }
  std::vector<size_t> offsets(todo.size() + 1, 0);
  for (size_t i = 0; i < todo.size(); ++i)
    offsets[i + 1] = offsets[i] + (packed_size(layouts[i], *todo[i]) + 63) / 64 * 64;
  out->arena = AlignedBuffer(offsets.back());
  auto* arena = static_cast<uint8_t*>(out->arena.data());
  // Bytes an embedding lookup still reads (a tied table is also the lm_head): never released.
  std::vector<const void*> keep;
  for (const TensorView* t : set.tables) keep.push_back(t->data);
  // Matrices are independent: one worker per core takes the next one.
  std::atomic<size_t> next{0};
  std::exception_ptr error;
  std::mutex error_mu;
  auto worker = [&] {
    for (size_t i; (i = next++) < todo.size();) {
      try {
        if (layouts[i] == PackedLayout::kPairs16)  // an F16 matrix beyond the codes: kChunks16, same size
          layouts[i] = pack_pairs16_or_chunks16_into(*todo[i], arena + offsets[i]);
        else
          pack_weight_into(layouts[i], *todo[i], arena + offsets[i]);
        if (set.release_original && std::find(keep.begin(), keep.end(), todo[i]->data) == keep.end())
          set.release_original(*todo[i]);
      } catch (...) {
        std::lock_guard lock(error_mu);
        error = std::current_exception();
      }
    }
  };
  std::vector<std::thread> threads;
  const unsigned n_threads = std::max(1u, std::thread::hardware_concurrency());
  threads.reserve(n_threads - 1);
  try {
    for (unsigned k = 1; k < n_threads; ++k) threads.emplace_back(worker);
  } catch (const std::system_error&) {
    // The OS refused a thread: the ones started (and this one) share the work.
  }
  worker();
  for (auto& th : threads) th.join();
  if (error) std::rethrow_exception(error);
  for (size_t i = 0; i < todo.size(); ++i) {
    todo[i]->packed = arena + offsets[i];
    todo[i]->packed_layout = layouts[i];
    out->host_copies.push_back({arena + offsets[i], offsets[i + 1] - offsets[i]});
    out->replaced.push_back({todo[i]->data, todo[i]->nbytes});
  }
  out->bytes = out->arena.size();
  return out;
}

}  // namespace lfm
