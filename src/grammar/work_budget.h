// A budget for the work of compiling one structured-output request (JSON schema → GBNF, regex →
// GBNF, GBNF → Grammar): every converter charges its steps and the bytes it is about to allocate
// as it goes, so that a small hostile input (nested allOf over $refs, nested counted repetition,
// long nullable chains) is refused when the budget runs out instead of running for minutes or
// allocating gigabytes. An optional callback, polled every few thousand steps, cancels the work
// (a server's client that left, or SIGTERM).
#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace lfm::grammar {

struct BudgetLimits {
  // Work steps: one step is a small unit (a schema node visited, a byte of GBNF text written, a
  // grammar element built or checked); real schemas use well under 1% of the default.
  uint64_t steps = 50'000'000;
  // Bytes allocated in total (not live) by the compile; the largest test schemas use < 1 MiB, a
  // string of maxLength 100000 (the converter's limit) about 36 MiB.
  uint64_t bytes = uint64_t{64} << 20;
};

class WorkBudget {
 public:
  explicit WorkBudget(BudgetLimits limits = {}, std::function<bool()> cancelled = {});

  // Charges `n` steps to `component` ("json schema", "regex", "grammar"); throws lfm::Error
  // "<component>: compile work exceeds the budget of N steps (...)" or "<component>: cancelled".
  void steps(const char* component, uint64_t n = 1) {
    steps_ += n;
    if (steps_ > limits_.steps || steps_ >= next_poll_) slow_path(component);
  }
  // Charges bytes about to be allocated (call before allocating them).
  void bytes(const char* component, uint64_t n) {
    bytes_ += n;
    if (bytes_ > limits_.bytes) over_bytes(component);
  }
  // Both: a structure of `count` items of `item_bytes` each (overflow-safe).
  void items(const char* component, uint64_t count, uint64_t item_bytes);
  // Refuses, before an expansion starts, one that the budget could not pay for (`count` items of
  // `item_bytes`), without charging it: the expansion charges its parts as it makes them.
  void expect_items(const char* component, uint64_t count, uint64_t item_bytes) const;

  uint64_t steps_used() const { return steps_; }
  uint64_t bytes_used() const { return bytes_; }
  const BudgetLimits& limits() const { return limits_; }
  // Whether the work stopped because the callback said so.
  bool cancelled() const { return cancelled_; }

 private:
  void slow_path(const char* component);
  [[noreturn]] void over_bytes(const char* component) const;

  static constexpr uint64_t kPollEvery = 1 << 14;
  BudgetLimits limits_;
  std::function<bool()> cancel_;
  uint64_t steps_ = 0, bytes_ = 0, next_poll_ = kPollEvery;
  bool cancelled_ = false;
};

// The budget a caller passed, or a default one owned here (for the overloads that take none).
class BudgetRef {
 public:
  explicit BudgetRef(WorkBudget* b) : b_(b ? b : &own_) {}
  BudgetRef(const BudgetRef&) = delete;
  BudgetRef& operator=(const BudgetRef&) = delete;
  WorkBudget& operator*() const { return *b_; }
  WorkBudget* operator->() const { return b_; }

 private:
  WorkBudget own_;
  WorkBudget* b_;
};

}  // namespace lfm::grammar
