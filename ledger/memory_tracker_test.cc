#include "ledger/memory_tracker.h"

#include <c10/core/CPUAllocator.h>
#include <torch/torch.h>

#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "ledger/testing/fake_memory_source.h"

namespace trellis::ledger {
namespace {

using testing_util::kMiB;

class MemoryTrackerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    MemoryTracker::Install();
    ASSERT_TRUE(MemoryTracker::installed());
  }
  MemoryTracker& tracker() { return MemoryTracker::Get(); }
};

TEST_F(MemoryTrackerTest, InstallPutsTrackerInFrontOfDefault) {
  MemoryTracker::Install();  // Idempotent.
  EXPECT_NE(c10::GetCPUAllocator(), c10::GetDefaultCPUAllocator());
  EXPECT_NE(c10::GetCPUAllocator()->raw_deleter(), nullptr);
}

TEST_F(MemoryTrackerTest, EmptyTensorIsCountedAndFreed) {
  const int64_t before = tracker().live_bytes();
  const int64_t allocations = tracker().allocations();
  {
    at::Tensor t = at::empty({kMiB / 4}, at::kFloat);  // 1 MiB.
    EXPECT_GE(tracker().live_bytes() - before, kMiB);
    EXPECT_GT(tracker().allocations(), allocations);
    t.fill_(1.0f);
    EXPECT_EQ(t.sum().item<float>(), static_cast<float>(kMiB / 4));
  }
  EXPECT_EQ(tracker().live_bytes(), before);
}

TEST_F(MemoryTrackerTest, TorchFactoriesAndOpsAreCounted) {
  const int64_t before = tracker().live_bytes();
  {
    torch::Tensor a = torch::ones({256, 256});
    torch::Tensor b = torch::matmul(a, a);
    EXPECT_GE(tracker().live_bytes() - before, 2 * 256 * 256 * 4);
  }
  EXPECT_EQ(tracker().live_bytes(), before);
}

TEST_F(MemoryTrackerTest, FromBlobIsNotCounted) {
  std::vector<float> data(kMiB / 4, 1.0f);
  const int64_t before = tracker().live_bytes();
  torch::Tensor t = torch::from_blob(data.data(), {kMiB / 4});
  EXPECT_LT(tracker().live_bytes() - before, kMiB);
}

TEST_F(MemoryTrackerTest, RawAllocateRoundTrips) {
  c10::Allocator* alloc = c10::GetCPUAllocator();
  const int64_t before = tracker().live_bytes();
  void* p = alloc->raw_allocate(4096);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % c10::gAlignment, 0u);
  EXPECT_EQ(tracker().live_bytes() - before, 4096);
  alloc->raw_deallocate(p);
  EXPECT_EQ(tracker().live_bytes(), before);
}

TEST_F(MemoryTrackerTest, ResizeKeepsCountsExact) {
  const int64_t before = tracker().live_bytes();
  {
    at::Tensor t = at::empty({16}, at::kFloat);
    t.resize_({kMiB});
    EXPECT_GE(tracker().live_bytes() - before, 4 * kMiB);
  }
  EXPECT_EQ(tracker().live_bytes(), before);
}

TEST_F(MemoryTrackerTest, ResetPeakStartsAWindowAtLive) {
  { at::Tensor t = at::empty({kMiB}, at::kByte); }
  const int64_t live = tracker().live_bytes();
  const int64_t old_peak = tracker().ResetPeak();
  EXPECT_GE(old_peak, live + kMiB);
  EXPECT_EQ(tracker().peak_bytes(), live);
  tracker().RaisePeak(old_peak);
  EXPECT_EQ(tracker().peak_bytes(), old_peak);
  tracker().RaisePeak(0);
  EXPECT_EQ(tracker().peak_bytes(), old_peak);
}

