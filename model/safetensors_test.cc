#include "model/safetensors.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <string>

#include <torch/torch.h>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trellis::model {
namespace {

using ::testing::HasSubstr;

std::string TempPath(const std::string& name) {
  return ::testing::TempDir() + "/" + name + "." + std::to_string(::getpid()) + ".safetensors";
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void WriteAll(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// A file made of the given JSON header and `data_bytes` zero bytes.
std::string RawFile(const std::string& header, size_t data_bytes) {
  std::string out(8, '\0');
  const uint64_t n = header.size();
  std::memcpy(out.data(), &n, 8);
  return out + header + std::string(data_bytes, '\0');
}

TEST(SafetensorsTest, RoundtripSeveralDtypesAndMetadata) {
  torch::manual_seed(0);
  const NamedTensors tensors = {
      {"f32", torch::randn({3, 4})},
      {"f16", torch::randn({5}).to(torch::kFloat16)},
      {"bf16", torch::randn({2, 2}).to(torch::kBFloat16)},
      {"f64", torch::randn({1, 2, 3}, torch::kFloat64)},
      {"i64", torch::arange(7, torch::kInt64)},
      {"i32", torch::arange(-3, 3, torch::kInt32)},
      {"i8", torch::tensor({-128, 0, 127}, torch::kInt8)},
      {"u8", torch::tensor({0, 255}, torch::kUInt8)},
      {"bool", torch::tensor({true, false, true})},
      {"scalar", torch::tensor(3.5f)},
      {"empty", torch::zeros({0, 4})},
      {"strided", torch::randn({4, 3}).t()},
  };
  const std::string path = TempPath("roundtrip");
  const std::map<std::string, std::string> meta = {{"format", "pt"}, {"step", "12"}};
  ASSERT_TRUE(SaveSafetensors(path, tensors, meta).ok());

  std::map<std::string, std::string> got_meta;
  auto loaded = LoadSafetensors(path, &got_meta);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(got_meta, meta);
  ASSERT_EQ(loaded->size(), tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    SCOPED_TRACE(tensors[i].first);
    EXPECT_EQ((*loaded)[i].first, tensors[i].first);  // file order = save order
    EXPECT_EQ((*loaded)[i].second.scalar_type(), tensors[i].second.scalar_type());
    EXPECT_EQ((*loaded)[i].second.sizes(), tensors[i].second.sizes());
    EXPECT_TRUE(torch::equal((*loaded)[i].second, tensors[i].second));
  }
  // The header is padded so that the data starts 8-byte aligned.
  uint64_t header_len;
  std::memcpy(&header_len, ReadAll(path).data(), 8);
  EXPECT_EQ(header_len % 8, 0u);
  std::remove(path.c_str());
}

TEST(SafetensorsTest, SaveRefusesDuplicateAndUnsupported) {
  const std::string path = TempPath("bad_save");
  EXPECT_EQ(SaveSafetensors(path, {{"a", torch::ones({1})}, {"a", torch::ones({1})}}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SaveSafetensors(path, {{"c", torch::ones({1}, torch::kComplexFloat)}}).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(SafetensorsTest, MissingFileIsNotFound) {
  EXPECT_EQ(LoadSafetensors("/nonexistent/dir/x.safetensors").status().code(),
            absl::StatusCode::kNotFound);
}

TEST(SafetensorsTest, ConvertsFloatingTensorsToTheRequestedDtype) {
  const std::string path = TempPath("convert");
  torch::manual_seed(0);
  // Longer than one read chunk, so that the copy runs in several chunks.
  const int64_t n = static_cast<int64_t>(SafetensorsReader::kChunkBytes) / 4 * 2 + 5;
  const torch::Tensor big = torch::randn({n});
  const torch::Tensor ids = torch::arange(5, torch::kInt64);
  ASSERT_TRUE(SaveSafetensors(path, {{"big", big}, {"ids", ids}}).ok());
  for (torch::ScalarType t : {torch::kBFloat16, torch::kFloat16, torch::kFloat32}) {
    auto loaded = LoadSafetensors(path, nullptr, t);
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    EXPECT_TRUE(torch::equal((*loaded)[0].second, big.to(t)));
    EXPECT_TRUE(torch::equal((*loaded)[1].second, ids));  // not floating: as stored
  }
  EXPECT_EQ(LoadSafetensors(path, nullptr, torch::kInt32).status().code(),
            absl::StatusCode::kInvalidArgument);

  auto reader = SafetensorsReader::Open(path);
  ASSERT_TRUE(reader.ok()) << reader.status();
  const SafetensorsReader::TensorInfo& info = (*reader)->tensors()[0];
  EXPECT_EQ(info.name, "big");
  const absl::Status shape = (*reader)->ReadInto(info, torch::empty({n - 1}));
  EXPECT_EQ(shape.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(shape.message()), HasSubstr(path));
  EXPECT_THAT(std::string(shape.message()), HasSubstr("'big'"));
  EXPECT_EQ((*reader)->ReadInto(info, torch::empty({n}, torch::kInt64)).code(),
            absl::StatusCode::kInvalidArgument);
  std::remove(path.c_str());
}

TEST(SafetensorsTest, TruncatedFileIsDataLossNamingPathAndTensor) {
  const std::string path = TempPath("truncated");
  ASSERT_TRUE(SaveSafetensors(path, {{"a", torch::ones({4})}, {"b", torch::ones({8})}}).ok());
  const std::string bytes = ReadAll(path);

  WriteAll(path, bytes.substr(0, bytes.size() - 4));  // cut inside "b"
  auto loaded = LoadSafetensors(path);
  ASSERT_EQ(loaded.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(loaded.status().message()), HasSubstr(path));
  EXPECT_THAT(std::string(loaded.status().message()), HasSubstr("'b'"));

  WriteAll(path, bytes.substr(0, 20));  // cut inside the header
  EXPECT_EQ(LoadSafetensors(path).status().code(), absl::StatusCode::kDataLoss);
  WriteAll(path, bytes.substr(0, 5));  // cut inside the length
  EXPECT_EQ(LoadSafetensors(path).status().code(), absl::StatusCode::kDataLoss);
  std::remove(path.c_str());
}

TEST(SafetensorsTest, CorruptHeaderIsDataLoss) {
  const std::string path = TempPath("corrupt");
  struct Case {
    std::string header;
    size_t data;
    std::string expect;
  };
  const Case cases[] = {
      {"{not json", 0, "JSON"},
      {"[1,2]", 0, "JSON object"},
      {R"({"a":{"dtype":"Q7","shape":[1],"data_offsets":[0,4]}})", 4, "dtype"},
      {R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", 4, "'a'"},
      {R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
       R"("b":{"dtype":"F32","shape":[1],"data_offsets":[2,6]}})", 8, "overlap"},
      {R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", 8, "'a'"},
      {R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 12, "cover"},
      {R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 4, "shape"},
      {R"({"a":{"dtype":"F32","shape":[1]}})", 4, "data_offsets"},
      {R"({"__metadata__":{"k":3}})", 0, "__metadata__"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.header);
    WriteAll(path, RawFile(c.header, c.data));
    auto loaded = LoadSafetensors(path);
    ASSERT_EQ(loaded.status().code(), absl::StatusCode::kDataLoss);
    EXPECT_THAT(std::string(loaded.status().message()), HasSubstr(c.expect));
  }
  // A header length larger than the file: the error names the file's size
  // and what was expected, never the bytes it read ("ABCDEFGH" here).
  WriteAll(path, "ABCDEFGH{}");
  const absl::Status huge = LoadSafetensors(path).status();
  EXPECT_EQ(huge.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(huge.message()), HasSubstr("the file is 10 bytes; expected"));
  uint64_t read_as_length;
  std::memcpy(&read_as_length, "ABCDEFGH", 8);
  EXPECT_THAT(std::string(huge.message()),
              ::testing::Not(HasSubstr(std::to_string(read_as_length))));
  EXPECT_THAT(std::string(huge.message()), ::testing::Not(HasSubstr("ABCD")));
  std::remove(path.c_str());
}

// A FIFO named as a weights file is refused at once, not waited on.
TEST(SafetensorsTest, FifoIsRefusedWithoutWaiting) {
  const std::string path = TempPath("fifo");
  std::remove(path.c_str());
  ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0);
  const absl::Status s = LoadSafetensors(path).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(s.message()), HasSubstr("is a FIFO; expected a regular file"));
  std::remove(path.c_str());
}

}  // namespace
}  // namespace trellis::model
