#include "hub/progress.h"

#include <cstdio>

namespace lfm::hub {

std::string format_bytes(uint64_t n) {
  static const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(n);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", v, kUnits[u]);
  return buf;
}

std::string format_duration(double secs) {
  const long s = secs < 0 ? 0 : static_cast<long>(secs + 0.5);
  char buf[32];
  if (s >= 3600)
    std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", s / 3600, s / 60 % 60, s % 60);
  else
    std::snprintf(buf, sizeof buf, "%ld:%02ld", s / 60, s % 60);
  return buf;
}

Progress::Progress(bool enabled, std::string label, uint64_t total, uint64_t done)
    : enabled_(enabled), label_(std::move(label)), total_(total), done_(done), session_start_(done),
      t0_(std::chrono::steady_clock::now()), last_draw_(t0_) {
  if (label_.size() > 40) label_ = "..." + label_.substr(label_.size() - 37);
}

Progress::~Progress() {
  // An exception left the download: end the line so the error message starts on its own.
  if (enabled_ && drawn_ && !finished_) std::fputc('\n', stderr);
}

void Progress::add(uint64_t n) {
  done_ += n;
  const auto now = std::chrono::steady_clock::now();
  if (now - last_draw_ >= std::chrono::milliseconds(100)) {
    last_draw_ = now;
    draw(false);
  }
}

void Progress::restart() {
  done_ = session_start_ = 0;
  t0_ = std::chrono::steady_clock::now();
}

void Progress::finish() {
  if (finished_) return;
  draw(true);
  finished_ = true;
}

void Progress::draw(bool final) {
  if (!enabled_) return;
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
  const double rate = secs > 0 ? static_cast<double>(done_ - session_start_) / secs : 0;
  std::string bar;
  if (total_ > 0) {
    const double frac = std::min(1.0, static_cast<double>(done_) / static_cast<double>(total_));
    const int width = 24, fill = static_cast<int>(frac * width);
    bar = "[" + std::string(fill, '#') + std::string(width - fill, ' ') + "] ";
    char pct[16];
    std::snprintf(pct, sizeof pct, "%3d%% ", static_cast<int>(frac * 100));
    bar += pct;
  }
  std::string line = label_ + " " + bar + format_bytes(done_);
  if (total_ > 0) line += " / " + format_bytes(total_);
  if (rate > 0) line += "  " + format_bytes(static_cast<uint64_t>(rate)) + "/s";
  if (final)
    line += "  in " + format_duration(secs);
  else if (total_ > done_ && rate > 0)
    line += "  ETA " + format_duration(static_cast<double>(total_ - done_) / rate);
  // \r and clear-to-end-of-line redraw the same terminal line.
  std::fprintf(stderr, "\r%s\x1b[K%s", line.c_str(), final ? "\n" : "");
  std::fflush(stderr);
  drawn_ = true;
}

}  // namespace lfm::hub
