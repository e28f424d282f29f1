// The queue behind CUDA graphs (kernels/replay_queue.h), on host "graphs" that behave as CUDA's
// do (test::HostOpGraphs): recording keeps the ops with the arguments they had then, and a launch
// runs those again.
#include "kernels/replay_queue.h"

#include "fake_device_backend.h"

#include <gtest/gtest.h>

#include <cstring>
#include <stdexcept>
#include <vector>

namespace lfm {
namespace {

using HostGraphs = test::HostOpGraphs;

// A "step": upload the host values into dev[0..n), then dev[i] = dev[i] * scale + dev[i - 1].
void queue_step(ReplayQueue& q, std::vector<float>& dev, const std::vector<float>& host, float scale) {
  const size_t n = host.size();
  q.enqueue("upload", [](float* dst, const void* staged, size_t bytes) { std::memcpy(dst, staged, bytes); },
            dev.data(), q.stage(host.data(), n * sizeof(float)), n * sizeof(float));
  q.enqueue("scan", [](float* d, size_t n, float s) {
    for (size_t i = 1; i < n; ++i) d[i] = d[i] * s + d[i - 1];
  }, dev.data(), n, scale);
}

std::vector<float> expected(std::vector<float> v, float scale) {
  for (size_t i = 1; i < v.size(); ++i) v[i] = v[i] * scale + v[i - 1];
  return v;
}

TEST(ReplayQueue, ARunSeenTwiceIsRecordedAndThenReplayedWithNewData) {
  HostGraphs g;
  ReplayQueue q(g, {});
  std::vector<float> dev(5, 0.0f);
  for (int step = 0; step < 6; ++step) {
    std::vector<float> host = {1.0f * step, 2, 3, 4, 5.0f + step};
    queue_step(q, dev, host, 0.5f);
    EXPECT_FALSE(q.empty());
    EXPECT_EQ(dev[0], step == 0 ? 0.0f : static_cast<float>(step - 1)) << "ran before the flush";
    q.flush();
    EXPECT_TRUE(q.empty());
    EXPECT_EQ(dev, expected(host, 0.5f)) << "step " << step;
  }
  EXPECT_EQ(q.stats().flushes, 6);
  EXPECT_EQ(q.stats().eager, 1);
  EXPECT_EQ(q.stats().recorded, 1);
  EXPECT_EQ(q.stats().replayed, 4);
  EXPECT_EQ(g.records, 1);
  EXPECT_EQ(g.launches, 5);
}

TEST(ReplayQueue, ADifferentArgumentMakesADifferentRun) {
  HostGraphs g;
  ReplayQueue q(g, {});
  std::vector<float> dev(4, 0.0f), host = {1, 2, 3, 4};
  for (float scale : {0.5f, 0.5f, 2.0f, 0.5f, 2.0f, 2.0f}) {
    queue_step(q, dev, host, scale);
    q.flush();
    EXPECT_EQ(dev, expected(host, scale)) << scale;
  }
  // 0.5: eager, recorded, replayed; 2.0: eager, recorded, replayed.
  EXPECT_EQ(q.stats().eager, 2);
  EXPECT_EQ(q.stats().recorded, 2);
  EXPECT_EQ(q.stats().replayed, 2);
  // A shorter upload is another run too (the size is an argument).
  std::vector<float> shorter = {7, 8, 9};
  queue_step(q, dev, shorter, 2.0f);
  q.flush();
  EXPECT_EQ(q.stats().eager, 3);
  EXPECT_EQ(std::vector<float>(dev.begin(), dev.begin() + 3), expected(shorter, 2.0f));
}

TEST(ReplayQueue, DisabledRunsEveryOpAtOnce) {
  HostGraphs g;
  ReplayQueue::Options o;
  o.enabled = false;
  ReplayQueue q(g, o);
  int runs = 0;
  q.enqueue("op", [&runs](int add) { runs += add; }, 3);
  EXPECT_EQ(runs, 3);
  EXPECT_TRUE(q.empty());
  q.flush();
  EXPECT_EQ(q.stats().flushes, 0);
  EXPECT_EQ(g.records + g.launches, 0);
}

TEST(ReplayQueue, StagedBytesKeepTheirAddressesAndAreNotOverwrittenWhileInUse) {
  HostGraphs g;
  ReplayQueue q(g, {});
  std::vector<uint8_t> small(100, 1), big(3 << 20, 2);
  std::vector<void*> first;
  first.push_back(q.stage(small.data(), small.size()));
  first.push_back(q.stage(big.data(), big.size()));  // past the first chunk: a chunk of its own
  first.push_back(q.stage(small.data(), small.size()));
  EXPECT_EQ(std::memcmp(first[1], big.data(), big.size()), 0);
  q.enqueue("use", [](int) {}, 0);
  q.flush();
  const int waits = g.waits;
  // The same sizes again land where they did, after a wait for the ops that read them.
  std::vector<void*> again;
  again.push_back(q.stage(small.data(), small.size()));
  EXPECT_EQ(g.waits, waits + 1);
  again.push_back(q.stage(big.data(), big.size()));
  again.push_back(q.stage(small.data(), small.size()));
  EXPECT_EQ(g.waits, waits + 1);
  EXPECT_EQ(first, again);
  for (void* p : again) EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u);
}

// A step launched in two runs (Backend::launch_queued): the second run's staged bytes go after
// the first's, which its launched ops may still read, without a wait; the step's last flush
// starts the staging over.
TEST(ReplayQueue, AMidStepFlushKeepsTheStagedBytesAndDoesNotWait) {
  HostGraphs g;
  ReplayQueue q(g, {});
  std::vector<uint8_t> a(100, 1), b(100, 2);
  void* first = q.stage(a.data(), a.size());
  q.enqueue("layers", [](int) {}, 0);
  EXPECT_FALSE(q.mid_step());
  q.flush(/*mid_step=*/true);
  EXPECT_TRUE(q.mid_step());  // the owner stages what the next ops read, even with none queued
  const int waits = g.waits;
  void* second = q.stage(b.data(), b.size());
  EXPECT_EQ(g.waits, waits);
  EXPECT_NE(second, first);
  EXPECT_EQ(std::memcmp(first, a.data(), a.size()), 0) << "the first run's bytes were overwritten";
  q.enqueue("head", [](int) {}, 1);
  q.flush();
  EXPECT_FALSE(q.mid_step());
  EXPECT_TRUE(q.idle());
  q.flush(/*mid_step=*/true);  // nothing queued: the step still goes on
  EXPECT_TRUE(q.mid_step());
  EXPECT_FALSE(q.idle()) << "a direct copy could wait for what the step launched";
  EXPECT_EQ(q.stats().flushes, 2);
  q.flush();
  EXPECT_FALSE(q.mid_step());
  EXPECT_TRUE(q.idle());
  // The next step's staging starts over, after a wait for both runs.
  EXPECT_EQ(q.stage(b.data(), b.size()), first);
  EXPECT_EQ(g.waits, waits + 1);
  EXPECT_EQ(q.stats().flushes, 2);
}

TEST(ReplayQueue, StagingAfterTheOwnerWaitedDoesNotWaitAgain) {
  HostGraphs g;
  ReplayQueue q(g, {});
  std::vector<uint8_t> bytes(100, 3);
  void* first = q.stage(bytes.data(), bytes.size());
  q.enqueue("use", [](int) {}, 0);
  q.flush();
  q.waited();  // the owner synchronized after the flush (a download)
  const int waits = g.waits;
  EXPECT_EQ(q.stage(bytes.data(), bytes.size()), first);
  EXPECT_EQ(g.waits, waits) << "a second wait for ops the owner's wait already saw finish";
  // Without the owner's wait the next flush's staging is still waited for.
  q.enqueue("use", [](int) {}, 1);
  q.flush();
  EXPECT_EQ(q.stage(bytes.data(), bytes.size()), first);
  EXPECT_EQ(g.waits, waits + 1);
}

TEST(ReplayQueue, FreesWaitForTheQueuedOps) {
  HostGraphs g;
  ReplayQueue q(g, {});
  auto gate = q.free_gate();
  int freed = 0;
  gate->release([&] { ++freed; });  // nothing queued: at once
  EXPECT_EQ(freed, 1);
  int ran = 0;
  q.enqueue("op", [&ran](int) { ++ran; }, 1);
  gate->release([&] {
    EXPECT_EQ(ran, 1) << "freed before the op that may use it ran";
    ++freed;
  });
  EXPECT_EQ(freed, 1);
  const int waits = g.waits;
  q.flush();
  EXPECT_EQ(freed, 2);
  EXPECT_EQ(g.waits, waits + 1);
  gate->release([&] { ++freed; });
  EXPECT_EQ(freed, 3);
}

TEST(ReplayQueue, KeepsAtMostMaxGraphsDroppingTheLeastRecentlyLaunched) {
  HostGraphs g;
  ReplayQueue::Options o;
  o.record_after = 1;
  o.max_graphs = 2;
  ReplayQueue q(g, o);
  int value = 0;
  auto run = [&](int v) {
    q.enqueue("set", [&value](int x) { value = x; }, v);
    q.flush();
    EXPECT_EQ(value, v);
  };
  run(1);
  run(2);
  run(1);  // replayed: 2 is now the least recent
  run(3);  // evicts 2
  EXPECT_EQ(g.releases, 1);
  run(1);
  EXPECT_EQ(q.stats().replayed, 2);
  run(2);  // recorded again
  EXPECT_EQ(q.stats().recorded, 4);
  EXPECT_EQ(g.graphs.size(), 2u);
}

TEST(ReplayQueue, AFailingOpLeavesTheQueueUsable) {
  HostGraphs g;
  ReplayQueue q(g, {});
  auto gate = q.free_gate();
  q.enqueue("throws", [](int) { throw std::runtime_error("op failed"); }, 1);
  int freed = 0;
  gate->release([&] { ++freed; });
  EXPECT_THROW(q.flush(), std::runtime_error);
  EXPECT_TRUE(q.empty());
  EXPECT_EQ(freed, 1);
  int ran = 0;
  q.enqueue("ok", [&ran](int) { ++ran; }, 1);
  q.flush();
  EXPECT_EQ(ran, 1);
}

}  // namespace
}  // namespace lfm
