// Failures in the scheduler (issue 55): an exception in one request's part of a step ends that
// request alone; one that escapes a whole pass is caught around it, so nothing leaves the thread.
#include <algorithm>

#include "engine/engine.h"
#include "engine/engine_active.h"

namespace lfm {

std::string exception_text(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& x) {
    return x.what();
  } catch (...) {
    return "an exception that is not a std::exception";
  }
}

void Engine::recover(const std::vector<Active*>& batch, const std::exception_ptr& e) {
  const std::string why = "engine: the scheduler failed: " + exception_text(e);
  // `batch` may name requests already finished and freed: only those still running are touched.
  const bool known = !batch.empty();
  for (auto& a : running_)
    if (!known || std::find(batch.begin(), batch.end(), a.get()) != batch.end()) finish(*a, FinishReason::kError, why);
  if (!known)
    for (auto& a : waiting_) finish(*a, FinishReason::kError, why);
  std::erase_if(running_, [](const auto& a) { return a->finished; });
  std::erase_if(waiting_, [](const auto& a) { return a->finished; });
  publish_stats();
}

void Engine::fail_request(Active& a, const char* stage, const std::exception_ptr& e) {
  // lfm::Error is what checks of input data throw (core/error.h): the request's own doing.
  try {
    std::rethrow_exception(e);
  } catch (const Error&) {
    a.request_error = true;
  } catch (...) {
  }
  finish(a, FinishReason::kError, cat("engine: ", stage, " failed: ", exception_text(e)));
}

bool Engine::guarded(Active& a, const char* stage, const std::function<void()>& body) {
  try {
    body();
  } catch (...) {
    fail_request(a, stage, std::current_exception());
  }
  return !a.finished;
}

}  // namespace lfm
