// The Backend interface's device side (issue 36): host DeviceMemory; a state cache that moves its
// bytes only through the memory it was given; the fake device's sealed memory; the backend
// factory and `--device`; and a Forward over a backend whose memory the host must not read
// directly, which has to give the same logits (and greedy ids) as the plain run, allocate nothing
// in steady decode steps and replay one recorded graph. The row, MoE, encoder and speech ops
// against plain loops are in backend_ops_test.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <numeric>
#include <random>

#include "core/error.h"
#include "core/thread_pool.h"
#include "engine/sampler.h"
#include "kernels/backend_factory.h"
#include "kernels/cpu_backend.h"
#include "kernels/reference_backend.h"
#include "model/forward.h"
#include "model/model.h"
#include "fake_device_backend.h"
#include "model_test_util.h"
#include "test_util.h"

namespace lfm {
namespace {

TEST(DeviceMemory, HostMemoryAllocatesZeroedAndMovesBytes) {
  DeviceMemory& mem = host_memory();
  EXPECT_TRUE(mem.host_memory());
  DeviceBuffer buf = mem.allocate(1000);
  ASSERT_NE(buf.data(), nullptr);
  EXPECT_EQ(buf.size(), 1000u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(buf.data()) % 64, 0u);
  for (size_t i = 0; i < 1000; ++i) ASSERT_EQ(buf.as<uint8_t>()[i], 0);
  std::vector<uint8_t> src(100), back(100);
  std::iota(src.begin(), src.end(), 1);
  mem.upload(buf.data(), src.data(), 100);
  mem.copy(buf.as<uint8_t>() + 200, buf.data(), 100);
  mem.fill_zero(buf.data(), 50);
  mem.download(back.data(), buf.as<uint8_t>() + 200, 100);
  EXPECT_EQ(back, src);
  EXPECT_EQ(buf.as<uint8_t>()[49], 0);
  EXPECT_EQ(buf.as<uint8_t>()[50], 51);
  ensure_capacity(mem, buf, 500);  // big enough: kept
  EXPECT_EQ(buf.size(), 1000u);
  ensure_capacity(mem, buf, 5000);
  EXPECT_GE(buf.size(), 5000u);
  EXPECT_EQ(mem.allocate(0).size(), 0u);
}

// Host memory that counts what goes through it.
class CountingMemory : public DeviceMemory {
 public:
  DeviceBuffer allocate(size_t bytes) override {
    allocated += bytes;
    return DeviceMemory::allocate(bytes);
  }
  void copy(void* dst, const void* src, size_t bytes) override {
    ++copies;
    DeviceMemory::copy(dst, src, bytes);
  }
  void fill_zero(void* dst, size_t bytes) override {
    ++zeroings;
    DeviceMemory::fill_zero(dst, bytes);
  }
  size_t allocated = 0;
  int copies = 0, zeroings = 0;
};

TEST(DeviceMemory, StateCacheKeepsItsPoolsInTheMemoryItIsGiven) {
  StateShape shape;
  shape.attn_layers = 1;
  shape.kv_heads = 2;
  shape.head_dim = 4;
  shape.conv_layers = 2;
  shape.conv_dim = 8;
  shape.conv_kernel = 3;
  StateCacheOptions opt;
  opt.block_tokens = 4;
  opt.n_blocks = 8;
  opt.n_slots = 2;
  CountingMemory mem;
  StateCache cache(shape, opt, mem);
  EXPECT_EQ(mem.allocated, cache.bytes().total());
  Sequence* a = cache.open(16);
  EXPECT_EQ(mem.zeroings, 2);  // the slot's state in each conv layer
  // A full block enters the prefix cache; a new sequence over it restores the conv snapshot
  // through the memory (one copy per conv layer).
  const std::vector<int32_t> toks = {1, 2, 3, 4, 5};
  ASSERT_TRUE(cache.reserve(*a, 5));
  cache.run(*a, 0, 5);
  cache.commit(*a, toks);
  Sequence* b = cache.open(16);
  EXPECT_EQ(cache.attach_prefix(*b, toks), 4);
  EXPECT_EQ(mem.copies, 2);
}

// The fake device's memory is sealed outside its ops, so host code that reads device memory
// directly (which a GPU forbids) crashes in the fake-device tests instead of passing by accident.
TEST(FakeDeviceBackendDeathTest, HostCannotReadItsMemoryOutsideOps) {
  ThreadPool pool(1);
  test::FakeDeviceBackend be(pool);
  DeviceBuffer b = be.allocate(16 * sizeof(float));
  const std::vector<float> host(16, 1.5f);
  be.upload(b.data(), host.data(), 16 * sizeof(float));
  std::vector<float> back(16);
  be.download(back.data(), b.data(), 16 * sizeof(float));
  EXPECT_EQ(back, host);
  EXPECT_DEATH(
      {
        volatile float f = *b.as<float>();
        (void)f;
      },
      "");
}

TEST(BackendFactory, ParsesDevicesAndExplainsAMissingGpu) {
  EXPECT_EQ(parse_device("cpu"), DeviceKind::kCpu);
  EXPECT_EQ(parse_device("CUDA"), DeviceKind::kCuda);
  EXPECT_EQ(parse_device("auto"), DeviceKind::kAuto);
  try {
    parse_device("tpu");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'tpu'"), std::string::npos) << e.what();
  }
  ThreadPool pool(1);
  EXPECT_TRUE(make_backend(DeviceKind::kCpu, pool)->host_memory());
  std::string why;
  if (cuda_device_available(&why)) GTEST_SKIP() << "this machine has a GPU";
  EXPECT_FALSE(why.empty());
  EXPECT_TRUE(make_backend(DeviceKind::kAuto, pool)->host_memory());  // auto falls back to the CPU
  try {
    make_backend(DeviceKind::kCuda, pool);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("--device cuda"), std::string::npos) << msg;
    EXPECT_NE(msg.find(why), std::string::npos) << msg;
  }
}

TEST(BackendFactory, CliRefusesCudaWithoutAGpuAndBadDevices) {
  std::string why;
  if (cuda_device_available(&why)) GTEST_SKIP() << "this machine has a GPU";
  const std::string model = test::fixture_dir("lfm2_a_fullattnidxs_tied_f32");
  const auto r = test::run_lfm("logits -m " + model + " --ids 1,2,3 --device cuda");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("--device cuda"), std::string::npos) << r.out;
  const auto bad = test::run_lfm("logits -m " + model + " --ids 1,2,3 --device tpu");
  EXPECT_NE(bad.code, 0);
  EXPECT_NE(bad.out.find("'tpu' is not a device"), std::string::npos) << bad.out;
  const auto cpu = test::run_lfm("logits -m " + model + " --ids 1,2,3 --device cpu --json");
  EXPECT_EQ(cpu.code, 0) << cpu.out;
}

