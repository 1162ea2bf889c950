#include "plugin/line_worker.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace trellis::plugin {

std::string LineWorker::Reap(bool kill) {
  if (!kill) (void)child_->Wait(absl::Now() + absl::Milliseconds(200));
  child_->Kill();
  std::string how = Child::DescribeExit(child_->wait_status());
  child_.reset();
  ++generation_;
  return how;
}

absl::StatusOr<std::string> LineWorker::Call(nlohmann::json& request, absl::Time deadline,
                                             size_t max_line_bytes) {
  // Output nobody asked for (an extra line, or the end of a dead process's
  // stream): the process is out of step; start afresh.
  if (child_ != nullptr && child_->HasPendingOutput()) Reap(true);
  if (child_ == nullptr) {
    SpawnOptions o;
    o.argv = argv_;
    absl::StatusOr<std::unique_ptr<Child>> child = Child::Spawn(o);
    if (!child.ok()) {
      return absl::UnavailableError(absl::StrCat(name_, ": ", child.status().message()));
    }
    child_ = *std::move(child);
  }
  const uint64_t id = next_id_++;
  request["id"] = id;
  const std::string line =
      request.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  absl::Status written = child_->Write(line, deadline);
  absl::StatusOr<std::string> answer =
      written.ok() ? child_->ReadLine(deadline, max_line_bytes) : written;
  while (answer.ok()) {
    const nlohmann::json j = nlohmann::json::parse(*answer, nullptr, false);
    if (!j.is_object() || !j.contains("id") || !j["id"].is_number_unsigned() ||
        j["id"].get<uint64_t>() >= id) {
      break;
    }
    answer = child_->ReadLine(deadline, max_line_bytes);
  }
  if (absl::IsDeadlineExceeded(answer.status())) {
    Reap(true);
    return absl::DeadlineExceededError(absl::StrCat(name_, " killed"));
  }
  if (absl::IsUnavailable(answer.status())) {
    return absl::AbortedError(absl::StrCat(name_, " died (", Reap(false), ")"));
  }
  if (!answer.ok()) {
    Reap(true);
    return absl::DataLossError(absl::StrCat(name_, ": ", answer.status().message()));
  }
  if (child_->HasBufferedOutput()) {
    Reap(true);
    return absl::DataLossError(absl::StrCat(name_, ": more than one line for one request"));
  }
  return answer;
}

}  // namespace trellis::plugin
