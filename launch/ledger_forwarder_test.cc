// LedgerForwarder against a fake scheduler (an injected Send): one call per
// step at most, a step that never waits on a slow scheduler, every record
// once and in order. Synchronised with mutexes and notifications: nothing
// here depends on how fast anything runs.

#include "launch/ledger_forwarder.h"

#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trellis::launch {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;

v1::LedgerRecord Record(int64_t bytes) {
  v1::LedgerRecord r;
  r.mutable_object()->set_object("parameters");
  r.mutable_object()->set_bytes(bytes);
  r.mutable_object()->set_stage("update");
  return r;
}

// The scheduler's end: keeps every report; with `hold`, each call waits
// until Release().
class FakeScheduler {
 public:
  explicit FakeScheduler(bool hold = false) : hold_(hold) {}

  LedgerForwarder::Send AsSend() {
    return [this](const v1::LedgerReport& report) {
      {
        absl::MutexLock lock(&mu_);
        reports_.push_back(report);
        for (const v1::LedgerRecord& r : report.records()) bytes_.push_back(r.object().bytes());
      }
      if (hold_) release_.WaitForNotification();
      return status_;
    };
  }
  void Release() { release_.Notify(); }
  void FailWith(absl::Status status) { status_ = std::move(status); }
  // Blocks until `n` records have reached the fake (the call may be held).
  void AwaitRecords(size_t n) {
    absl::MutexLock lock(&mu_);
    const auto arrived = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return bytes_.size() >= n;
    };
    mu_.Await(absl::Condition(&arrived));
  }
  // Blocks until `n` reports have reached the fake.
  void AwaitReports(size_t n) {
    absl::MutexLock lock(&mu_);
    const auto arrived = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return reports_.size() >= n;
    };
    mu_.Await(absl::Condition(&arrived));
  }
  std::vector<v1::LedgerReport> reports() {
    absl::MutexLock lock(&mu_);
    return reports_;
  }
  std::vector<int64_t> bytes() {
    absl::MutexLock lock(&mu_);
    return bytes_;
  }

 private:
  const bool hold_;
  absl::Notification release_;
  absl::Status status_;
  absl::Mutex mu_;
  std::vector<v1::LedgerReport> reports_ ABSL_GUARDED_BY(mu_);
  std::vector<int64_t> bytes_ ABSL_GUARDED_BY(mu_);
};

TEST(LedgerForwarderTest, SendsAtMostOnceAStepEveryRecordOnceInOrder) {
  FakeScheduler scheduler;
  LedgerForwarder forwarder("learner-0", scheduler.AsSend());
  std::vector<int64_t> made;
  for (int step = 0; step < 10; ++step) {
    for (int i = 0; i < 3; ++i) {
      made.push_back(100 * step + i);
      forwarder.Add(Record(made.back()));
    }
    forwarder.StepAdvanced(step);
    scheduler.AwaitRecords(made.size());
    // The same step again, or an older one, sends nothing: this record
    // waits for the next step's call.
    made.push_back(100 * step + 99);
    forwarder.Add(Record(made.back()));
    forwarder.StepAdvanced(step);
    forwarder.StepAdvanced(step - 1);
  }
  const LedgerForwarder::Counts counts = forwarder.Close();

  // Ten steps, ten calls, and one at Close for the last late record.
  const std::vector<v1::LedgerReport> reports = scheduler.reports();
  ASSERT_EQ(reports.size(), 11u);
  EXPECT_EQ(reports.front().records_size(), 3);
  for (size_t i = 1; i < 10; ++i) EXPECT_EQ(reports[i].records_size(), 4) << "call " << i;
  EXPECT_EQ(reports.back().records_size(), 1);
  for (const v1::LedgerReport& r : reports) EXPECT_EQ(r.worker_id(), "learner-0");
  EXPECT_THAT(scheduler.bytes(), ElementsAreArray(made));
  EXPECT_EQ(counts.recorded, 40);
  EXPECT_EQ(counts.sent, 40);
  EXPECT_EQ(counts.calls, 11);
  EXPECT_EQ(counts.dropped + counts.lost, 0);
}

TEST(LedgerForwarderTest, AStepNeverWaitsForASlowScheduler) {
  FakeScheduler scheduler(/*hold=*/true);
  LedgerForwarder forwarder("actor-0", scheduler.AsSend());
  forwarder.Add(Record(0));
  forwarder.StepAdvanced(0);
  scheduler.AwaitRecords(1);  // The flusher is now stuck in its call.

  // Two more steps' records and step changes, all while the call is held:
  // none of these waits for it (else the test would never reach Release).
  for (int64_t b = 1; b <= 6; ++b) {
    forwarder.Add(Record(b));
    if (b % 3 == 0) forwarder.StepAdvanced(b / 3);
  }
  EXPECT_EQ(forwarder.delivered_step(), -1);
  EXPECT_EQ(scheduler.reports().size(), 1u);
  scheduler.Release();
  const LedgerForwarder::Counts counts = forwarder.Close();

  // Steps 1 and 2 ended during the held call: their records go together.
  const std::vector<v1::LedgerReport> reports = scheduler.reports();
  ASSERT_EQ(reports.size(), 2u);
  EXPECT_EQ(reports[1].records_size(), 6);
  EXPECT_THAT(scheduler.bytes(), ElementsAre(0, 1, 2, 3, 4, 5, 6));
  EXPECT_EQ(forwarder.delivered_step(), 2);
  EXPECT_EQ(counts.sent, counts.recorded);
}

