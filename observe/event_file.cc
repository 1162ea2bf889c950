#include "observe/event_file.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "observe/crc32c.h"
#include "trellis/v1/tensorboard.pb.h"

namespace trellis::observe {
namespace {

void AppendLittleEndian(uint64_t value, int bytes, std::string* out) {
  for (int i = 0; i < bytes; ++i) out->push_back(static_cast<char>((value >> (8 * i)) & 0xFF));
}

double UnixSeconds(absl::Time time) { return absl::ToDoubleSeconds(time - absl::UnixEpoch()); }

}  // namespace

std::string FrameRecord(std::string_view data) {
  std::string out;
  out.reserve(data.size() + 16);
  AppendLittleEndian(data.size(), 8, &out);
  AppendLittleEndian(MaskCrc32c(Crc32c(out)), 4, &out);
  out.append(data);
  AppendLittleEndian(MaskCrc32c(Crc32c(data)), 4, &out);
  return out;
}

EventFileWriter::EventFileWriter(std::unique_ptr<env::AppendableFile> file)
    : file_(std::move(file)) {}

absl::StatusOr<std::unique_ptr<EventFileWriter>> EventFileWriter::Create(env::Env* env,
                                                                         const std::string& dir,
                                                                         const std::string& host) {
  if (absl::Status s = env->CreateDir(dir); !s.ok()) return s;
  const absl::Time now = env->Now();
  const std::string path =
      absl::StrCat(dir, "/events.out.tfevents.", absl::ToUnixSeconds(now), ".", host);
  absl::StatusOr<std::unique_ptr<env::AppendableFile>> file =
      env->OpenAppendable(path, /*truncate=*/false);
  if (!file.ok()) return file.status();
  std::unique_ptr<EventFileWriter> writer(new EventFileWriter(*std::move(file)));
  v1::TensorBoardEvent event;
  event.set_wall_time(UnixSeconds(now));
  event.set_file_version("brain.Event:2");
  if (absl::Status s = writer->Write(event.SerializeAsString()); !s.ok()) return s;
  return writer;
}

absl::Status EventFileWriter::WriteScalars(int64_t step, absl::Time time,
                                           const std::vector<ledger::Scalar>& scalars) {
  v1::TensorBoardEvent event;
  event.set_wall_time(UnixSeconds(time));
  event.set_step(step);
  v1::TensorBoardSummary* summary = event.mutable_summary();
  for (const ledger::Scalar& s : scalars) {
    v1::TensorBoardSummary::Value* value = summary->add_value();
    value->set_tag(s.tag);
    value->set_simple_value(static_cast<float>(s.value));
  }
  return Write(event.SerializeAsString());
}

absl::Status EventFileWriter::WriteSessionStart(int64_t step, absl::Time time) {
  v1::TensorBoardEvent event;
  event.set_wall_time(UnixSeconds(time));
  event.set_step(step);
  event.mutable_session_log()->set_status(v1::TensorBoardSessionLog::START);
  return Write(event.SerializeAsString());
}

absl::Status EventFileWriter::Write(const std::string& event) {
  return file_->Append(FrameRecord(event));
}

}  // namespace trellis::observe
