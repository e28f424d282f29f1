// A cost model of the CUDA backend on an H200, from what the emulator's trace saw
// (emu_trace.h): each launch is predicted to take
//   max(launch floor, bytes moved / achievable HBM bandwidth, FLOPs / peak) + serial passes
// where bytes moved are the distinct 32-byte sectors the launch touched (what DRAM would serve),
// the floor is the launch's own cost: ~5 µs per launch issued from the host one by one (the
// 2026-12-04 H200 profile: small kernels at 10–12 µs with a wait on each side, a step of ~250
// launches 1.88 ms), ~1.5 µs per node when a CUDA graph is replayed, and serial passes are those
// one block makes alone at the launch's end (a last-block RMSNorm). Each host round trip (a
// synchronisation) adds a fixed latency. Launches whose accesses are not announced to the trace
// (untraced: the row ops, cuBLAS) are predicted at their floor, except cuBLAS GEMMs, whose m, n, k
// the trace keeps (bytes of the operands once, FLOPs on the tensor cores).
//
// The model is for decode, which is memory- and launch-bound: FLOPs of a GEMV (2 per weight) are
// ~1% of what its bytes cost at these peaks and never decide a launch's time.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "cuda_emu/emu_trace.h"

namespace lfm_emu::cost {

struct Device {
  const char* name = "H200 SXM";
  double hbm_bytes_per_s = 4.8e12;
  double achievable = 0.85;            // share of HBM bandwidth a good streaming kernel reaches
  double bf16_tensor_flops = 989e12;   // dense BF16 tensor-core peak
  double fp32_flops = 67e12;           // CUDA-core FP32 peak
  double launch_floor_s = 5e-6;        // per launch issued from the host
  double graph_node_floor_s = 1.5e-6;  // per node of a replayed graph
  double round_trip_s = 10e-6;         // per host synchronisation (wait + wake-up)
  // One block's pass over a row of a few thousand floats in L2 after the rest of its grid is done
  // (a last-block RMSNorm): a few dependent L2 round trips per thread, none overlapped by other blocks.
  double serial_pass_s = 0.5e-6;
};

// One op's share of a step (launches grouped by the backend op they serve, or their kernel).
struct OpRow {
  std::string op;
  double launches = 0;
  double load_bytes = 0, moved_bytes = 0, useful_bytes = 0;  // requested, sectors · 32, distinct
  double flops = 0;
  double seconds = 0;   // predicted
  double floor_s = 0;   // of which launch floor alone (the rest is bytes or FLOPs above it)
  bool traced = true;   // every launch announced its accesses
};

// Per-op rows of a traced step (in the order ops first appear). `graphs`: the launches run as
// nodes of a replayed graph (their floor is graph_node_floor_s).
std::vector<OpRow> op_rows(const trace::Step& step, const Device& dev, bool graphs);

// a · x + b · y row by row (matched by op name; rows missing from one count as zero), for
// building a full model's step out of steps of cut-down ones.
std::vector<OpRow> combine(const std::vector<OpRow>& x, double a, const std::vector<OpRow>& y, double b);

struct StepPrediction {
  double kernels_s = 0;      // Σ of the rows' predicted seconds
  double round_trips_s = 0;  // syncs · round_trip_s
  double seconds() const { return kernels_s + round_trips_s; }
};
StepPrediction predict(const std::vector<OpRow>& rows, int syncs, const Device& dev);

// The rows as a fixed-width table, slowest first, with a total line.
std::string table(const std::vector<OpRow>& rows, const StepPrediction& p, const Device& dev);

}  // namespace lfm_emu::cost
