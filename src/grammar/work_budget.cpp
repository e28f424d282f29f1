#include "grammar/work_budget.h"

#include <algorithm>
#include <limits>

#include "core/error.h"

namespace lfm::grammar {

WorkBudget::WorkBudget(BudgetLimits limits, std::function<bool()> cancelled)
    : limits_(limits), cancel_(std::move(cancelled)) {}

void WorkBudget::items(const char* component, uint64_t count, uint64_t item_bytes) {
  const uint64_t max = std::numeric_limits<uint64_t>::max() / 2;
  const uint64_t b = item_bytes != 0 && count > max / item_bytes ? max : count * item_bytes;
  steps(component, count > max ? max : count);
  bytes(component, b);
}

void WorkBudget::expect_items(const char* component, uint64_t count, uint64_t item_bytes) const {
  const uint64_t max = std::numeric_limits<uint64_t>::max() / 2;
  const uint64_t b = item_bytes != 0 && count > max / item_bytes ? max : count * item_bytes;
  if (count > limits_.steps - std::min(steps_, limits_.steps))
    fail(component, ": compile work exceeds the budget of ", limits_.steps,
         " steps (the schema, regex or grammar expands too much)");
  if (b > limits_.bytes - std::min(bytes_, limits_.bytes)) over_bytes(component);
}

void WorkBudget::slow_path(const char* component) {
  if (steps_ > limits_.steps)
    fail(component, ": compile work exceeds the budget of ", limits_.steps,
         " steps (the schema, regex or grammar expands too much)");
  next_poll_ = steps_ + kPollEvery;
  if (cancel_ && cancel_()) {
    cancelled_ = true;
    fail(component, ": cancelled (the client went away, or the server is shutting down)");
  }
}

void WorkBudget::over_bytes(const char* component) const {
  fail(component, ": compile memory exceeds the budget of ", limits_.bytes,
       " bytes (the schema, regex or grammar expands too much)");
}

}  // namespace lfm::grammar