TEST_F(MemoryTrackerTest, NestedWindowsCompose) {
  PeakWindow outer;
  const int64_t base = outer.start_live_bytes();
  { at::Tensor big = at::empty({4 * kMiB}, at::kByte); }
  int64_t inner_peak = 0;
  {
    PeakWindow inner;
    EXPECT_LT(inner.peak_bytes() - base, kMiB);  // The 4 MiB came before.
    { at::Tensor small = at::empty({kMiB}, at::kByte); }
    inner_peak = inner.peak_bytes();
    EXPECT_GE(inner_peak - base, kMiB);
    EXPECT_LT(inner_peak - base, 4 * kMiB);
  }
  // The outer window kept the 4 MiB peak that preceded the inner one.
  EXPECT_GE(outer.peak_bytes() - base, 4 * kMiB);
  {
    PeakWindow inner2;
    { at::Tensor huge = at::empty({8 * kMiB}, at::kByte); }
    EXPECT_GE(inner2.peak_bytes() - base, 8 * kMiB);
  }
  EXPECT_GE(outer.peak_bytes() - base, 8 * kMiB);
}

// Blocks of at least kMappedFloor count as mapped while live, and a window
// remembers how many mapped bytes were live at its peak.
TEST_F(MemoryTrackerTest, MappedBytesAreCountedAndKeptAtTheWindowsPeak) {
  const int64_t mapped_before = tracker().live_mapped_bytes();
  PeakWindow window;
  EXPECT_EQ(window.mapped_at_peak_bytes(), mapped_before);
  {
    at::Tensor large = at::empty({MemoryTracker::kMappedFloor}, at::kByte);
    at::Tensor small = at::empty({kMiB}, at::kByte);
    EXPECT_EQ(tracker().live_mapped_bytes() - mapped_before, MemoryTracker::kMappedFloor);
  }
  EXPECT_EQ(tracker().live_mapped_bytes(), mapped_before);
  // The peak held the large block and the small one after it.
  EXPECT_EQ(window.mapped_at_peak_bytes() - mapped_before, MemoryTracker::kMappedFloor);
  { at::Tensor small = at::empty({kMiB}, at::kByte); }  // Below the peak.
  EXPECT_EQ(window.mapped_at_peak_bytes() - mapped_before, MemoryTracker::kMappedFloor);
}

TEST_F(MemoryTrackerTest, WindowsDoNotTouchTheGlobalPeak) {
  tracker().ResetPeak();
  { at::Tensor t = at::empty({2 * kMiB}, at::kByte); }
  const int64_t global = tracker().peak_bytes();
  { PeakWindow w; }
  EXPECT_EQ(tracker().peak_bytes(), global);
}

TEST_F(MemoryTrackerTest, ConcurrentWindowsOnThreadsAreIndependent) {
  const int64_t before = tracker().live_bytes();
  constexpr int kThreads = 4;
  std::vector<int64_t> peaks(kThreads);
  std::vector<int64_t> starts(kThreads);
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([i, &peaks, &starts] {
      PeakWindow w;
      starts[i] = w.start_live_bytes();
      for (int k = 0; k < 50; ++k) {
        at::Tensor t = at::empty({(i + 1) * kMiB / 8}, at::kByte);
      }
      peaks[i] = w.peak_bytes();
    });
  }
  for (auto& t : threads) t.join();
  for (int i = 0; i < kThreads; ++i) {
    // Each window saw at least its own allocation live. (Not on top of its
    // start: other threads' tensors counted in the start may be freed.)
    EXPECT_GE(peaks[i], (i + 1) * kMiB / 8) << "thread " << i;
    EXPECT_GE(peaks[i], starts[i]);
  }
  EXPECT_EQ(tracker().live_bytes(), before);
}

TEST_F(MemoryTrackerTest, ManyOpenWindowsFallBackToAnUpperBound) {
  std::vector<std::unique_ptr<PeakWindow>> windows;
  for (int i = 0; i < MemoryTracker::kMaxWindows + 2; ++i) {
    windows.push_back(std::make_unique<PeakWindow>());
  }
  { at::Tensor t = at::empty({kMiB}, at::kByte); }
  for (const auto& w : windows) {
    EXPECT_GE(w->peak_bytes() - w->start_live_bytes(), kMiB);
  }
  windows.clear();
  PeakWindow after;  // Slots were released.
  EXPECT_EQ(after.peak_bytes(), after.start_live_bytes());
}

}  // namespace
}  // namespace trellis::ledger
