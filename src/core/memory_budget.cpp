#include "core/memory_budget.h"

#include <utility>

namespace lfm {

MemoryBudget::Reservation& MemoryBudget::Reservation::operator=(Reservation&& o) noexcept {
  if (this != &o) {
    release();
    budget_ = std::exchange(o.budget_, nullptr);
    bytes_ = o.bytes_;
  }
  return *this;
}

void MemoryBudget::Reservation::release() {
  if (!budget_) return;
  std::lock_guard<std::mutex> lock(budget_->mu_);
  budget_->used_ -= bytes_;
  budget_ = nullptr;
}

std::optional<MemoryBudget::Reservation> MemoryBudget::try_reserve(int64_t bytes) {
  if (bytes < 0) bytes = 0;
  std::lock_guard<std::mutex> lock(mu_);
  // Written so that no sum can overflow: used_ ≤ capacity_ always holds.
  if (bytes > capacity_ - used_) return std::nullopt;
  used_ += bytes;
  return Reservation(this, bytes);
}

int64_t MemoryBudget::in_use() const {
  std::lock_guard<std::mutex> lock(mu_);
  return used_;
}

}  // namespace lfm
