// Error type used at every boundary (files, configs, CLI, HTTP).
// Messages name the component and the offending value, e.g.
//   "safetensors: tensor 'model.x' offsets [10, 99) exceed data size 64".
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace lfm {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& msg) : std::runtime_error(msg) {}
};

// Concatenates any streamable values into one string.
template <typename... Args>
std::string cat(Args&&... args) {
  std::ostringstream os;
  (os << ... << std::forward<Args>(args));
  return os.str();
}

template <typename... Args>
[[noreturn]] void fail(Args&&... args) {
  throw Error(cat(std::forward<Args>(args)...));
}

}  // namespace lfm

// Checks a condition that depends on input data; throws lfm::Error with the message.
#define LFM_CHECK(cond, ...)              \
  do {                                    \
    if (!(cond)) ::lfm::fail(__VA_ARGS__); \
  } while (0)
