#ifndef TRELLIS_OBSERVE_EVENT_FILE_H_
#define TRELLIS_OBSERVE_EVENT_FILE_H_

// A TensorBoard event file: TFRecord records (FrameRecord) of Event
// messages (proto/trellis/v1/tensorboard.proto, TensorFlow's field
// numbers), the first with file_version "brain.Event:2", then one per
// point with its wall time, step and scalar values. TensorBoard reads every
// file named events.out.tfevents.* in its log directory.

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "env/env.h"
#include "ledger/record_scalars.h"

namespace trellis::observe {

// One TFRecord: the data's length (8 bytes, little-endian), the masked
// CRC-32C of those 8 bytes (4), the data, the masked CRC-32C of the data (4).
std::string FrameRecord(std::string_view data);

class EventFileWriter {
 public:
  // Creates `dir` (and its parents) and in it the file
  // events.out.tfevents.<Unix seconds>.<host>, appended to if it exists,
  // starting with the file_version event. Files go through `env`, whose
  // clock gives the file's time. REQUIRES: `env` outlives the writer.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<EventFileWriter>> Create(
      env::Env* env, const std::string& dir, const std::string& host);

  // One event: `scalars` at `step`, stamped `time`.
  [[nodiscard]] absl::Status WriteScalars(int64_t step, absl::Time time,
                                          const std::vector<ledger::Scalar>& scalars);
  // SessionLog START at `step`: TensorBoard forgets the values it read of
  // steps >= `step` (a resumed run's steps after its checkpoint).
  [[nodiscard]] absl::Status WriteSessionStart(int64_t step, absl::Time time);

  const std::string& path() const { return file_->path(); }

 private:
  explicit EventFileWriter(std::unique_ptr<env::AppendableFile> file);
  [[nodiscard]] absl::Status Write(const std::string& event);

  std::unique_ptr<env::AppendableFile> file_;
};

}  // namespace trellis::observe

#endif  // TRELLIS_OBSERVE_EVENT_FILE_H_
