#ifndef TRELLIS_COMM_GLOO_PAIR_H_
#define TRELLIS_COMM_GLOO_PAIR_H_

// Gloo process groups over the rendezvous store (tcp_store.h): the device
// a rank binds, joining a group, and waiting on its sends and receives with
// a deadline. Used by the gloo weight transport (a two-rank pair per
// receiver slot) and the learner's data-parallel group.

#include <memory>
#include <string>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace trellis::comm {

using GlooGroup = c10d::ProcessGroupGloo;
using GlooDevice = ::gloo::transport::Device;

bool IsLoopback(const std::string& host);

// The device this rank's gloo transport binds: `local_host` when set, else
// `store_host` when that is a loopback address (every rank on this
// machine), else this machine's hostname as resolved by gloo. Unavailable
// when gloo cannot make it.
[[nodiscard]] absl::StatusOr<std::shared_ptr<GlooDevice>> NewGlooDevice(
    const std::string& store_host, const std::string& local_host);

// Joins the `size`-rank group under `prefix` of `store` as `rank`, on
// `device`; the rendezvous and every later operation time out after
// `timeout`. Unavailable naming `prefix` when the rendezvous fails.
[[nodiscard]] absl::StatusOr<c10::intrusive_ptr<GlooGroup>> JoinGlooGroup(
    const c10::intrusive_ptr<c10d::Store>& store, const std::string& prefix, int rank, int size,
    const std::shared_ptr<GlooDevice>& device, absl::Duration timeout);

// Waits for one send, recv or collective. A gloo timeout poisons the whole
// group, so every error here means: drop the group. Cancelled when the
// work was aborted, DeadlineExceeded after `timeout`, else Unavailable;
// each message starts with `what`.
[[nodiscard]] absl::Status WaitWork(const c10::intrusive_ptr<c10d::Work>& work,
                                    absl::Duration timeout, const char* what);

}  // namespace trellis::comm

#endif  // TRELLIS_COMM_GLOO_PAIR_H_
