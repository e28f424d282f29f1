// A budget of bytes shared by concurrent users (the server's image memory, issue 55): work that
// will allocate N bytes reserves them first and gives them back when its memory is freed. A
// reservation that does not fit is refused at once, never waited for, so the caller can answer
// "try later" (HTTP 429) instead of running the process out of memory.
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>

namespace lfm {

class MemoryBudget {
 public:
  explicit MemoryBudget(int64_t capacity_bytes) : capacity_(capacity_bytes) {}
  MemoryBudget(const MemoryBudget&) = delete;
  MemoryBudget& operator=(const MemoryBudget&) = delete;

  // Holds its bytes until destroyed or release()d. Move-only.
  class Reservation {
   public:
    Reservation() = default;
    Reservation(Reservation&& o) noexcept : budget_(o.budget_), bytes_(o.bytes_) { o.budget_ = nullptr; }
    Reservation& operator=(Reservation&& o) noexcept;
    ~Reservation() { release(); }
    int64_t bytes() const { return budget_ ? bytes_ : 0; }
    void release();

   private:
    friend class MemoryBudget;
    Reservation(MemoryBudget* b, int64_t n) : budget_(b), bytes_(n) {}
    MemoryBudget* budget_ = nullptr;
    int64_t bytes_ = 0;
  };

  // The bytes reserved, or nullopt when they do not fit next to what is reserved now.
  // bytes < 0 is treated as 0.
  std::optional<Reservation> try_reserve(int64_t bytes);

  int64_t capacity() const { return capacity_; }
  int64_t in_use() const;

 private:
  const int64_t capacity_;
  mutable std::mutex mu_;
  int64_t used_ = 0;
};

}  // namespace lfm
