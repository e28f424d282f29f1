// AlignedBuffer: alignment, usable storage and moves, on both of its allocation paths (small
// buffers from aligned_alloc, 2 MiB and more as huge-page-eligible mappings).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <utility>

#include "core/aligned_buffer.h"

namespace lfm {
namespace {

void fill_and_check(AlignedBuffer& b) {
  auto* p = static_cast<uint8_t*>(b.data());
  for (size_t i = 0; i < b.size(); ++i) p[i] = static_cast<uint8_t>(i * 131 + 7);
  for (size_t i = 0; i < b.size(); i += 4093) ASSERT_EQ(p[i], static_cast<uint8_t>(i * 131 + 7)) << i;
  ASSERT_EQ(p[b.size() - 1], static_cast<uint8_t>((b.size() - 1) * 131 + 7));
}

TEST(AlignedBuffer, SmallAndLargeBuffersAreAlignedUsableAndMovable) {
  const size_t kMiB = size_t{1} << 20;
  for (size_t bytes : {size_t{1}, size_t{63}, size_t{4097}, 2 * kMiB - 1, 2 * kMiB, 5 * kMiB + 3}) {
    AlignedBuffer b(bytes);
    ASSERT_EQ(b.size(), bytes);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % 64, 0u) << bytes;
    EXPECT_EQ(b.huge_page_mapped(), bytes >= 2 * kMiB && AlignedBuffer::huge_pages_enabled()) << bytes;
    if (b.huge_page_mapped()) {
      EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % (2 * kMiB), 0u) << bytes;
    }
    fill_and_check(b);
    const void* p = b.data();
    AlignedBuffer moved(std::move(b));
    EXPECT_EQ(moved.data(), p);
    EXPECT_EQ(moved.size(), bytes);
    EXPECT_EQ(b.data(), nullptr);
    AlignedBuffer other(64);
    other = std::move(moved);  // the 64-byte buffer is released by moved's destructor
    EXPECT_EQ(other.data(), p);
    EXPECT_EQ(static_cast<const uint8_t*>(other.data())[bytes - 1], static_cast<uint8_t>((bytes - 1) * 131 + 7));
  }
  AlignedBuffer empty(0);
  EXPECT_EQ(empty.data(), nullptr);
}

}  // namespace
}  // namespace lfm
