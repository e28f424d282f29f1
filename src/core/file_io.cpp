#include "core/file_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace lfm {

namespace {

const char* kind_of(mode_t m) {
  if (S_ISFIFO(m)) return "a FIFO";
  if (S_ISSOCK(m)) return "a socket";
  if (S_ISCHR(m) || S_ISBLK(m)) return "a device";
  if (S_ISDIR(m)) return "a directory";
  return "not a plain file";
}

}  // namespace

int open_regular_file(const std::string& path, std::string_view what) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  LFM_CHECK(fd >= 0, what, " '", path, "' cannot be opened: ", std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    const int err = errno;
    const bool stat_failed = !S_ISREG(st.st_mode) && st.st_mode == 0;
    ::close(fd);
    if (stat_failed) fail(what, " '", path, "' cannot be examined: ", std::strerror(err));
    fail(what, " '", path, "' is not a regular file (", kind_of(st.st_mode), ")");
  }
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags >= 0) ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  return fd;
}

std::string read_regular_file(const std::string& path, std::string_view what) {
  const int fd = open_regular_file(path, what);
  std::string out;
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      fail(what, " '", path, "' could not be read: ", std::strerror(err));
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return out;
}

void check_file_or_folder(const std::string& path, std::string_view what) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return;
  LFM_CHECK(S_ISREG(st.st_mode) || S_ISDIR(st.st_mode), what, " '", path, "' is not a regular file or a folder (",
            kind_of(st.st_mode), ")");
}

bool is_regular_path(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

}  // namespace lfm
