#ifndef TRELLIS_OBSERVE_TENSORBOARD_SINK_H_
#define TRELLIS_OBSERVE_TENSORBOARD_SINK_H_

// The run's scalars as a TensorBoard event file in RUN/tensorboard/
// (event_file.h): one event per step and per evaluation, and the summary.
// `tensorboard --logdir RUN/tensorboard` shows them.

#include <cstdint>
#include <memory>
#include <ostream>
#include <string>

#include "absl/status/statusor.h"
#include "env/env.h"
#include "observe/event_file.h"
#include "observe/metric_sink.h"

namespace trellis::observe {

class TensorBoardSink final : public MetricSink {
 public:
  // Opens a new event file in `dir`; a run resumed at step `resumed_at`
  // (-1: a new run) starts it with SessionLog START there, so TensorBoard
  // drops what the earlier process wrote of the steps the run does again.
  // After a failed write (a full disk) the sink writes no more and says so
  // once on `warnings`.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<TensorBoardSink>> Create(
      env::Env* env, const std::string& dir, int64_t resumed_at, std::ostream* warnings);

  void Write(const MetricPoint& point) override;
  void Finish(const MetricPoint& summary, bool succeeded) override;

  const std::string& path() const { return writer_->path(); }

 private:
  TensorBoardSink(std::unique_ptr<EventFileWriter> writer, std::ostream* warnings);
  void Check(const absl::Status& s);

  std::unique_ptr<EventFileWriter> writer_;
  std::ostream* const warnings_;
  absl::Status status_;
  bool finished_ = false;
};

}  // namespace trellis::observe

#endif  // TRELLIS_OBSERVE_TENSORBOARD_SINK_H_
