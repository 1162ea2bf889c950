// What a process holds: /proc status text, glibc's heap fields and the
// account of a peak, from fake text and numbers only.
#include "ledger/process_memory.h"

#include <nlohmann/json.hpp>

#include "gtest/gtest.h"

namespace trellis::ledger {
namespace {

constexpr char kStatus[] =
    "Name:\ttrellis\n"
    "VmPeak:\t 9000000 kB\n"
    "VmHWM:\t    7000 kB\n"
    "VmRSS:\t    5000 kB\n"
    "RssAnon:\t    3000 kB\n"
    "RssFile:\t    1900 kB\n"
    "Threads:\t8\n";

TEST(ProcessMemoryTest, ParsesResidentPeakAndFilePagesInBytes) {
  absl::StatusOr<ProcessSample> s = ParseProcStatus(kStatus);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->resident_bytes, 5000 * 1024);
  EXPECT_EQ(s->peak_resident_bytes, 7000 * 1024);
  EXPECT_EQ(s->file_resident_bytes, 1900 * 1024);
}

TEST(ProcessMemoryTest, MissingOrMalformedFieldsAreNamed) {
  absl::StatusOr<ProcessSample> s = ParseProcStatus("VmRSS:\t 10 kB\n");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("VmHWM"), std::string::npos) << s.status();
  s = ParseProcStatus("VmHWM:\t 10 kB\nVmRSS:\t ten kB\n");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("VmRSS"), std::string::npos) << s.status();
  // RssFile is optional (older kernels), VmRSSx is another field.
  s = ParseProcStatus("VmHWM: 2 kB\nVmRSS: 1 kB\nVmRSSx: oops\n");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->file_resident_bytes, 0);
}

TEST(ProcessMemoryTest, HeapInUseAndHeldFromMallinfo) {
  ProcessSample s;
  SetHeap(/*arena=*/1000, /*uordblks=*/600, /*hblkhd=*/5000, s);
  EXPECT_EQ(s.heap_in_use_bytes, 5600);
  EXPECT_EQ(s.heap_held_bytes, 6000);
}

ProcessSample Sample(int64_t resident, int64_t peak, int64_t file, int64_t in_use, int64_t held) {
  ProcessSample s;
  s.resident_bytes = resident;
  s.peak_resident_bytes = peak;
  s.file_resident_bytes = file;
  s.heap_in_use_bytes = in_use;
  s.heap_held_bytes = held;
  return s;
}

TrackerLook Look(int64_t live, int64_t peak_since, int64_t mapped = 0,
                 int64_t mapped_at_peak = 0) {
  return {.live_bytes = live,
          .peak_since_bytes = peak_since,
          .mapped_bytes = mapped,
          .mapped_at_peak_bytes = mapped_at_peak};
}

TEST(ProcessMemoryTest, AccountNamesEveryPartOfThePeak) {
  const ProcessSample baseline = Sample(1000, 1000, 400, 100, 150);
  // Heap grew by 700 in use (500 tensors, 300 of them objects) and its
  // free blocks by 100; files by 150; 50 is named by nothing.
  const ProcessSample at_peak = Sample(2000, 2000, 550, 800, 950);
  const ProcessMemoryAccount a = AccountFor(2000, at_peak, 500, 300, baseline);
  EXPECT_EQ(a.program_bytes, 1000);
  EXPECT_EQ(a.objects_bytes_named, 300);
  EXPECT_EQ(a.other_tensors_bytes, 200);
  EXPECT_EQ(a.other_heap_bytes, 200);
  EXPECT_EQ(a.allocator_free_bytes, 100);
  EXPECT_EQ(a.mapped_files_bytes, 150);
  EXPECT_EQ(a.named_bytes, 1950);
  EXPECT_EQ(a.remainder_bytes, 50);
  EXPECT_EQ(a.named_beyond_resident_bytes, 0);
  EXPECT_DOUBLE_EQ(a.named_fraction(), 0.975);
}

