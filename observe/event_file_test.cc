#include "observe/event_file.h"

#include <algorithm>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "env/testing/fake_env.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "observe/crc32c.h"
#include "observe/tensorboard_sink.h"
#include "trellis/v1/tensorboard.pb.h"

namespace trellis::observe {
namespace {

namespace fs = std::filesystem;
using env::testing::FakeEnv;
using ::testing::HasSubstr;
using ::testing::StartsWith;

uint64_t LittleEndian(std::string_view bytes) {
  uint64_t value = 0;
  for (size_t i = bytes.size(); i-- > 0;) value = (value << 8) | static_cast<uint8_t>(bytes[i]);
  return value;
}

// The records of a TFRecord file, each checked against its two CRCs.
std::vector<std::string> ReadRecords(const std::string& text) {
  std::vector<std::string> records;
  size_t at = 0;
  while (at < text.size()) {
    EXPECT_GE(text.size() - at, 16u) << "a torn record at " << at;
    if (text.size() - at < 16) break;
    const std::string_view header(text.data() + at, 8);
    const uint64_t length = LittleEndian(header);
    EXPECT_EQ(LittleEndian(std::string_view(text.data() + at + 8, 4)), MaskCrc32c(Crc32c(header)));
    const std::string data = text.substr(at + 12, length);
    EXPECT_EQ(LittleEndian(std::string_view(text.data() + at + 12 + length, 4)),
              MaskCrc32c(Crc32c(data)));
    records.push_back(data);
    at += 16 + length;
  }
  return records;
}

TEST(FrameRecordTest, LengthCrcsAndData) {
  const std::string framed = FrameRecord("abc");
  ASSERT_EQ(framed.size(), 3u + 16u);
  EXPECT_EQ(framed.substr(0, 8), std::string("\x03\0\0\0\0\0\0\0", 8));
  EXPECT_EQ(framed.substr(12, 3), "abc");
  EXPECT_EQ(ReadRecords(framed), std::vector<std::string>{"abc"});
}

class EventFileTest : public ::testing::Test {
 protected:
  EventFileTest() : dir_(fs::path(::testing::TempDir()) / "event_file_test") {
    fs::remove_all(dir_);
  }

  // The events of the one file in dir_.
  std::vector<v1::TensorBoardEvent> Events() {
    std::vector<v1::TensorBoardEvent> events;
    std::vector<fs::path> files;
    for (const auto& entry : fs::directory_iterator(dir_)) files.push_back(entry.path());
    EXPECT_EQ(files.size(), 1u);
    if (files.size() != 1) return events;
    EXPECT_THAT(files[0].filename().string(),
                StartsWith(absl::StrCat("events.out.tfevents.", FakeEnv::kStartUnixSeconds, ".")));
    absl::StatusOr<std::string> text = env_.ReadFile(files[0].string());
    EXPECT_TRUE(text.ok()) << text.status();
    for (const std::string& record : ReadRecords(*text)) {
      EXPECT_TRUE(events.emplace_back().ParseFromString(record));
    }
    return events;
  }

  FakeEnv env_;
  const fs::path dir_;
};

TEST_F(EventFileTest, FileVersionFirstThenOneEventPerPoint) {
  absl::StatusOr<std::unique_ptr<EventFileWriter>> writer =
      EventFileWriter::Create(&env_, dir_.string(), "host-a");
  ASSERT_TRUE(writer.ok()) << writer.status();
  env_.Advance(absl::Seconds(2));
  ASSERT_TRUE(
      (*writer)->WriteScalars(7, env_.Now(), {{"kl", 0.25}, {"loss", -1.5}, {"zero", 0}}).ok());
  ASSERT_TRUE((*writer)->WriteSessionStart(3, env_.Now()).ok());

  const std::vector<v1::TensorBoardEvent> events = Events();
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[0].file_version(), "brain.Event:2");
  EXPECT_EQ(events[0].wall_time(), static_cast<double>(FakeEnv::kStartUnixSeconds));
  EXPECT_EQ(events[1].step(), 7);
  EXPECT_EQ(events[1].wall_time(), FakeEnv::kStartUnixSeconds + 2.0);
  ASSERT_EQ(events[1].summary().value_size(), 3);
  EXPECT_EQ(events[1].summary().value(0).tag(), "kl");
  EXPECT_EQ(events[1].summary().value(0).simple_value(), 0.25f);
  EXPECT_EQ(events[1].summary().value(1).tag(), "loss");
  // A zero is written as one (TensorBoard skips a value without it).
  EXPECT_EQ(events[1].summary().value(2).value_case(),
            v1::TensorBoardSummary::Value::kSimpleValue);
  EXPECT_EQ(events[2].step(), 3);
  EXPECT_EQ(events[2].session_log().status(), v1::TensorBoardSessionLog::START);
  EXPECT_THAT((*writer)->path(), HasSubstr(".host-a"));
}

// A full disk: the sink stops writing, says so once, and the file ends
// with its last whole record.
TEST_F(EventFileTest, TheSinkStopsAtAFullDiskSayingSoOnce) {
  std::ostringstream warnings;
  absl::StatusOr<std::unique_ptr<TensorBoardSink>> sink =
      TensorBoardSink::Create(&env_, dir_.string(), /*resumed_at=*/-1, &warnings);
  ASSERT_TRUE(sink.ok()) << sink.status();
  (*sink)->Write({0, env_.Now(), {{"kl", 1}}});
  env_.SetDiskBudget(10);
  for (int step = 1; step < 4; ++step) (*sink)->Write({step, env_.Now(), {{"kl", 1}}});
  (*sink)->Finish({4, env_.Now(), {{"summary/steps", 4}}}, true);
  EXPECT_EQ(Events().size(), 2u);
  const std::string said = warnings.str();
  EXPECT_THAT(said, StartsWith("tensorboard: "));
  EXPECT_EQ(std::count(said.begin(), said.end(), '\n'), 1) << said;
}

}  // namespace
}  // namespace trellis::observe
