#ifndef TRELLIS_VERIFIER_VERIFIER_SERVICE_H_
#define TRELLIS_VERIFIER_VERIFIER_SERVICE_H_

// The verifier role over gRPC (trellis.v1.Verifier, docs/verifier-protocol.md):
// a service that serves any verifier::Verifier, the scheduler's gRPC binding
// of VerifierClient, and the "remote" verifier that scores batches on a
// Verifier service elsewhere (a Python SDK verifier, `trellis serve
// verifier`). Kept out of trellis::verifier so that it builds without gRPC.

#include <memory>
#include <string>

#include <grpcpp/channel.h>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "config/request_limits.h"
#include "trellis/v1/services.grpc.pb.h"
#include "verifier/verifier.h"

namespace trellis::verifier {

struct VerifierServiceOptions {
  // A request with more than limits.max_verify_items items is refused as a
  // whole (INVALID_ARGUMENT naming "items"), one with a text field beyond
  // limits.max_text_bytes too (RESOURCE_EXHAUSTED naming the item's field).
  config::RequestLimits limits;
};

// Serves trellis.v1.Verifier/Verify with `verifier` (which must be
// thread-safe: gRPC calls Verify from several threads).
//  - A request unusable as a whole is refused naming the field, before
//    anything is verified: more items than options.limits allows
//    (INVALID_ARGUMENT, "items: ..."), a text field too long
//    (RESOURCE_EXHAUSTED, "items[3].response: ...").
//  - Problems of one item are that item's ERROR verdict with a reason, never
//    a failed call: metadata_json that is not a JSON object
//    ("items[3].metadata_json: ..."), a verifier that throws, a non-finite
//    reward or an unset verdict from the verifier. An empty response is a
//    response like any other; an empty request gets an empty response.
// Every result without a `verifier` name gets `verifier_name` ("" leaves it
// unset). The service keeps serving after bad requests.
std::unique_ptr<v1::Verifier::Service> NewVerifierService(
    std::shared_ptr<const Verifier> verifier, std::string verifier_name = "",
    VerifierServiceOptions options = {});

// The scheduler's binding of a Verifier service: one Verify call per
// request, with a deadline of `timeout`. Failures come back as the call's
// status (DEADLINE_EXCEEDED, UNAVAILABLE, ...) with a message that starts
// with "<worker_id> (<peer>) Verify"; the caller decides whether to retry
// or degrade. A reply with a wrong number of results is INTERNAL; results
// with a non-finite reward or an unset verdict are turned into ERROR
// verdicts saying so (so a reply is always usable for training).
std::unique_ptr<VerifierClient> NewGrpcVerifierClient(std::shared_ptr<grpc::Channel> channel,
                                                      std::string worker_id,
                                                      absl::Duration timeout);

// Registers "remote": a Verifier that sends each batch as one Verify call to
// the service at config.address (one persistent channel per verifier),
// with a deadline of config.deadline_ms per batch. It never fails a batch:
//  - no answer in time: every item TIMEOUT, reward config.timeout_reward,
//    detail "timeout: ...";
//  - unreachable service or a failed call: every item ERROR,
//    reward config.reward_wrong, detail naming the address and the status;
//  - a malformed reply (wrong number of results): every item ERROR; a
//    result with a NaN/infinite reward or an unset verdict: that item ERROR.
// The factory refuses an empty verifier.address or deadline_ms <= 0
// (INVALID_ARGUMENT), and, unless config.connect_timeout_ms is 0, a service
// that does not accept a connection within it (UNAVAILABLE naming
// verifier.address).
[[nodiscard]] absl::Status RegisterRemoteVerifier(VerifierRegistry& registry);

}  // namespace trellis::verifier

#endif  // TRELLIS_VERIFIER_VERIFIER_SERVICE_H_
