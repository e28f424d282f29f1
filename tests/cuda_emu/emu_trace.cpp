// The emulator's trace (emu_trace.h). Distinct sectors are counted with a 32-bit byte mask per
// 32-byte sector of each device allocation (allocated when an allocation is first touched while
// tracing) and a list of the sectors touched, which end-of-launch and end-of-step counting walk
// and clear: no per-launch pass over all of memory.
#include "cuda_emu/emu_trace.h"

#include <algorithm>
#include <bit>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <unordered_map>

#include "cuda_emu/emu_threads.h"

namespace lfm_emu {

bool g_trace_accesses = false;

namespace trace {
namespace {

constexpr uintptr_t kSector = 32;

// One mask per sector of an allocation, and the sectors whose mask is non-zero.
struct Masks {
  std::vector<uint32_t> mask;
  std::vector<uint32_t> touched;
  void add(size_t sectors, size_t s, uint32_t bits) {
    if (mask.empty()) mask.assign(sectors, 0);
    if (mask[s] == 0) touched.push_back(static_cast<uint32_t>(s));
    mask[s] |= bits;
  }
  // Distinct sectors and bytes, then cleared.
  void drain(uint64_t& sectors, uint64_t& useful) {
    for (uint32_t s : touched) {
      useful += static_cast<uint64_t>(std::popcount(mask[s]));
      mask[s] = 0;
    }
    sectors += touched.size();
    touched.clear();
  }
};

struct Alloc {
  size_t bytes;
  Masks load, store, step_load;
  size_t sectors() const { return (bytes + kSector - 1) / kSector; }
};

std::mutex g_mu;
bool g_active = false;
Step g_step;
std::string g_op;
std::map<uintptr_t, std::unique_ptr<Alloc>> g_allocs;
bool g_replaying = false;
bool g_per_request = false;

// The warp-level requests of the block running now: (warp, lane's access ordinal, store) → the
// bytes asked for and the sectors touched by the warp's lanes.
struct Request {
  std::vector<std::pair<uintptr_t, uint32_t>> sectors;  // (sector, bytes of it asked for)
};
std::unordered_map<uint64_t, Request> g_requests;
std::vector<uint32_t> g_ordinal;  // per thread of the block: its next access's ordinal
uint64_t g_block = ~0ull;          // linear index of the block the requests belong to
Launch* g_launch = nullptr;  // the launch running now (in g_step.launches)
std::pair<uintptr_t, Alloc*> g_last{0, nullptr};  // the allocation of the last access

Alloc* find(uintptr_t a, uintptr_t& base) {
  if (g_last.second && a >= g_last.first && a < g_last.first + g_last.second->bytes) {
    base = g_last.first;
    return g_last.second;
  }
  auto it = g_allocs.upper_bound(a);
  if (it == g_allocs.begin()) return nullptr;
  --it;
  if (a >= it->first + it->second->bytes) return nullptr;
  g_last = {it->first, it->second.get()};
  base = it->first;
  return it->second.get();
}

void flush_requests(Launch& l) {
  for (auto& [key, r] : g_requests) {
    std::sort(r.sectors.begin(), r.sectors.end());
    l.requests += 1;
    for (size_t i = 0; i < r.sectors.size();) {  // each sector once, with the union of its bytes
      uint32_t mask = 0;
      size_t j = i;
      for (; j < r.sectors.size() && r.sectors[j].first == r.sectors[i].first; ++j) mask |= r.sectors[j].second;
      l.request_sectors += 1;
      l.request_bytes += static_cast<uint64_t>(std::popcount(mask));
      i = j;
    }
  }
  g_requests.clear();
  std::fill(g_ordinal.begin(), g_ordinal.end(), 0u);
}

void drain_all(Launch& l) {
  flush_requests(l);
  g_block = ~0ull;
  for (auto& [base, a] : g_allocs) {
    a->load.drain(l.load_sectors, l.load_useful);
    a->store.drain(l.store_sectors, l.store_useful);
  }
}

}  // namespace

void begin(bool per_request) {
  std::lock_guard<std::mutex> lock(g_mu);
  g_per_request = per_request;
  g_step = Step{};
  g_active = true;
}

Step end() {
  std::lock_guard<std::mutex> lock(g_mu);
  g_active = false;
  g_per_request = false;
  for (auto& [base, a] : g_allocs) a->step_load.drain(g_step.load_sectors, g_step.load_useful);
  return std::move(g_step);
}

bool active() {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_active;
}

void set_op(std::string_view op) {
  std::lock_guard<std::mutex> lock(g_mu);
  g_op = op;
}

void launch_begin(const char* kernel, dim3 grid, dim3 block, bool pdl) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (!g_active) return;
  Launch l;
  l.kernel = kernel;
  l.pdl = pdl;
  l.op = g_op;
  l.grid = grid;
  l.block = block;
  l.in_graph = g_replaying;
  if (!g_replaying) ++g_step.host_launches;
  g_step.launches.push_back(std::move(l));
  g_launch = &g_step.launches.back();
  g_trace_accesses = true;
}

void launch_end() {
  std::lock_guard<std::mutex> lock(g_mu);
  g_trace_accesses = false;
  if (!g_launch) return;
  drain_all(*g_launch);
  g_launch = nullptr;
}

void copy(cudaMemcpyKind kind, size_t bytes) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (!g_active) return;
  if (kind == cudaMemcpyHostToDevice) ++g_step.uploads, g_step.up_bytes += bytes;
  if (kind == cudaMemcpyDeviceToHost) ++g_step.downloads, g_step.down_bytes += bytes;
  if (kind == cudaMemcpyDeviceToDevice) ++g_step.device_copies, g_step.device_copy_bytes += bytes;
}

