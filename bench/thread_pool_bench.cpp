// Thread pool: the cost of one parallel pass of a short job (what a decode step runs hundreds
// of times), on its own and with other processes' pools competing for the same cores. The
// competitors are pools in background threads of this process running the same passes
// nonstop, which is what another lfm process (or ctest -j2) looks like to the scheduler.
#include <benchmark/benchmark.h>

#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

#include "core/thread_pool.h"

namespace {

using lfm::ThreadPool;

// ~2 µs of arithmetic per thread: shorter than a decode pass, so the pass overhead shows.
void short_pass(ThreadPool& pool, std::vector<float>& data) {
  pool.parallel_for(static_cast<int64_t>(data.size()), 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) data[static_cast<size_t>(i)] = data[static_cast<size_t>(i)] * 0.999f + 1.0f;
  });
}

// Arg: how many competing 2-thread pools run passes at the same time.
void BM_ThreadPoolShortPass(benchmark::State& state) {
  const int competitors = static_cast<int>(state.range(0));
  std::atomic<bool> stop{false};
  std::vector<std::thread> others;
  for (int c = 0; c < competitors; ++c)
    others.emplace_back([&stop] {
      ThreadPool pool(2);
      std::vector<float> data(4096, 1.0f);
      while (!stop.load(std::memory_order_relaxed)) short_pass(pool, data);
    });
  ThreadPool pool(2);
  std::vector<float> data(4096, 1.0f);
  for (auto _ : state) {
    short_pass(pool, data);
    benchmark::DoNotOptimize(data.data());
  }
  stop = true;
  for (auto& t : others) t.join();
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_ThreadPoolShortPass)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond)->UseRealTime()->MinTime(0.5);

}  // namespace
