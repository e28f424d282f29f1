// A child process for tests that drive a long-running `lfm` (the server): started with
// posix_spawn, its stdout readable line by line, signalled and waited for.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace lfm::test {

class Subprocess {
 public:
  // argv[0] is the program path. stderr goes to `stderr_path` (empty: inherited).
  explicit Subprocess(const std::vector<std::string>& argv, const std::string& stderr_path = "");
  ~Subprocess();  // kills the child if it is still running
  Subprocess(const Subprocess&) = delete;
  Subprocess& operator=(const Subprocess&) = delete;

  // One line of stdout (without the newline); false at end of output or after timeout_ms.
  bool read_line(std::string& line, int timeout_ms = 30000);
  void signal(int sig);
  // Waits for the child; its exit status (128 + signal when killed); -1 after timeout_ms.
  int wait(int timeout_ms = 30000);
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
  int out_fd_ = -1;
  std::string buffer_;
  bool exited_ = false;
  int status_ = -1;
};

}  // namespace lfm::test