TEST(ProcessMemoryTest, NoPartIsNegativeAndNoFractionPassesOne) {
  // Objects beyond the tracked tensors (another process's, or device
  // memory), a heap that shrank, and more named than resident.
  const ProcessSample baseline = Sample(1000, 1000, 400, 500, 900);
  const ProcessSample at_peak = Sample(900, 1200, 300, 400, 500);
  const ProcessMemoryAccount a = AccountFor(1200, at_peak, 50, 1 << 30, baseline);
  for (int64_t part : {a.program_bytes, a.objects_bytes_named, a.other_tensors_bytes,
                       a.other_heap_bytes, a.allocator_free_bytes, a.mapped_files_bytes,
                       a.remainder_bytes, a.named_beyond_resident_bytes}) {
    EXPECT_GE(part, 0);
  }
  EXPECT_EQ(a.objects_bytes_named, 0);  // nothing of the heap's growth
  EXPECT_EQ(a.named_bytes, 1000);
  EXPECT_EQ(a.remainder_bytes, 200);
  EXPECT_LE(a.named_fraction(), 1.0);
  const ProcessMemoryAccount over = AccountFor(500, at_peak, 0, 0, baseline);
  EXPECT_EQ(over.peak_resident_bytes, 900);  // never below a sample
  EXPECT_EQ(over.named_beyond_resident_bytes, 100);
  EXPECT_DOUBLE_EQ(over.named_fraction(), 1.0);
  EXPECT_DOUBLE_EQ(AccountFor(0, ProcessSample{}, 0, 0, ProcessSample{}).named_fraction(), 0);
}

TEST(ProcessMemoryTest, WatchKeepsTheMostResidentSampleAndStageAndStepPeaks) {
  ProcessMemoryWatch watch(Sample(100, 100, 0, 10, 10));
  watch.Observe(Sample(300, 300, 0, 200, 220), Look(150, 150), 100, "load");
  // The high-water mark rose to 900 between samples: reached in "update".
  watch.Observe(Sample(500, 900, 0, 300, 400), Look(250, 250), 200, "update");
  EXPECT_EQ(watch.TakeStepPeak(), 900);
  watch.Observe(Sample(400, 900, 0, 300, 400), Look(250, 250), 200, "rollout");
  EXPECT_EQ(watch.TakeStepPeak(), 400);
  EXPECT_EQ(watch.TakeStepPeak(), 0);
  const std::map<std::string, int64_t> stages = watch.StagePeaks();
  EXPECT_EQ(stages.at("load"), 300);
  EXPECT_EQ(stages.at("update"), 900);
  EXPECT_EQ(stages.at("rollout"), 400);
  const ProcessMemoryAccount a = watch.Account();
  EXPECT_EQ(a.peak_resident_bytes, 900);
  // The update's sample stands for the mark it saw rise.
  EXPECT_EQ(a.at_peak.resident_bytes, 900);
  EXPECT_EQ(a.tracked_bytes, 250);
  EXPECT_EQ(a.objects_bytes, 200);
  // 100 program + 250 tensors (200 objects) + 40 other heap + 100 free.
  EXPECT_EQ(a.named_bytes, 490);
  EXPECT_EQ(a.remainder_bytes, 410);
}

// Tensors that peaked above what is live at the next sample, with the
// high-water mark rising in between: the account names the peak with those
// tensors in use on the heap, not the emptier heap after them.
TEST(ProcessMemoryTest, AMarkReachedInsideAWindowIsNamedWithTheWindowsTensorPeak) {
  ProcessMemoryWatch watch(Sample(100, 100, 0, 10, 10));
  // The update's tensors peaked at 700 and 200 remain; its freed blocks
  // went back to the system (held 260), and the mark rose to 900.
  watch.Observe(Sample(400, 900, 0, 250, 260), Look(200, 700), 150, "update");
  // Later a sample more resident than the one before but below the mark.
  watch.Observe(Sample(600, 900, 0, 450, 480), Look(400, 400), 150, "rollout");
  const ProcessMemoryAccount a = watch.Account();
  EXPECT_EQ(a.peak_resident_bytes, 900);
  EXPECT_EQ(a.at_peak.resident_bytes, 900);
  EXPECT_EQ(a.tracked_bytes, 700);
  EXPECT_EQ(a.at_peak.heap_in_use_bytes, 750);
  EXPECT_EQ(a.at_peak.heap_held_bytes, 750);
  // 100 program + 740 heap growth in use (700 tensors, 150 of them
  // objects) = 840 named of 900.
  EXPECT_EQ(a.named_bytes, 840);
  EXPECT_EQ(a.remainder_bytes, 60);
}