// A fixture loaded for a fake device, its state cache and Forward, and three sequences each
// prefilled alone (their prompt logits kept in `prefill_logits`).
struct FakeDeviceDecoder {
  // pad: the cache has pad state for the backend's padded decode steps (as the engine's has).
  FakeDeviceDecoder(ThreadPool& pool, const std::string& name, bool replay, bool pad = false) : dev(pool, replay) {
    LoadOptions opt;
    opt.backend = &dev;
    model = load_model(test::fixture_dir(name), opt);
    StatePlanOptions plan = test::f32_plan();
    plan.parallel = 4;
    if (pad) plan.pad_rows = dev.decode_step_max_pad();
    cache = make_state_cache(*model, plan, dev);
    fwd = std::make_unique<Forward>(*model, dev, *cache);
    const std::vector<std::vector<int32_t>> prompts = {{1, 5, 9, 2}, {7, 3}, {4, 4, 4, 8, 9, 10, 11}};
    StepOutput out;
    for (const auto& p : prompts) {
      seqs.push_back(cache->open(64));
      BatchItem item{seqs.back(), p, false};
      fwd->step(std::span<const BatchItem>(&item, 1), out);
      prefill_logits.insert(prefill_logits.end(), out.logits.begin(), out.logits.end());
    }
  }
  test::FakeDeviceBackend dev;
  std::unique_ptr<Model> model;
  std::unique_ptr<StateCache> cache;
  std::unique_ptr<Forward> fwd;
  std::vector<Sequence*> seqs;
  std::vector<float> prefill_logits;
};

