#include "weightsync/internal/store_receiver.h"

#include <algorithm>
#include <exception>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "weightsync/internal/store_protocol.h"
#include "weightsync/internal/threaded_sender.h"

namespace trellis::weightsync::internal {

StoreReceiver::StoreReceiver(const std::string& transport, SlotKeys keys,
                             absl::Duration answer_grace, const TransportOptions& options)
    : PullReceiver(absl::StrCat(transport, " receiver ", options.receiver_index),
                   absl::StrCat(options.host, ":", options.port)),
      options_(options),
      keys_(keys),
      answer_grace_(answer_grace) {}

absl::StatusOr<std::string> StoreReceiver::Ask(int64_t min_version, absl::Time deadline,
                                               bool* answered) {
  try {
    if (!Linked()) {
      if (absl::Status s = Link(deadline); !s.ok()) return s;
    }
  } catch (const std::exception& e) {
    return StoreError(e);
  }
  ++seq_;
  const int slot = options_.receiver_index;
  return AskForVersion(*store_, keys_.in_generation(slot, gen_, absl::StrCat("req/", seq_)),
                       keys_.in_generation(slot, gen_, absl::StrCat("ans/", seq_)), min_version,
                       deadline, answer_grace_, answered);
}

absl::Status StoreReceiver::ConnectStore(absl::Time deadline) {
  absl::StatusOr<c10::intrusive_ptr<c10d::Store>> store = ReachStore(options_, deadline);
  if (!store.ok()) return store.status();
  store_ = *std::move(store);
  gen_ = store_->add(keys_.slot(options_.receiver_index, "generation"), 1);
  seq_ = 0;
  return absl::OkStatus();
}

}  // namespace trellis::weightsync::internal
