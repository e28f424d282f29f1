// Errors of the Hugging Face Hub layer. The kind lets callers react: fall back to the cache when
// the Hub cannot be reached, retry (resuming) an interrupted transfer, never retry a corrupted one.
#pragma once

#include <string>
#include <utility>

#include "core/error.h"

namespace lfm::hub {

enum class ErrorKind {
  kUsage,        // a malformed reference or an ambiguous choice (the message lists the options)
  kNetwork,      // the Hub could not be reached (DNS, connection refused, TLS, timeout before a byte)
  kHttp,         // the Hub answered with an error status (401/403/404/5xx)
  kInterrupted,  // a transfer stopped early; the partial file is kept for resuming
  kIntegrity,    // the bytes do not hash to what the Hub reports; nothing was installed
  kDisk,         // writing to the cache failed (disk full, permissions)
  kNotCached,    // offline (or unreachable) and the cache lacks what is needed
};

class HubError : public Error {
 public:
  HubError(ErrorKind kind, const std::string& msg, long status = 0) : Error(msg), kind_(kind), status_(status) {}
  ErrorKind kind() const { return kind_; }
  long status() const { return status_; }  // the HTTP status for kHttp, else 0

 private:
  ErrorKind kind_;
  long status_;
};

template <typename... Args>
[[noreturn]] void hub_fail(ErrorKind kind, Args&&... args) {
  throw HubError(kind, cat(std::forward<Args>(args)...));
}

}  // namespace lfm::hub