TEST(LedgerForwarderTest, AFullBufferIsSentBeforeTheStepEnds) {
  FakeScheduler scheduler;
  LedgerForwarder::Options options;
  options.flush_at = 4;
  LedgerForwarder forwarder("learner-0", scheduler.AsSend(), options);
  for (int64_t b = 0; b < 4; ++b) forwarder.Add(Record(b));
  scheduler.AwaitRecords(4);
  ASSERT_EQ(scheduler.reports().size(), 1u);
  EXPECT_EQ(scheduler.reports()[0].records_size(), 4);
  EXPECT_EQ(forwarder.Close().sent, 4);
}

TEST(LedgerForwarderTest, BeyondCapacityRecordsAreDroppedAndCounted) {
  FakeScheduler scheduler(/*hold=*/true);
  LedgerForwarder::Options options;
  options.capacity = 2;
  LedgerForwarder forwarder("actor-0", scheduler.AsSend(), options);
  forwarder.Add(Record(0));
  forwarder.StepAdvanced(0);
  scheduler.AwaitRecords(1);
  for (int64_t b = 1; b <= 3; ++b) forwarder.Add(Record(b));  // 3 does not fit.
  scheduler.Release();
  const LedgerForwarder::Counts counts = forwarder.Close();
  EXPECT_THAT(scheduler.bytes(), ElementsAre(0, 1, 2));
  EXPECT_EQ(counts.recorded, 4);
  EXPECT_EQ(counts.sent, 3);
  EXPECT_EQ(counts.dropped, 1);
}

TEST(LedgerForwarderTest, CloseSendsWhatIsLeftAndLaterRecordsAreDropped) {
  FakeScheduler scheduler;
  LedgerForwarder forwarder("reference-0", scheduler.AsSend());
  for (int64_t b = 0; b < 3; ++b) forwarder.Add(Record(b));
  const LedgerForwarder::Counts closed = forwarder.Close();
  forwarder.Add(Record(3));
  EXPECT_THAT(scheduler.bytes(), ElementsAre(0, 1, 2));
  EXPECT_EQ(closed.sent, 3);
  EXPECT_EQ(closed.calls, 1);
  EXPECT_EQ(forwarder.counts().dropped, 1);
}

TEST(LedgerForwarderTest, AFailedCallCountsItsRecordsLostAndTheStepDelivered) {
  FakeScheduler scheduler;
  scheduler.FailWith(absl::UnavailableError("scheduler gone"));
  LedgerForwarder forwarder("actor-0", scheduler.AsSend());
  forwarder.Add(Record(0));
  forwarder.Add(Record(1));
  forwarder.StepAdvanced(5);
  const LedgerForwarder::Counts counts = forwarder.Close();
  EXPECT_EQ(counts.lost, 2);
  EXPECT_EQ(counts.sent, 0);
  // A drain waits for the step, not for records that cannot arrive.
  EXPECT_EQ(forwarder.delivered_step(), 5);
}

v1::ProcessMemory Process(int64_t peak) {
  v1::ProcessMemory p;
  p.set_peak_resident_bytes(peak);
  return p;
}

// The process memory rides on the step's report, alone when no record is
// buffered; of two set before a report, the later goes; Close sends the
// last.
TEST(LedgerForwarderTest, ProcessMemoryGoesWithTheNextReportTheLatestOnly) {
  FakeScheduler scheduler;
  LedgerForwarder forwarder("actor-0", scheduler.AsSend());
  forwarder.SetProcess(Process(100));
  forwarder.SetProcess(Process(200));
  forwarder.StepAdvanced(0);
  scheduler.AwaitReports(1);
  forwarder.Add(Record(7));
  forwarder.StepAdvanced(1);
  scheduler.AwaitRecords(1);
  forwarder.SetProcess(Process(300));
  const LedgerForwarder::Counts counts = forwarder.Close();

  const std::vector<v1::LedgerReport> reports = scheduler.reports();
  ASSERT_EQ(reports.size(), 3u);
  EXPECT_EQ(reports[0].records_size(), 0);
  EXPECT_EQ(reports[0].process().peak_resident_bytes(), 200);
  EXPECT_EQ(reports[1].records_size(), 1);
  EXPECT_FALSE(reports[1].has_process());
  EXPECT_EQ(reports[2].process().peak_resident_bytes(), 300);
  EXPECT_EQ(counts.calls, 3);
  EXPECT_EQ(counts.sent, 1);
}

// What a worker's ledger forwards goes out with ledger/kinds.h's names,
// which the scheduler reads back (scheduler/scheduler_service.cc).
TEST(LedgerForwarderTest, ObjectAndMoveRecordsCarryTheLedgersNames) {
  const v1::LedgerRecord object =
      ToLedgerRecord(ledger::ForwardedObject{ledger::Object::kKvCache, 7, ledger::Stage::kRollout});
  ASSERT_TRUE(object.has_object());
  EXPECT_EQ(object.object().object(), "kv_cache");
  EXPECT_EQ(object.object().bytes(), 7);
  EXPECT_EQ(object.object().stage(), "rollout");

  const v1::LedgerRecord move = ToLedgerRecord(
      ledger::ForwardedMove{ledger::Object::kOptimizerState, ledger::MoveDirection::kIn, 64, 0.5,
                            ledger::Stage::kUpdate});
  ASSERT_TRUE(move.has_move());
  EXPECT_EQ(move.move().object(), "optimizer_state");
  EXPECT_EQ(move.move().direction(), "in");
  EXPECT_EQ(move.move().bytes(), 64);
  EXPECT_EQ(move.move().seconds(), 0.5);
  EXPECT_EQ(move.move().stage(), "update");
}

}  // namespace
}  // namespace trellis::launch
