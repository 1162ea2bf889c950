#include "observe/tensorboard_sink.h"

#include <unistd.h>

#include <utility>

namespace trellis::observe {
namespace {

std::string HostName() {
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0 || name[0] == '\0') return "localhost";
  return name;
}

}  // namespace

TensorBoardSink::TensorBoardSink(std::unique_ptr<EventFileWriter> writer, std::ostream* warnings)
    : writer_(std::move(writer)), warnings_(warnings) {}

absl::StatusOr<std::unique_ptr<TensorBoardSink>> TensorBoardSink::Create(env::Env* env,
                                                                         const std::string& dir,
                                                                         int64_t resumed_at,
                                                                         std::ostream* warnings) {
  absl::StatusOr<std::unique_ptr<EventFileWriter>> writer =
      EventFileWriter::Create(env, dir, HostName());
  if (!writer.ok()) return writer.status();
  if (resumed_at >= 0) {
    if (absl::Status s = (*writer)->WriteSessionStart(resumed_at, env->Now()); !s.ok()) return s;
  }
  return std::unique_ptr<TensorBoardSink>(new TensorBoardSink(*std::move(writer), warnings));
}

void TensorBoardSink::Check(const absl::Status& s) {
  if (s.ok()) return;
  status_ = s;
  *warnings_ << "tensorboard: " << s.message() << "; the run goes on without more events there"
             << std::endl;
}

void TensorBoardSink::Write(const MetricPoint& point) {
  if (finished_ || !status_.ok()) return;
  Check(writer_->WriteScalars(point.step, point.time, point.scalars));
}

void TensorBoardSink::Finish(const MetricPoint& summary, bool /*succeeded*/) {
  if (!finished_ && status_.ok() && !summary.scalars.empty()) {
    Check(writer_->WriteScalars(summary.step, summary.time, summary.scalars));
  }
  finished_ = true;
}

}  // namespace trellis::observe