// Decode steps of a steady batch allocate no backend memory and move a fixed number of buffers
// (ids, positions, step descriptors up; ids or logits down): what a GPU needs to replay a captured
// step, and what keeps allocation out of the per-token path. Dense and MoE, greedy ids and logits.
TEST(DeviceNeutralForward, SteadyDecodeStepsAllocateNothing) {
  for (const std::string& name : {std::string("lfm2_c_layertypes_untied_convbias_f32"), std::string("lfm2moe_f_tied_expertbias_f32")}) {
    SCOPED_TRACE(name);
    ThreadPool pool(2);
    FakeDeviceDecoder run(pool, name, false);
    test::FakeDeviceBackend& dev = run.dev;
    StateCache* cache = run.cache.get();
    std::vector<Sequence*>& seqs = run.seqs;
    StepOutput out;
    for (bool argmax : {true, false}) {
      SCOPED_TRACE(argmax ? "greedy ids" : "logits");
      int allocs = 0, ups = 0, downs = 0;
      for (int step = 0; step < 10; ++step) {
        if (step == 3) {  // the first steps of this shape may size the buffers
          allocs = dev.allocations;
          ups = dev.uploads;
          downs = dev.downloads;
        }
        std::vector<int32_t> next(seqs.size());
        std::vector<BatchItem> items;
        for (size_t i = 0; i < seqs.size(); ++i) {
          next[i] = static_cast<int32_t>(10 + step + i);
          ASSERT_TRUE(cache->reserve(*seqs[i], 1));
          items.push_back({seqs[i], std::span<const int32_t>(&next[i], 1), false, argmax});
        }
        run.fwd->step(items, out);
      }
      EXPECT_EQ(dev.allocations, allocs) << "decode steps allocated backend memory";
      const int up_per_step = (dev.uploads - ups) / 7, down_per_step = (dev.downloads - downs) / 7;
      EXPECT_EQ((dev.uploads - ups) % 7, 0);
      EXPECT_EQ((dev.downloads - downs) % 7, 0);
      // Up: ids, positions, the rows whose logits are wanted; down: ids or logits. MoE layers
      // route and group on the backend: nothing more moves.
      EXPECT_EQ(up_per_step, 3) << "uploads per decode step";
      EXPECT_EQ(down_per_step, 1) << "downloads per decode step";
    }
  }
}

// With its ops queued and replayed (what the CUDA backend does with LFM_CUDA_GRAPHS=1), a device
// backend gives the same bits, and the decode steps of a steady batch are one recorded graph
// replayed: every value they depend on goes up through uploads (ids, positions, descriptors), so
// their ops and arguments repeat. Prefill steps run op by op.
TEST(DeviceNeutralForward, DecodeStepsReplayOneRecordedGraph) {
  for (const std::string& name : {std::string("lfm2_c_layertypes_untied_convbias_f32"), std::string("lfm2moe_f_tied_expertbias_f32")}) {
    SCOPED_TRACE(name);
    ThreadPool pool(2);
    auto run = [&](bool replay, ReplayQueue::Stats* stats) {
      FakeDeviceDecoder d(pool, name, replay);
      std::vector<Sequence*>& seqs = d.seqs;
      std::vector<float> seen = d.prefill_logits;  // then every step's greedy ids and logits
      StepOutput out;
      std::vector<int32_t> next = {2, 3, 4};
      for (int step = 0; step < 24; ++step) {  // greedy: each sequence takes its argmax
        const bool greedy_ids = step >= 12;
        std::vector<BatchItem> items;
        for (size_t i = 0; i < seqs.size(); ++i) items.push_back({seqs[i], std::span<const int32_t>(&next[i], 1), false, greedy_ids});
        d.fwd->step(items, out);
        for (size_t i = 0; i < seqs.size(); ++i) {
          next[i] = greedy_ids ? out.argmax[i] : argmax(out.row(i), out.vocab);
          seen.push_back(static_cast<float>(next[i]));
          if (!greedy_ids) seen.insert(seen.end(), out.row(i), out.row(i) + out.vocab);
        }
      }
      if (stats) *stats = d.dev.replay_stats();
      return seen;
    };
    ReplayQueue::Stats stats;
    const std::vector<float> plain = run(false, nullptr), replayed = run(true, &stats);
    EXPECT_EQ(plain, replayed);
    // 3 prefills and 2 × 12 decode steps: each decode shape (logits, greedy ids) is seen, recorded
    // and then replayed; MoE layers too (routing, grouping and the experts' matmuls stay on the
    // device). Steps whose attention reaches another power of two of key splits would make new
    // graphs, which these short sequences never do.
    EXPECT_EQ(stats.flushes, 27);
    EXPECT_GE(stats.replayed, 20) << stats.eager << " op by op, " << stats.recorded << " recorded";
    EXPECT_LE(stats.recorded, 2);
  }
}

