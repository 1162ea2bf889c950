#include "weightsync/internal/store_protocol.h"

#include <algorithm>
#include <cstring>
#include <iterator>

#include "absl/time/clock.h"
#include "comm/tcp_store.h"

namespace trellis::weightsync::internal {

std::vector<uint8_t> Int64s(std::initializer_list<int64_t> v) {
  std::vector<uint8_t> out(v.size() * sizeof(int64_t));
  std::memcpy(out.data(), std::data(v), out.size());
  return out;
}

int64_t Int64At(const std::vector<uint8_t>& b, size_t i) {
  int64_t v = 0;
  if (b.size() >= (i + 1) * sizeof(int64_t)) {
    std::memcpy(&v, b.data() + i * sizeof(int64_t), sizeof(v));
  }
  return v;
}

std::vector<uint8_t> EncodeAnswer(const absl::Status& status, const std::string& body) {
  const absl::StatusCode code =
      absl::IsCancelled(status) ? absl::StatusCode::kUnavailable : status.code();
  std::vector<uint8_t> answer = Int64s({static_cast<int64_t>(code)});
  if (status.ok()) {
    answer.insert(answer.end(), body.begin(), body.end());
  } else {
    answer.insert(answer.end(), status.message().begin(), status.message().end());
  }
  return answer;
}

absl::StatusOr<std::string> DecodeAnswer(const std::vector<uint8_t>& answer) {
  const int64_t code = Int64At(answer, 0);
  std::string body(answer.begin() + std::min(answer.size(), sizeof(int64_t)), answer.end());
  if (code != 0) return absl::Status(static_cast<absl::StatusCode>(code), body);
  return body;
}

absl::Status StoreError(const std::exception& e) {
  const std::string msg = e.what();
  return msg.find("imeout") != std::string::npos || msg.find("timed out") != std::string::npos
             ? absl::DeadlineExceededError("no answer in time")
             : absl::UnavailableError(msg);
}

absl::StatusOr<std::string> AskForVersion(c10d::Store& store, const std::string& req_key,
                                          const std::string& ans_key, int64_t min_version,
                                          absl::Time deadline, absl::Duration grace,
                                          bool* answered) {
  std::vector<uint8_t> answer;
  try {
    const absl::Duration left = std::max(deadline - absl::Now(), absl::ZeroDuration());
    store.set(req_key, Int64s({min_version, absl::ToInt64Milliseconds(left)}));
    store.wait({ans_key}, comm::ToMs(left + grace));
    answer = store.get(ans_key);
    store.deleteKey(ans_key);
  } catch (const std::exception& e) {
    return StoreError(e);
  }
  *answered = true;
  return DecodeAnswer(answer);
}

}  // namespace trellis::weightsync::internal
