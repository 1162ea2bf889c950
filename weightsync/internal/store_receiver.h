#ifndef TRELLIS_WEIGHTSYNC_INTERNAL_STORE_RECEIVER_H_
#define TRELLIS_WEIGHTSYNC_INTERNAL_STORE_RECEIVER_H_

// The receiving end that the transports answered through the publisher's
// rendezvous store share (nccl, cuda_ipc; store_protocol.h): a PullReceiver that
// holds the link to the store (the store, the receiver slot's generation
// and the number of its last request), links when the transport is not
// linked yet, and asks for a version as its next request.

#include <cstdint>
#include <string>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "weightsync/internal/pull_receiver.h"
#include "weightsync/transport.h"

namespace trellis::weightsync::internal {

class StoreReceiver : public PullReceiver {
 public:
  // A transport's store keys of receiver slot `slot` (its protocol's Key):
  // without a generation ("generation"), and within generation `gen`
  // ("req/<n>", "ans/<n>").
  struct SlotKeys {
    std::string (*slot)(int slot, const std::string& what);
    std::string (*in_generation)(int slot, int64_t gen, const std::string& what);
  };

 protected:
  // `transport` starts the errors ("weightsync nccl"); an answer may come
  // until `answer_grace` past a request's deadline.
  StoreReceiver(const std::string& transport, SlotKeys keys, absl::Duration answer_grace,
                const TransportOptions& options);

  // Whether the transport's link is up: the store and what the transport
  // adds to it.
  virtual bool Linked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) = 0;

  // Makes that link by `deadline`, the store through ConnectStore. May
  // throw the store's exceptions.
  virtual absl::Status Link(absl::Time deadline) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) = 0;

  // Links unless Linked() (a thrown store error becomes StoreError), then
  // asks for a version >= `min_version` as the next request and returns
  // the answer's body (AskForVersion, which sets *answered).
  [[nodiscard]] absl::StatusOr<std::string> Ask(int64_t min_version, absl::Time deadline,
                                                bool* answered) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Connects store_ to the publisher's store once it listens (by `deadline`,
  // within connect_timeout), bumps the slot's generation into gen_ and
  // starts the requests over. May throw the store's exceptions.
  [[nodiscard]] absl::Status ConnectStore(absl::Time deadline) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const TransportOptions options_;
  c10::intrusive_ptr<c10d::Store> store_ ABSL_GUARDED_BY(mu_);
  int64_t gen_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t seq_ ABSL_GUARDED_BY(mu_) = 0;  // The last request's number.

 private:
  const SlotKeys keys_;
  const absl::Duration answer_grace_;
};

}  // namespace trellis::weightsync::internal

#endif  // TRELLIS_WEIGHTSYNC_INTERNAL_STORE_RECEIVER_H_