// Padded to the backend's batch-size buckets (Backend::decode_step_rows), decode steps of 3 and
// of 4 sequences run their layers as one recorded graph: a batch that gains or loses a sequence
// keeps replaying it, and only the head (a run of its own) is new. The pad rows change no bit of
// the sequences' results, which equal unpadded steps launched op by op. A size that is a bucket
// of its own (2 here) stays one run. Dense and MoE.
TEST(DeviceNeutralForward, DecodeStepsOfOneBucketReplayOneGraphOfLayers) {
  for (const std::string& name : {std::string("lfm2_c_layertypes_untied_convbias_f32"), std::string("lfm2moe_f_tied_expertbias_f32")}) {
    SCOPED_TRACE(name);
    ThreadPool pool(2);
    auto run = [&](bool padded, std::vector<ReplayQueue::Stats>* stats) {
      FakeDeviceDecoder d(pool, name, padded, padded);
      std::vector<Sequence*> seqs = d.seqs;
      std::vector<float> seen = d.prefill_logits;
      StepOutput out;
      std::vector<int32_t> next = {2, 3, 4, 0};
      const std::vector<int32_t> fourth = {6, 1, 12};
      auto decode = [&](const std::vector<size_t>& members, int steps) {
        for (int step = 0; step < steps; ++step) {
          std::vector<BatchItem> items;
          for (size_t i : members) items.push_back({seqs[i], std::span<const int32_t>(&next[i], 1), false, step % 2 == 1});
          d.fwd->step(items, out);
          for (size_t j = 0; j < members.size(); ++j) {
            const size_t i = members[j];
            next[i] = out.argmax[j] >= 0 ? out.argmax[j] : argmax(out.row(j), out.vocab);
            seen.push_back(static_cast<float>(next[i]));
            if (out.argmax[j] < 0) seen.insert(seen.end(), out.row(j), out.row(j) + out.vocab);
          }
          if (stats) stats->push_back(d.dev.replay_stats());
        }
      };
      decode({0, 1, 2}, 6);  // 3 sequences, padded to 4
      seqs.push_back(d.cache->open(64));
      BatchItem item{seqs[3], fourth, false};
      d.fwd->step(std::span<const BatchItem>(&item, 1), out);
      next[3] = argmax(out.row(0), out.vocab);
      if (stats) stats->push_back(d.dev.replay_stats());
      decode({0, 1, 2, 3}, 6);  // 4: the same bucket
      decode({3, 0, 2}, 4);     // 3 again, other sequences
      decode({1, 2}, 2);        // 2: a bucket of its own size alone, one run a step
      return seen;
    };
    std::vector<ReplayQueue::Stats> stats;
    const std::vector<float> plain = run(false, nullptr), padded = run(true, &stats);
    EXPECT_EQ(plain, padded);
    ASSERT_EQ(stats.size(), 19u);
    EXPECT_EQ(stats[18].flushes - stats[17].flushes, 1);
    // Each padded decode step is two runs (layers, then head); the prefill one.
    EXPECT_EQ(stats[5].flushes - stats[4].flushes, 2);
    EXPECT_EQ(stats[6].flushes - stats[5].flushes, 1);
    // Steps 1 and 2 saw and recorded the layers' run; from the third on it is replayed, also by
    // the first step of 4 sequences (stats[7], after the prefill) and the first of the other 3.
    EXPECT_GE(stats[2].replayed - stats[1].replayed, 1);
    EXPECT_GE(stats[7].replayed - stats[6].replayed, 1) << "4 sequences did not replay the layers of 3";
    EXPECT_GE(stats[13].replayed - stats[12].replayed, 1);
    // The layers: seen, recorded, then replayed by the 14 other decode steps. Heads: one each for
    // 3 and 4 sequences, greedy ids or logits, seen 2-3 times each (and 3 again after the head's
    // rows buffer grew for 4): recorded at their second sight.
    EXPECT_LE(stats.back().recorded, 7) << stats.back().eager << " op by op";
    EXPECT_GE(stats.back().replayed, 14);
  }
}

