// A download progress bar on stderr — bytes, rate, ETA — redrawn in place at most ten times a
// second, drawn only when asked (when stderr is a terminal).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace lfm::hub {

class Progress {
 public:
  // `total` 0: unknown. `done` bytes are already there (a resumed download): they count towards
  // the bar but not towards the rate.
  Progress(bool enabled, std::string label, uint64_t total, uint64_t done);
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  void add(uint64_t n);
  void restart();  // the server sent the whole file again: back to 0
  void finish();   // draws the last state and ends the line

 private:
  void draw(bool final);
  bool enabled_;
  std::string label_;
  uint64_t total_, done_, session_start_;
  std::chrono::steady_clock::time_point t0_, last_draw_;
  bool drawn_ = false, finished_ = false;
};

std::string format_bytes(uint64_t n);      // "1.5 GiB", "512 B"
std::string format_duration(double secs);  // "1:05:09", "4:02"

}  // namespace lfm::hub
