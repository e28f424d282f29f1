// Helpers shared by the engine tests: a request's whole event stream, collected.
#pragma once

#include <string>
#include <vector>

#include "engine/engine.h"

namespace lfm::test {

struct Result {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;  // per token, when asked for
  FinishReason finish = FinishReason::kNone;
  Usage usage;
  std::string error;
};

inline Result collect(RequestStream& s) {
  Result r;
  Event ev;
  while (s.next(ev)) {
    if (ev.kind == Event::Kind::kToken) {
      r.tokens.push_back(ev.token);
      r.logprobs.push_back(ev.logprob);
    }
    if (ev.kind == Event::Kind::kDone) {
      r.finish = ev.finish;
      r.usage = ev.usage;
      r.error = ev.error;
    }
  }
  return r;
}

}  // namespace lfm::test
