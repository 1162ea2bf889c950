#ifndef TRELLIS_WEIGHTSYNC_INTERNAL_INPROCESS_TESTING_H_
#define TRELLIS_WEIGHTSYNC_INTERNAL_INPROCESS_TESTING_H_

// Fault injection for transport tests. Not for production code.

#include <cstdint>

#include "absl/status/status.h"
#include "weightsync/transport.h"

namespace trellis::weightsync::internal {

// Flips every bit of one byte of bucket `bucket` of the newest published
// version, in place, as a receiver will read it (its stored checksum is
// left alone). `byte` is taken modulo the bucket's size.
// REQUIRES: `publisher` stages its newest version (in-process, gloo, grpc,
// nccl: internal/staging.h) and no transfer of that version is running
// concurrently. Returns FailedPrecondition when nothing is published,
// OutOfRange for a bucket that does not exist or is empty, InvalidArgument
// for another publisher.
[[nodiscard]] absl::Status CorruptBucketForTesting(Publisher& publisher, int bucket,
                                                   int64_t byte = 0);

}  // namespace trellis::weightsync::internal

#endif  // TRELLIS_WEIGHTSYNC_INTERNAL_INPROCESS_TESTING_H_
