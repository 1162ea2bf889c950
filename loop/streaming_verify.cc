#include "loop/streaming_verify.h"

#include <algorithm>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "config/worker_id.h"

namespace trellis::loop {

StreamingVerify::StreamingVerify(verifier::VerifierClient* verifier, ledger::Ledger* ledger,
                                 std::map<uint64_t, const data::Example*> examples)
    : verifier_(verifier), ledger_(ledger), examples_(std::move(examples)) {}

StreamingVerify::~StreamingVerify() { Close(); }

void StreamingVerify::Close() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    closed_ = true;
  }
  cv_.notify_all();
  for (std::thread& t : threads_) {
    if (t.joinable()) t.join();
  }
}

void StreamingVerify::Add(const v1::GenerateResponse& part) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.emplace_back(added_++, part);
    // A thread of its own for the part unless a waiting one takes it.
    if (!closed_ && static_cast<int>(queue_.size()) > idle_ &&
        static_cast<int>(threads_.size()) < kCallsInFlight) {
      threads_.emplace_back([this] { Run(); });
    }
  }
  cv_.notify_one();
}

void StreamingVerify::Run() {
  while (true) {
    int64_t order = 0;
    v1::GenerateResponse part;
    {
      std::unique_lock<std::mutex> lock(mu_);
      ++idle_;
      cv_.wait(lock, [this] { return closed_ || !queue_.empty(); });
      --idle_;
      if (queue_.empty()) return;
      order = queue_.front().first;
      part = std::move(queue_.front().second);
      queue_.pop_front();
      if (!error_.ok()) continue;  // Drain; the first error stands.
    }
    v1::VerifyRequest request;
    absl::Status bad;
    for (const v1::Sample& s : part.samples()) {
      auto it = examples_.find(s.prompt_id());
      if (it == examples_.end()) {
        bad = absl::InternalError(absl::StrCat("verify: a sample answers prompt ", s.prompt_id(),
                                               ", which was not asked"));
        break;
      }
      v1::VerifyItem* item = request.add_items();
      item->set_prompt(it->second->prompt);
      item->set_response(s.response_text());
      item->set_answer(it->second->answer);
    }
    Verified v;
    v.order = order;
    v.start = absl::Now();
    absl::StatusOr<v1::VerifyResponse> verdicts;
    if (bad.ok()) {
      auto span = ledger_->Begin(ledger::Stage::kVerify, config::WorkerId(v1::VERIFIER).ToString());
      verdicts = verifier_->Verify(request);
    }
    v.end = absl::Now();
    std::lock_guard<std::mutex> lock(mu_);
    if (!bad.ok()) {
      error_ = bad;
    } else if (!verdicts.ok()) {
      error_ = verdicts.status();
    } else if (verdicts->results_size() != part.samples_size()) {
      error_ = absl::InternalError(absl::StrCat("verify: ", verdicts->results_size(),
                                                " results for ", part.samples_size(), " samples"));
    } else {
      v.part = std::move(part);
      v.verdicts = *std::move(verdicts);
      verified_.push_back(std::move(v));
    }
  }
}

absl::StatusOr<StreamingVerify::Result> StreamingVerify::Finish(
    const google::protobuf::RepeatedPtrField<v1::Sample>& samples, absl::Time rollout_end) {
  Close();
  if (!error_.ok()) return error_;
  // The parts in the order they were added, whichever call ended first.
  std::sort(verified_.begin(), verified_.end(),
            [](const Verified& a, const Verified& b) { return a.order < b.order; });
  // A sample is known by its prompt, its place in the group and its text;
  // two samples alike in all three get the same verdict from any verifier.
  using Key = std::tuple<uint64_t, int, std::string>;
  std::map<Key, std::deque<const v1::VerifyResult*>> by_sample;
  Result result;
  for (const Verified& v : verified_) {
    for (int i = 0; i < v.part.samples_size(); ++i) {
      const v1::Sample& s = v.part.samples(i);
      by_sample[Key{s.prompt_id(), s.index(), s.response_text()}].push_back(&v.verdicts.results(i));
    }
    for (const v1::VerifierStats& stats : v.verdicts.stats()) *result.verdicts.add_stats() = stats;
  }
  // The union of the calls' intervals, and its part before rollout_end.
  std::vector<std::pair<absl::Time, absl::Time>> spans;
  for (const Verified& v : verified_) spans.emplace_back(v.start, v.end);
  std::sort(spans.begin(), spans.end());
  absl::Time covered = absl::InfinitePast();
  for (auto [start, end] : spans) {
    start = std::max(start, covered);
    if (end <= start) continue;
    result.verify_seconds += absl::ToDoubleSeconds(end - start);
    if (start < rollout_end) {
      result.overlap_seconds += absl::ToDoubleSeconds(std::min(end, rollout_end) - start);
    }
    covered = end;
  }
  for (const v1::Sample& s : samples) {
    auto it = by_sample.find(Key{s.prompt_id(), s.index(), s.response_text()});
    if (it == by_sample.end() || it->second.empty()) {
      return absl::InternalError(
          absl::StrCat("verify: no verdict for sample ", s.index(), " of prompt ", s.prompt_id()));
    }
    *result.verdicts.add_results() = *it->second.front();
    it->second.pop_front();
  }
  return result;
}

}  // namespace trellis::loop