TEST(DeviceNeutralForward, ADeviceBackendGivesTheSameLogitsAsTheHostOne) {
  for (const std::string& name : {std::string("lfm2_c_layertypes_untied_convbias_f32"), std::string("lfm2moe_f_tied_expertbias_f32")}) {
    ThreadPool pool(2);
    auto host_be = make_reference_backend(pool);
    auto host_model = load_model(test::fixture_dir(name));
    test::FakeDeviceBackend dev(pool);
    LoadOptions opt;
    opt.backend = &dev;
    auto dev_model = load_model(test::fixture_dir(name), opt);
    EXPECT_EQ(dev_model->prepared_for(), &dev);
    EXPECT_NE(dev_model->weights().final_norm.device, nullptr);
    const std::vector<int32_t> ids = {1, 5, 9, 2, 7, 3};
    const auto want = test::prompt_logits(*host_model, *host_be, ids);
    const int up0 = dev.uploads;
    const auto got = test::prompt_logits(*dev_model, dev, ids);
    ASSERT_EQ(got.size(), want.size());
    for (size_t p = 0; p < want.size(); ++p) ASSERT_EQ(got[p], want[p]) << name << " position " << p;
    EXPECT_GT(dev.uploads, up0);  // ids, positions, rows moved up
    EXPECT_GT(dev.downloads, 0);  // logits (and MoE choices) came down
    // The activation observer sees the same tensors through the device backend (downloaded).
    auto observed = [&](const Model& m, Backend& be) {
      std::map<std::string, std::vector<float>> seen;
      auto cache = make_state_cache(m, test::f32_plan(), be);
      Forward fwd(m, be, *cache);
      fwd.set_observer([&](const std::string& what, const float* data, int64_t rows, int64_t cols) {
        seen[what].assign(data, data + rows * cols);
      });
      StepOutput out;
      BatchItem item{cache->open(64), ids, true};
      fwd.step(std::span<const BatchItem>(&item, 1), out);
      return seen;
    };
    const auto host_seen = observed(*host_model, *host_be), dev_seen = observed(*dev_model, dev);
    EXPECT_GT(host_seen.size(), 10u);
    EXPECT_EQ(host_seen, dev_seen);
    // A host vector handed to an op is refused, naming the op.
    std::vector<float> host(8, 1.0f);
    EXPECT_THROW(dev.add(host.data(), host.data(), 8), Error);
    // A model prepared for one backend does not run on another.
    auto cache = make_state_cache(*dev_model, test::f32_plan());
    EXPECT_THROW(Forward(*dev_model, *host_be, *cache), Error);
  }
}

// argmax_only items get the argmax of the logits they would have had (among the allowed ids),
// on the host and on a device backend, beside items that still get their logits.
TEST(DeviceNeutralForward, GreedyIdsComputedByTheBackendMatchTheLogits) {
  const std::string name = "lfm2_c_layertypes_untied_convbias_f32";
  ThreadPool pool(2);
  test::FakeDeviceBackend dev(pool);
  LoadOptions opt;
  opt.backend = &dev;
  auto dev_model = load_model(test::fixture_dir(name), opt);
  auto host_model = load_model(test::fixture_dir(name));
  auto host_be = make_reference_backend(pool);
  const std::vector<std::vector<int32_t>> prompts = {{1, 5, 9}, {2, 7}, {3, 3, 3, 8}};
  const int64_t V = host_model->config().vocab_size;
  for (bool masked : {false, true}) {
    for (auto [model, be] : {std::pair<const Model*, Backend*>{host_model.get(), host_be.get()},
                             std::pair<const Model*, Backend*>{dev_model.get(), &dev}}) {
      // References: every item's logits.
      StatePlanOptions plan = test::f32_plan();
      plan.parallel = 3;
      auto ref_cache = make_state_cache(*model, plan, *be);
      Forward ref(*model, *be, *ref_cache);
      std::vector<BatchItem> all;
      for (const auto& p : prompts) all.push_back({ref_cache->open(64), p, false, false});
      StepOutput want;
      ref.step(all, want);
      std::vector<uint8_t> allowed(static_cast<size_t>(V), 1);
      if (masked)  // forbid item 0's favourite: the next best allowed id must come
        allowed[static_cast<size_t>(argmax(want.row(0), V))] = 0;
      auto cache = make_state_cache(*model, plan, *be);
      Forward fwd(*model, *be, *cache);
      fwd.set_allowed_tokens(allowed);
      std::vector<BatchItem> items;
      for (size_t i = 0; i < prompts.size(); ++i) items.push_back({cache->open(64), prompts[i], false, i != 1});
      StepOutput got;
      fwd.step(items, got);
      for (size_t i : {size_t{0}, size_t{2}}) {
        int64_t best = -1;
        for (int64_t t = 0; t < V; ++t)
          if (allowed[t] && (best < 0 || want.row(i)[t] > want.row(i)[best])) best = t;
        EXPECT_EQ(got.argmax[i], best) << be->name() << " item " << i << (masked ? " masked" : "");
      }
      EXPECT_EQ(got.argmax[1], -1);
      ASSERT_EQ(got.n_rows[1], 1);
      EXPECT_TRUE(std::equal(want.row(1), want.row(1) + V, got.row(1))) << be->name();
    }
  }
}

}  // namespace
}  // namespace lfm
