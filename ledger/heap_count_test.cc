#include "ledger/heap_count.h"

#include <malloc.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "gtest/gtest.h"

// This test links the malloc hook (ledger/heap_hook.cc): every block below
// passes through it.

namespace trellis::ledger {
namespace {

constexpr int64_t kMiB = int64_t{1} << 20;

// The compiler may elide an allocation it sees freed unused: each block
// passes through a volatile pointer.
void* volatile g_escape = nullptr;
void* Touch(void* block, size_t bytes) {
  if (block != nullptr) std::memset(block, 1, bytes);
  g_escape = block;
  return g_escape;
}

TEST(HeapCountTest, TheHookCountsEveryKindOfBlock) {
  ASSERT_TRUE(HeapCounted()) << "the malloc hook is not linked into this test";
  const int64_t before = HeapCount().live();
  void* a = Touch(std::malloc(8 * kMiB), 8 * kMiB);
  EXPECT_GE(HeapCount().live() - before, 8 * kMiB);
  void* b = Touch(std::calloc(kMiB, 2), 2 * kMiB);
  void* c = nullptr;
  ASSERT_EQ(posix_memalign(&c, 4096, kMiB), 0);
  void* d = Touch(aligned_alloc(64, kMiB), kMiB);
  EXPECT_GE(HeapCount().live() - before, 12 * kMiB);
  a = Touch(std::realloc(a, 16 * kMiB), 16 * kMiB);
  EXPECT_GE(HeapCount().live() - before, 20 * kMiB);
  EXPECT_LT(HeapCount().live() - before, 21 * kMiB);
  for (void* block : {a, b, c, d}) std::free(block);
  EXPECT_EQ(HeapCount().live(), before);
}

TEST(HeapCountTest, PosixMemalignRefusesAlignmentsGlibcRefuses) {
  const int64_t before = HeapCount().live();
  void* block = nullptr;
  EXPECT_EQ(posix_memalign(&block, 0, 64), EINVAL);
  EXPECT_EQ(posix_memalign(&block, 12, 64), EINVAL);
  EXPECT_EQ(posix_memalign(&block, 4, 64), EINVAL);
  EXPECT_EQ(block, nullptr);
  EXPECT_EQ(HeapCount().live(), before);
}

TEST(HeapCountTest, ReallocToZeroFreesAndAFailedReallocKeepsTheBlock) {
  const int64_t before = HeapCount().live();
  void* a = Touch(std::malloc(kMiB), kMiB);
  // A size no allocator grants: NULL, the block stays counted.
  void* failed = std::realloc(a, SIZE_MAX / 2);
  EXPECT_EQ(failed, nullptr);
  EXPECT_GE(HeapCount().live() - before, kMiB);
  EXPECT_EQ(std::realloc(a, 0), nullptr);
  EXPECT_EQ(HeapCount().live(), before);
}

TEST(HeapCountTest, AWindowKeepsThePeakOfBlocksFreedInsideIt) {
  HeapWindow window;
  const int64_t start = HeapCount().live();
  EXPECT_GE(window.peak_bytes(), start);
  std::free(Touch(std::malloc(32 * kMiB), 32 * kMiB));
  EXPECT_GE(window.peak_bytes() - start, 32 * kMiB);
  {
    HeapWindow inner;
    std::free(Touch(std::malloc(kMiB), kMiB));
    EXPECT_LT(inner.peak_bytes() - start, 32 * kMiB);
  }
  EXPECT_GE(window.peak_bytes() - start, 32 * kMiB);
}

}  // namespace
}  // namespace trellis::ledger