// Freed tensors that glibc had mapped on their own left the heap's held
// bytes when freed: at the mark they were held, beside the free blocks the
// heap still holds.
TEST(ProcessMemoryTest, MappedTensorsFreedInsideAWindowAreCountedHeldAtTheMark) {
  ProcessMemoryWatch watch(Sample(100, 100, 0, 10, 10));
  // 700 peaked, 200 remain; 300 of the 500 freed were mapped blocks. The
  // heap holds 350 free blocks at the sample.
  watch.Observe(Sample(400, 1100, 0, 250, 600), Look(200, 700, 0, 300), 150, "update");
  const ProcessMemoryAccount a = watch.Account();
  EXPECT_EQ(a.at_peak.heap_in_use_bytes, 750);
  EXPECT_EQ(a.at_peak.heap_held_bytes, 900);
  EXPECT_EQ(a.allocator_free_bytes, 150);
  // 100 program + 740 heap growth in use + 150 free blocks.
  EXPECT_EQ(a.named_bytes, 990);
  EXPECT_EQ(a.remainder_bytes, 110);
}

// A heap peak between samples with no tensor in it (a JSON document parsed
// and freed): where the malloc hook counts, the mark is named with it.
TEST(ProcessMemoryTest, AHeapPeakBetweenSamplesIsNamedWhereTheHookCounts) {
  ProcessMemoryWatch watch(Sample(100, 100, 0, 10, 10));
  TrackerLook look = Look(50, 50);
  look.heap_counted = true;
  look.heap_live_bytes = 140;
  look.heap_peak_since_bytes = 340;
  watch.Observe(Sample(300, 500, 0, 150, 160), look, 0, "load");
  const ProcessMemoryAccount a = watch.Account();
  EXPECT_EQ(a.at_peak.heap_in_use_bytes, 350);
  EXPECT_EQ(a.at_peak.heap_held_bytes, 350);
  // 100 program + 340 heap growth in use.
  EXPECT_EQ(a.named_bytes, 440);
  EXPECT_EQ(a.remainder_bytes, 60);
}

TEST(ProcessMemoryTest, FakeSamplerReplacesTheRealOne) {
  SetProcessSamplerForTesting([] { return Sample(7, 8, 0, 1, 2); });
  EXPECT_EQ(SampleProcess().resident_bytes, 7);
  SetProcessSamplerForTesting(nullptr);
  // The real one: this process has resident memory.
  const ProcessSample real = SampleProcess();
  EXPECT_GT(real.resident_bytes, 0);
  EXPECT_GE(real.peak_resident_bytes, real.resident_bytes);
  EXPECT_GE(real.heap_held_bytes, real.heap_in_use_bytes);
}

TEST(ProcessMemoryTest, AccountJsonHasEveryPart) {
  const nlohmann::json j = ProcessMemoryAccountJson(
      AccountFor(2000, Sample(2000, 2000, 550, 800, 950), 500, 300, Sample(1000, 1000, 400, 100, 150)));
  EXPECT_EQ(j["peak_resident_bytes"], 2000);
  EXPECT_EQ(j["parts"]["objects"], 300);
  EXPECT_EQ(j["parts"]["mapped_files"], 150);
  EXPECT_EQ(j["remainder_bytes"], 50);
  EXPECT_EQ(j["baseline"]["resident_bytes"], 1000);
}

}  // namespace
}  // namespace trellis::ledger
