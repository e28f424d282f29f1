#include "cuda_emu/cost_model.h"

#include <algorithm>
#include <cstdio>

namespace lfm_emu::cost {

namespace {

// One launch's bytes moved, FLOPs and predicted time.
void add_launch(OpRow& row, const trace::Launch& l, const Device& dev, bool graphs) {
  const double floor_s = graphs ? dev.graph_node_floor_s : dev.launch_floor_s;
  double moved = static_cast<double>(l.load_sectors + l.store_sectors) * 32.0;
  double flops = 0, peak = dev.fp32_flops;
  if (l.kernel == "cublasGemmEx") {
    // The trace keeps (m, n, k) as the grid: bf16 operands read once, f32 C written once.
    const double m = l.grid.x, n = l.grid.y, k = l.grid.z;
    moved = 2.0 * (m * k + k * n) + 4.0 * m * n;
    flops = 2.0 * m * n * k;
    peak = dev.bf16_tensor_flops;
  } else if (l.traced) {
    flops = static_cast<double>(l.load_useful);  // ~2 FLOPs per 2-byte weight in a GEMV: negligible
  }
  const double t = std::max({floor_s, moved / (dev.hbm_bytes_per_s * dev.achievable), flops / peak}) +
                   l.serial_passes * dev.serial_pass_s;
  row.launches += 1;
  row.load_bytes += static_cast<double>(l.load_bytes);
  row.moved_bytes += moved;
  row.useful_bytes += static_cast<double>(l.load_useful + l.store_useful);
  row.flops += flops;
  row.seconds += t;
  row.floor_s += floor_s;
  row.traced = row.traced && (l.traced || l.kernel == "cublasGemmEx");
}

std::string human_bytes(double b) {
  char s[32];
  if (b >= 1e9) std::snprintf(s, sizeof(s), "%.2f GB", b / 1e9);
  else if (b >= 1e6) std::snprintf(s, sizeof(s), "%.1f MB", b / 1e6);
  else if (b >= 1e3) std::snprintf(s, sizeof(s), "%.1f kB", b / 1e3);
  else std::snprintf(s, sizeof(s), "%.0f B", b);
  return s;
}

}  // namespace

std::vector<OpRow> op_rows(const trace::Step& step, const Device& dev, bool graphs) {
  std::vector<OpRow> rows;
  for (const trace::Launch& l : step.launches) {
    // Launches outside a named op (or of an op named only when profiling) go by their kernel.
    const std::string name = l.op.empty() ? l.kernel.substr(0, l.kernel.find('<')) : l.op;
    auto it = std::find_if(rows.begin(), rows.end(), [&](const OpRow& r) { return r.op == name; });
    if (it == rows.end()) {
      rows.push_back(OpRow{});
      rows.back().op = name;
      it = rows.end() - 1;
    }
    add_launch(*it, l, dev, graphs);
  }
  return rows;
}

std::vector<OpRow> combine(const std::vector<OpRow>& x, double a, const std::vector<OpRow>& y, double b) {
  std::vector<OpRow> out;
  auto add = [&](const OpRow& r, double s) {
    auto it = std::find_if(out.begin(), out.end(), [&](const OpRow& o) { return o.op == r.op; });
    if (it == out.end()) {
      out.push_back(OpRow{});
      out.back().op = r.op;
      it = out.end() - 1;
    }
    it->launches += s * r.launches;
    it->load_bytes += s * r.load_bytes;
    it->moved_bytes += s * r.moved_bytes;
    it->useful_bytes += s * r.useful_bytes;
    it->flops += s * r.flops;
    it->seconds += s * r.seconds;
    it->floor_s += s * r.floor_s;
    it->traced = it->traced && r.traced;
  };
  for (const OpRow& r : x) add(r, a);
  for (const OpRow& r : y) add(r, b);
  // Differences of cut-down models can leave rounding dust in rows an op does not have.
  std::erase_if(out, [](const OpRow& r) { return r.launches < 0.5; });
  return out;
}

StepPrediction predict(const std::vector<OpRow>& rows, int syncs, const Device& dev) {
  StepPrediction p;
  for (const OpRow& r : rows) p.kernels_s += r.seconds;
  p.round_trips_s = syncs * dev.round_trip_s;
  return p;
}

std::string table(const std::vector<OpRow>& rows, const StepPrediction& p, const Device& dev) {
  std::vector<OpRow> sorted = rows;
  std::sort(sorted.begin(), sorted.end(), [](const OpRow& a, const OpRow& b) { return a.seconds > b.seconds; });
  std::string out;
  char line[256];
  // loads: bytes the threads asked for (reuse counted); DRAM: distinct sectors loaded or stored
  // × 32; sector: distinct bytes used of them.
  std::snprintf(line, sizeof(line), "%-18s %8s %11s %11s %7s %9s %9s %6s  %s\n", "op", "launches", "loads",
                "DRAM bytes", "sector", "us total", "us/launch", "share", "bound");
  out += line;
  double launches = 0, moved = 0;
  for (const OpRow& r : sorted) {
    const double eff = r.moved_bytes > 0 ? r.useful_bytes / r.moved_bytes : 0;
    const bool floor_bound = r.seconds <= r.floor_s * 1.0001;
    char sector[16] = "-";
    if (r.traced) std::snprintf(sector, sizeof(sector), "%.1f%%", 100.0 * eff);
    std::snprintf(line, sizeof(line), "%-18s %8.0f %11s %11s %7s %9.1f %9.2f %5.1f%%  %s\n", r.op.c_str(),
                  r.launches, r.traced ? human_bytes(r.load_bytes).c_str() : "untraced",
                  r.traced ? human_bytes(r.moved_bytes).c_str() : "-", sector, r.seconds * 1e6,
                  r.seconds * 1e6 / std::max(1.0, r.launches), 100.0 * r.seconds / p.seconds(),
                  floor_bound ? "launch floor" : "HBM bytes");
    out += line;
    launches += r.launches;
    moved += r.moved_bytes;
  }
  std::snprintf(line, sizeof(line),
                "step: %.0f launches, %s from DRAM, kernels %.1f us + %.1f us of host round trips = %.1f us "
                "(%.0f tok/s) on %s (HBM %.1f TB/s x %.2f)\n",
                launches, human_bytes(moved).c_str(), p.kernels_s * 1e6, p.round_trips_s * 1e6, p.seconds() * 1e6,
                1.0 / p.seconds(), dev.name, dev.hbm_bytes_per_s / 1e12, dev.achievable);
  out += line;
  return out;
}

}  // namespace lfm_emu::cost
