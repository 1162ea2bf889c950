#include "launch/ledger_forwarder.h"

#include <algorithm>
#include <string>
#include <utility>
#include <variant>

namespace trellis::launch {

v1::LedgerRecord ToLedgerRecord(const ledger::ForwardedRecord& record) {
  v1::LedgerRecord out;
  if (const auto* object = std::get_if<ledger::ForwardedObject>(&record)) {
    v1::ObjectRecord* o = out.mutable_object();
    o->set_object(std::string(ledger::ObjectName(object->object)));
    o->set_bytes(object->bytes);
    o->set_stage(std::string(ledger::StageName(object->stage)));
    return out;
  }
  const ledger::ForwardedMove& move = std::get<ledger::ForwardedMove>(record);
  v1::MoveRecord* m = out.mutable_move();
  m->set_object(std::string(ledger::ObjectName(move.object)));
  m->set_direction(std::string(ledger::MoveDirectionName(move.direction)));
  m->set_bytes(move.bytes);
  m->set_seconds(move.seconds);
  m->set_stage(std::string(ledger::StageName(move.stage)));
  return out;
}

LedgerForwarder::LedgerForwarder(std::string worker_id, Send send, Options options)
    : worker_id_(std::move(worker_id)), send_(std::move(send)), options_(options) {
  flusher_ = std::thread([this] { Flush(); });
}

LedgerForwarder::~LedgerForwarder() { Close(); }

void LedgerForwarder::Add(v1::LedgerRecord record) {
  absl::MutexLock lock(&mu_);
  counts_.recorded += 1;
  if (closing_ || static_cast<int64_t>(buffer_.size()) >= options_.capacity) {
    counts_.dropped += 1;
    return;
  }
  buffer_.push_back(std::move(record));
}

void LedgerForwarder::SetProcess(v1::ProcessMemory process) {
  absl::MutexLock lock(&mu_);
  process_ = std::move(process);
}

void LedgerForwarder::StepAdvanced(int64_t step) {
  absl::MutexLock lock(&mu_);
  step_ = std::max(step_, step);
}

int64_t LedgerForwarder::delivered_step() const {
  absl::MutexLock lock(&mu_);
  return delivered_step_;
}

LedgerForwarder::Counts LedgerForwarder::Close() {
  {
    absl::MutexLock lock(&mu_);
    closing_ = true;
  }
  if (flusher_.joinable()) flusher_.join();
  return counts();
}

LedgerForwarder::Counts LedgerForwarder::counts() const {
  absl::MutexLock lock(&mu_);
  return counts_;
}

void LedgerForwarder::Flush() {
  const auto due = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return closing_ || step_ > delivered_step_ ||
           static_cast<int64_t>(buffer_.size()) >= options_.flush_at;
  };
  while (true) {
    v1::LedgerReport report;
    report.set_worker_id(worker_id_);
    int64_t step = 0;
    bool last = false;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(&due));
      for (v1::LedgerRecord& r : buffer_) *report.add_records() = std::move(r);
      buffer_.clear();
      if (process_.has_value()) *report.mutable_process() = *std::move(process_);
      process_.reset();
      step = step_;
      last = closing_;
    }
    // Outside the lock: Add() and StepAdvanced() never wait for the call.
    const bool any = !report.records().empty() || report.has_process();
    absl::Status sent = any ? send_(report) : absl::OkStatus();
    absl::MutexLock lock(&mu_);
    if (any) {
      counts_.calls += 1;
      (sent.ok() ? counts_.sent : counts_.lost) += report.records_size();
    }
    delivered_step_ = std::max(delivered_step_, step);
    if (last) return;
  }
}

}  // namespace trellis::launch
