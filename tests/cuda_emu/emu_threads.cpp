// The emulator's blocks and threads (emu_threads.h): fibers, one per CUDA thread of the running
// block, scheduled round-robin; a fiber leaves the CPU only at a barrier. The switch is a few
// instructions of our own (ucontext's swapcontext makes a system call per switch, which was 95%
// of an emulated matmul's time).
#include "cuda_emu/emu_threads.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <stdexcept>
#include <string>
#include <unordered_set>
#include <vector>

#include "cuda_emu/emu_internal.h"

#if !defined(__x86_64__)
#error "the CUDA emulator's fiber switch is written for x86-64"
#endif

// Saves the callee-saved registers on the current stack, stores the stack pointer in *save_sp,
// and resumes the fiber whose stack pointer is load_sp. The SSE/x87 control words are not
// switched: every fiber of a launch runs with the launching thread's (kernels do not change them).
extern "C" void lfm_emu_switch(void** save_sp, void* load_sp);
asm(R"(
  .text
  .globl lfm_emu_switch
  .type lfm_emu_switch, @function
lfm_emu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size lfm_emu_switch, .-lfm_emu_switch
)");

namespace lfm_emu {
namespace {

constexpr size_t kStackBytes = 256 * 1024;  // kernels keep small arrays in registers; 4 KiB guard below
constexpr size_t kGuardBytes = 4096;

enum class Wait { kRunnable, kBlock, kWarp, kDone };

struct Fiber {
  void* sp = nullptr;  // saved stack pointer while switched out
  uint3 tid{};
  Wait wait = Wait::kRunnable;
  uint64_t gen = 0;
  void* stack = nullptr;
  uint64_t collectives = 0;  // warp_collective calls this block
  bool waited = false;       // LFM_GRID_DEPENDENCY_WAIT called this block
};

// warp_collective's memo: call k of a warp's lanes in slot k % kCollectiveSlots.
constexpr size_t kCollectiveSlots = 512;
struct Collective {
  uint64_t call = ~uint64_t{0};
  std::vector<unsigned char> in, out;
};

struct Warp {
  int live = 0, arrived = 0;
  uint64_t gen = 0;
  uint64_t slot[2][32] = {};  // exchange k uses slot[k % 2]: a lane can be at most one exchange ahead
  std::vector<uint64_t> many[2];  // the same for reductions of several values: [value][lane]
  std::vector<Collective> collectives;
};

// The running launch; only touched under g_launch_lock.
struct Run {
  const LaunchConfig* cfg = nullptr;
  const std::function<void()>* body = nullptr;
  uint3 bidx{};
  uint3 tid{};
  std::vector<Fiber> fibers;  // stacks kept from launch to launch
  std::vector<Warp> warps;
  int n = 0, live = 0, arrived = 0, current = 0;
  uint64_t gen = 0;
  bool in_fibers = false;
  bool synced = false;
  bool direct_waited = false;  // run_block_directly's thread called LFM_GRID_DEPENDENCY_WAIT
  std::string pdl_error;       // the first access before a wait in a pdl launch
  void* scheduler_sp = nullptr;
  std::vector<unsigned char> dynamic;
};

Run g_run;
std::mutex g_launch_lock;
std::unordered_set<const void*> g_seen, g_syncing;  // kernels launched before; those that synchronised

bool g_on_fiber = false;  // a fiber's stack is running: an exception could not unwind to the caller

[[noreturn]] void misuse(const std::string& what) {
  const std::string msg = "cuda emulator: " + what + (g_run.cfg ? std::string(" in ") + g_run.cfg->kernel : "");
  if (g_on_fiber) {
    std::fprintf(stderr, "%s\n", msg.c_str());
    std::abort();
  }
  throw std::runtime_error(msg);
}

void* new_stack() {
  void* p = mmap(nullptr, kStackBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) throw std::runtime_error("cuda emulator: cannot map a fiber stack");
  mprotect(p, kGuardBytes, PROT_NONE);  // a kernel overflowing its stack faults instead of corrupting
  return p;
}

Fiber& current() { return g_run.fibers[static_cast<size_t>(g_run.current)]; }

void release_block_if_complete() {
  if (g_run.arrived > 0 && g_run.arrived == g_run.live) {
    ++g_run.gen;
    g_run.arrived = 0;
  }
}

void release_warp_if_complete(Warp& w) {
  if (w.arrived > 0 && w.arrived == w.live) {
    ++w.gen;
    w.arrived = 0;
  }
}

bool runnable(int i) {
  const Fiber& f = g_run.fibers[static_cast<size_t>(i)];
  switch (f.wait) {
    case Wait::kRunnable: return true;
    case Wait::kBlock: return f.gen != g_run.gen;
    case Wait::kWarp: return f.gen != g_run.warps[static_cast<size_t>(i / 32)].gen;
    case Wait::kDone: return false;
  }
  return false;
}

// The first runnable fiber after `from` (round-robin), or -1.
int next_runnable(int from) {
  for (int k = 1; k <= g_run.n; ++k) {
    const int i = (from + k) % g_run.n;
    if (runnable(i)) return i;
  }
  return -1;
}

// Leaves the running fiber (its stack pointer saved in *save) for the next runnable one, straight
// from fiber to fiber (half the switches of going through the scheduler), or for the scheduler
// when none can run (all done, or a deadlock it reports).
void switch_away(void** save) {
  const int next = next_runnable(g_run.current);
  if (next < 0) {
    lfm_emu_switch(save, g_run.scheduler_sp);
    return;
  }
  Fiber& f = g_run.fibers[static_cast<size_t>(next)];
  f.wait = Wait::kRunnable;
  g_run.current = next;
  g_run.tid = f.tid;
  if (&f.sp != save) lfm_emu_switch(save, f.sp);
}

[[noreturn]] void fiber_main() {
  (*g_run.body)();
  Fiber& f = current();
  f.wait = Wait::kDone;
  --g_run.live;
  Warp& w = g_run.warps[static_cast<size_t>(g_run.current / 32)];
  --w.live;
  release_block_if_complete();
  release_warp_if_complete(w);
  switch_away(&f.sp);  // never resumed
  std::abort();
}

// A fresh stack whose first switch-in "returns" into fiber_main with the ABI's alignment. Fiber i's
// stack starts i · 640 bytes (mod 64 KiB) below its mapping's end: stacks that all started at the
// same offset of a 256 KiB mapping would share a handful of cache sets, and every switch missed.
void* initial_stack_pointer(void* stack, int i) {
  auto top = reinterpret_cast<uintptr_t>(stack) + kStackBytes - static_cast<uintptr_t>(i) * 640 % 65536;
  top &= ~uintptr_t{15};
  auto* slot = reinterpret_cast<uint64_t*>(top);
  slot[-1] = 0;                                             // fiber_main's (unused) return address
  slot[-2] = reinterpret_cast<uint64_t>(&fiber_main);      // where lfm_emu_switch's ret goes
  for (int r = 3; r <= 8; ++r) slot[-r] = 0;                // rbp, rbx, r12..r15
  return &slot[-8];
}

uint3 thread_at(int i, const dim3& b) {
  const unsigned u = static_cast<unsigned>(i);
  return uint3{u % b.x, (u / b.x) % b.y, u / (b.x * b.y)};
}

void run_block_in_fibers() {
  Run& r = g_run;
  for (int i = 0; i < r.n; ++i) {
    Fiber& f = r.fibers[static_cast<size_t>(i)];
    if (!f.stack) f.stack = new_stack();
    f.sp = initial_stack_pointer(f.stack, i);
    f.tid = thread_at(i, r.cfg->block);
    f.wait = Wait::kRunnable;
    f.collectives = 0;
    f.waited = false;
  }
  r.live = r.n;
  r.arrived = 0;
  const int n_warps = (r.n + 31) / 32;
  r.warps.resize(static_cast<size_t>(n_warps));  // kept from block to block: no allocation per block
  for (int w = 0; w < n_warps; ++w) {
    Warp& warp = r.warps[static_cast<size_t>(w)];
    warp.live = std::min(32, r.n - 32 * w);
    warp.arrived = 0;
    warp.gen = 0;
    for (Collective& c : warp.collectives) c.call = ~uint64_t{0};
  }
  // The fibers pass the CPU among themselves; the scheduler gets it back when none can run.
  for (;;) {
    const int i = next_runnable(r.n - 1);
    if (i < 0) {
      if (r.live == 0) return;
      misuse("deadlock: threads wait at a barrier the others never reach");
    }
    Fiber& f = r.fibers[static_cast<size_t>(i)];
    f.wait = Wait::kRunnable;
    r.current = i;
    r.tid = f.tid;
    g_on_fiber = true;
    lfm_emu_switch(&r.scheduler_sp, f.sp);
    g_on_fiber = false;
  }
}

void run_block_directly() {
  Run& r = g_run;
  for (int i = 0; i < r.n; ++i) {
    r.current = i;
    r.tid = thread_at(i, r.cfg->block);
    r.direct_waited = false;
    (*r.body)();
  }
}

void wait_here(Wait kind, uint64_t gen) {
  Fiber& f = current();
  f.wait = kind;
  f.gen = gen;
  switch_away(&f.sp);
}

void enter_barrier() {
  if (!g_run.cfg) misuse("a barrier outside a kernel");
  g_run.synced = true;
  if (!g_run.in_fibers) misuse("a barrier in a kernel that ran its first launch without one");
}

void warp_barrier() {
  Warp& w = g_run.warps[static_cast<size_t>(g_run.current / 32)];
  if (++w.arrived == w.live) {
    ++w.gen;
    w.arrived = 0;
    return;
  }
  wait_here(Wait::kWarp, w.gen);
}

}  // namespace

const uint3& thread_idx() { return g_run.tid; }
const uint3& block_idx() { return g_run.bidx; }
const dim3& block_dim() { return g_run.cfg->block; }
const dim3& grid_dim() { return g_run.cfg->grid; }
void* dynamic_shared() { return g_run.dynamic.data(); }

void sync_block() {
  enter_barrier();
  if (++g_run.arrived == g_run.live) {
    ++g_run.gen;
    g_run.arrived = 0;
    return;
  }
  wait_here(Wait::kBlock, g_run.gen);
}

void sync_warp() {
  enter_barrier();
  warp_barrier();
}

void wmma_misuse(const std::string& what) { misuse(what); }

void warp_collective(const void* in, size_t in_bytes, void* out, size_t out_bytes,
                     const std::function<void(void*)>& compute) {
  if (!g_run.cfg || !g_run.in_fibers) return compute(out);  // a launch run as plain calls: no warps to share with
  Fiber& f = current();
  Warp& w = g_run.warps[static_cast<size_t>(g_run.current / 32)];
  if (w.collectives.empty()) w.collectives.resize(kCollectiveSlots);
  const uint64_t call = f.collectives++;
  Collective& c = w.collectives[call % kCollectiveSlots];
  if (c.call == call) {
    if (c.in.size() != in_bytes || std::memcmp(c.in.data(), in, in_bytes) != 0)
      misuse("lanes of a warp gave a warp-wide matrix operation different inputs (call " + std::to_string(call) + ")");
    std::memcpy(out, c.out.data(), out_bytes);
    return;
  }
  compute(out);
  c.call = call;
  c.in.assign(static_cast<const unsigned char*>(in), static_cast<const unsigned char*>(in) + in_bytes);
  c.out.assign(static_cast<const unsigned char*>(out), static_cast<const unsigned char*>(out) + out_bytes);
}

int lane_id() { return g_run.current % 32; }

bool g_pdl_launch = false;

void grid_dependency_wait() {
  if (!g_run.cfg) misuse("LFM_GRID_DEPENDENCY_WAIT outside a kernel");
  (g_run.in_fibers ? current().waited : g_run.direct_waited) = true;
}

// Recorded, not raised: a fiber cannot unwind to the launch. run_grid fails the launch after.
void pdl_access_check() {
  Run& r = g_run;
  if (!r.cfg || (r.in_fibers ? current().waited : r.direct_waited) || !r.pdl_error.empty()) return;
  r.pdl_error = "thread " + std::to_string(r.current) + " of block (" + std::to_string(r.bidx.x) + "," +
                std::to_string(r.bidx.y) + "," + std::to_string(r.bidx.z) +
                ") accessed global memory before LFM_GRID_DEPENDENCY_WAIT (a programmatic dependent launch)";
}

uint64_t warp_exchange(uint64_t bits, int src) {
  enter_barrier();
  const int lane = g_run.current % 32;
  Warp& w = g_run.warps[static_cast<size_t>(g_run.current / 32)];
  const int buf = static_cast<int>(w.gen & 1);
  w.slot[buf][lane] = bits;
  warp_barrier();
  const int warp_base = g_run.current - lane;
  if (src < 0 || src >= 32 || warp_base + src >= g_run.n) misuse("a shuffle from lane " + std::to_string(src));
  // No second barrier: the next exchange writes the other slot, and the one after needs every
  // lane at the next barrier, so after it has read this one.
  return w.slot[buf][src];
}

void warp_reduce_bits(uint64_t* bits, int n, void (*butterfly)(uint64_t* lanes)) {
  enter_barrier();
  const int lane = g_run.current % 32;
  Warp& w = g_run.warps[static_cast<size_t>(g_run.current / 32)];
  if (w.live != 32) misuse("a warp reduction over " + std::to_string(w.live) + " live lanes (a full warp shuffles)");
  std::vector<uint64_t>& lanes = w.many[w.gen & 1];  // the other buffer is the next exchange's
  if (w.arrived == 0) lanes.resize(static_cast<size_t>(n) * 32);  // every entry is written below
  if (lanes.size() != static_cast<size_t>(n) * 32) misuse("lanes of a warp reducing different numbers of values");
  for (int v = 0; v < n; ++v) lanes[static_cast<size_t>(v * 32 + lane)] = bits[v];
  if (w.arrived + 1 == w.live)  // the last lane in reduces for all
    for (int v = 0; v < n; ++v) butterfly(&lanes[static_cast<size_t>(v * 32)]);
  warp_barrier();
  for (int v = 0; v < n; ++v) bits[v] = lanes[static_cast<size_t>(v * 32 + lane)];
}

unsigned warp_ballot(unsigned mask, bool predicate) {
  enter_barrier();
  const int lane = g_run.current % 32;
  const int warp_base = g_run.current - lane;
  Warp& w = g_run.warps[static_cast<size_t>(g_run.current / 32)];
  const int buf = static_cast<int>(w.gen & 1);
  w.slot[buf][lane] = predicate ? 1 : 0;
  warp_barrier();
  unsigned votes = 0;
  for (int l = 0; l < 32 && warp_base + l < g_run.n; ++l) {
    const Fiber& f = g_run.fibers[static_cast<size_t>(warp_base + l)];
    if (f.wait != Wait::kDone && w.slot[buf][l] && (mask >> l & 1u)) votes |= 1u << l;
  }
  return votes;
}

void run_grid(const LaunchConfig& cfg, const std::function<void()>& thread_body) {
  std::lock_guard<std::mutex> lock(g_launch_lock);
  Run& r = g_run;
  r.cfg = &cfg;
  r.body = &thread_body;
  r.n = static_cast<int>(cfg.block.x * cfg.block.y * cfg.block.z);
  if (r.fibers.size() < static_cast<size_t>(r.n)) r.fibers.resize(static_cast<size_t>(r.n));
  r.dynamic.assign(cfg.shared_bytes + 16, 0);
  const bool first = g_seen.insert(cfg.key).second;
  r.in_fibers = first || g_syncing.count(cfg.key) > 0;
  r.synced = false;
  r.pdl_error.clear();
  g_pdl_launch = cfg.pdl;
  try {
    for (unsigned z = 0; z < cfg.grid.z; ++z)
      for (unsigned y = 0; y < cfg.grid.y; ++y)
        for (unsigned x = 0; x < cfg.grid.x; ++x) {
          r.bidx = uint3{x, y, z};
          if (r.in_fibers)
            run_block_in_fibers();
          else
            run_block_directly();
        }
  } catch (...) {
    if (r.synced) g_syncing.insert(cfg.key);
    g_pdl_launch = false;
    r.cfg = nullptr;
    throw;
  }
  if (r.synced) g_syncing.insert(cfg.key);
  g_pdl_launch = false;
  r.cfg = nullptr;
  if (!r.pdl_error.empty()) throw std::runtime_error("cuda emulator: " + r.pdl_error + " in " + cfg.kernel);
}

}  // namespace lfm_emu
