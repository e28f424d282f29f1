// Stop strings matched on generated text across token boundaries. Text that could still turn
// out to be the start of a stop string is held back; a stop string and everything after it is
// never emitted.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace lfm {

class StopStrings {
 public:
  explicit StopStrings(std::vector<std::string> stops);  // empty strings are ignored

  // Adds newly decoded text; returns the text that is now safe to emit. After a match, returns
  // the text before the stop string, and nothing from then on.
  std::string push(std::string_view text);
  // At the end of generation: the text still held back (none after a match).
  std::string flush();

  bool matched() const { return matched_ >= 0; }
  const std::string& matched_string() const;  // valid when matched()

 private:
  std::vector<std::string> stops_;
  std::string pending_;
  int matched_ = -1;
};

}  // namespace lfm