void memset_call() {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_active) ++g_step.memsets;
}

void sync_call() {
  std::lock_guard<std::mutex> lock(g_mu);
  if (!g_active) return;
  ++g_step.syncs;
  g_step.sync_at.push_back(g_step.host_launches);
}

void graph_launch_call() {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_active) ++g_step.graph_launches, ++g_step.host_launches;
}

void graph_replay(bool running) {
  std::lock_guard<std::mutex> lock(g_mu);
  g_replaying = running;
}

void allocation(const void* base, size_t bytes) {
  std::lock_guard<std::mutex> lock(g_mu);
  auto a = std::make_unique<Alloc>();
  a->bytes = bytes;
  g_allocs[reinterpret_cast<uintptr_t>(base)] = std::move(a);
}

void release(const void* base) {
  std::lock_guard<std::mutex> lock(g_mu);
  g_allocs.erase(reinterpret_cast<uintptr_t>(base));
  g_last = {0, nullptr};
}

}  // namespace trace

// Called from the kernels' fibers; launches run one at a time under the runtime's lock, so the
// trace's state needs no lock of its own here.
void trace_serial_passes_slow(int passes) {
  if (trace::g_launch) trace::g_launch->serial_passes += passes;
}

void trace_access_slow(const void* p, size_t bytes, bool store) {
  using namespace trace;
  if (!g_launch || bytes == 0) return;
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  uintptr_t base = 0;
  Alloc* al = find(a, base);
  if (!al) return;  // not device memory (a kernel's parameter struct, shared memory)
  g_launch->traced = true;
  (store ? g_launch->store_bytes : g_launch->load_bytes) += bytes;
  if (g_per_request && !store) {
    const dim3& bd = block_dim();
    const uint3 &b = block_idx(), &t = thread_idx();
    const dim3 gd = g_launch->grid;
    const uint64_t block = (static_cast<uint64_t>(b.z) * gd.y + b.y) * gd.x + b.x;
    if (block != g_block) {
      flush_requests(*g_launch);
      g_block = block;
      g_ordinal.assign(static_cast<size_t>(bd.x) * bd.y * bd.z, 0u);
    }
    const uint32_t tid = (t.z * bd.y + t.y) * bd.x + t.x;
    const uint64_t key = (static_cast<uint64_t>(tid / 32) << 32) | g_ordinal[tid]++;
    Request& r = g_requests[key];
    for (uintptr_t off = a, end = a + bytes; off < end;) {
      const uintptr_t lo = off % kSector, hi = std::min<uintptr_t>(kSector, lo + (end - off));
      r.sectors.emplace_back(off / kSector, hi - lo == 32 ? ~0u : ((1u << (hi - lo)) - 1u) << lo);
      off += hi - lo;
    }
  }
  const size_t n = al->sectors();
  for (uintptr_t off = a - base, end = a - base + bytes; off < end;) {
    const size_t s = off / kSector;
    const uintptr_t lo = off % kSector, hi = std::min<uintptr_t>(kSector, lo + (end - off));
    const uint32_t bits = hi - lo == 32 ? ~0u : ((1u << (hi - lo)) - 1u) << lo;
    if (s >= n) throw std::runtime_error("cuda emulator: a traced access past its allocation");
    (store ? al->store : al->load).add(n, s, bits);
    if (!store) al->step_load.add(n, s, bits);
    off += hi - lo;
  }
}

}  // namespace lfm_emu
