// The streaming load (LoadHfTransformer) on a generated sharded Llama
// directory: the same tensors as the eager path, the requested dtype, the
// errors naming the file and the tensor, and its process peak.
#include <malloc.h>
#include <torch/torch.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <regex>
#include <string>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/hf_model.h"
#include "model/policy.h"
#include "model/testing/sharded_checkpoint.h"

namespace trellis::model {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void Replace(const std::string& path, const std::string& from, const std::string& to) {
  std::string text = Slurp(path);
  ASSERT_NE(text.find(from), std::string::npos) << from << " in " << path;
  text.replace(text.find(from), from.size(), to);
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
}

// About 39 MB of float32 weights in two shards of about 20 MB: each shard
// is several SafetensorsReader::kChunkBytes long.
class HfLoadTest : public ::testing::Test {
 protected:
  void SetUp() override {
    trellis::v1::ModelConfig c;
    c.set_d_model(256);
    c.set_n_layers(6);
    c.set_n_heads(8);
    c.set_n_kv_heads(2);
    c.set_d_ff(1024);
    c.set_rope_theta(10000);
    c.set_rms_norm_eps(1e-5f);
    c.set_init_std(0.02f);
    {
      const std::unique_lock<std::recursive_mutex> draws = LockInitialDraws();
      torch::manual_seed(7);
      source_ = Transformer(c, /*vocab_size=*/8192);
    }
    dir_ = ::testing::TempDir() + "/hf_load_" + std::to_string(::getpid());
    fs::remove_all(dir_);
    ASSERT_TRUE(testing::WriteShardedLlama(dir_, *source_, /*shards=*/2, &bytes_).ok());
  }
  void TearDown() override { fs::remove_all(dir_); }

  void ExpectWeightsOf(const Transformer& model, torch::ScalarType dtype) {
    const auto want = source_->NamedWeights();
    const auto got = model->NamedWeights();
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(got[i].first, want[i].first);
      EXPECT_EQ(got[i].second.scalar_type(), dtype) << got[i].first;
      EXPECT_TRUE(torch::equal(got[i].second, want[i].second.to(dtype))) << got[i].first;
    }
  }

  absl::Status LoadStatus() { return LoadHfTransformer(dir_).status(); }

  Transformer source_{nullptr};
  std::string dir_;
  int64_t bytes_ = 0;
};

TEST_F(HfLoadTest, StreamingGivesTheEagerPathsTensors) {
  HfLoadStats stats;
  absl::StatusOr<Transformer> streamed = LoadHfTransformer(dir_, {}, &stats);
  ASSERT_TRUE(streamed.ok()) << streamed.status();
  ExpectWeightsOf(*streamed, torch::kFloat32);
  EXPECT_EQ(stats.file_bytes, bytes_);
  EXPECT_EQ(stats.parameter_bytes, bytes_);
  EXPECT_EQ(stats.tensors, static_cast<int64_t>(source_->NamedWeights().size()));

  absl::StatusOr<HfModel> hf = LoadHfModel(dir_);
  ASSERT_TRUE(hf.ok()) << hf.status();
  absl::StatusOr<Transformer> eager = NewHfTransformer(*hf);
  ASSERT_TRUE(eager.ok()) << eager.status();
  ExpectWeightsOf(*eager, torch::kFloat32);

  torch::NoGradGuard no_grad;
  const torch::Tensor tokens = torch::randint(8192, {2, 5});
  EXPECT_TRUE(torch::equal((*streamed)->forward(tokens), (*eager)->forward(tokens)));
}

TEST_F(HfLoadTest, ConvertsToTheRequestedDtype) {
  HfLoadStats stats;
  absl::StatusOr<Transformer> bf16 = LoadHfTransformer(dir_, {torch::kBFloat16}, &stats);
  ASSERT_TRUE(bf16.ok()) << bf16.status();
  ExpectWeightsOf(*bf16, torch::kBFloat16);
  EXPECT_EQ(stats.parameter_bytes * 2, stats.file_bytes);
  absl::StatusOr<Transformer> stored = LoadHfTransformer(dir_, {std::nullopt});
  ASSERT_TRUE(stored.ok()) << stored.status();
  ExpectWeightsOf(*stored, torch::kFloat32);  // config.json's dtype
  absl::StatusOr<Transformer> bad = LoadHfTransformer(dir_, {torch::kInt32});
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("float32, bfloat16 or float16"));
}

TEST_F(HfLoadTest, ShapeErrorNamesTheFileAndTheTensor) {
  Replace(dir_ + "/config.json", "\"vocab_size\": 8192", "\"vocab_size\": 8000");
  const absl::Status s = LoadStatus();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("model-00001-of-00002.safetensors: tensor "
                                     "'model.embed_tokens.weight' expected shape [8000, 256], "
                                     "got [8192, 256]"));
}

TEST_F(HfLoadTest, MissingAndUnknownTensorsAreNamed) {
  Replace(dir_ + "/config.json", "\"num_hidden_layers\": 6", "\"num_hidden_layers\": 7");
  absl::Status s = LoadStatus();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("tensor 'model.layers.6."));
  EXPECT_THAT(s.message(), HasSubstr("is missing"));

  Replace(dir_ + "/config.json", "\"num_hidden_layers\": 7", "\"num_hidden_layers\": 5");
  s = LoadStatus();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("model-00002-of-00002.safetensors: unknown tensor "
                                     "'model.layers.5."));
}

TEST_F(HfLoadTest, ShardErrorsNameTheShardAndTheTensor) {
  const std::string index = dir_ + "/model.safetensors.index.json";
  Replace(index, "\"model.norm.weight\": \"model-00002-of-00002.safetensors\"",
          "\"model.norm.weight\": \"model-00001-of-00002.safetensors\"");
  absl::Status s = LoadStatus();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("tensor 'model.norm.weight'"));
  EXPECT_THAT(s.message(), HasSubstr("model-00001-of-00002.safetensors"));

  Replace(index, "\"model.norm.weight\": \"model-00001-of-00002.safetensors\"",
          "\"model.norm.weight\": \"model-00002-of-00002.safetensors\"");
  const std::string shard = dir_ + "/model-00002-of-00002.safetensors";
  fs::resize_file(shard, fs::file_size(shard) - 4);  // cuts lm_head.weight
  s = LoadStatus();
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), HasSubstr(shard));
  EXPECT_THAT(s.message(), HasSubstr("'lm_head.weight'"));

  fs::remove(shard);
  s = LoadStatus();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(s.message(), HasSubstr("shard model-00002-of-00002.safetensors"));
}

// VmHWM in bytes from /proc/self/status; -1 when unreadable.
// /proc/self/status's `field` ("VmHWM", "VmRSS") in bytes; -1 if absent.
int64_t StatusBytes(const std::string& field) {
  std::smatch m;
  const std::string status = Slurp("/proc/self/status");
  if (!std::regex_search(status, m, std::regex(field + ":\\s+(\\d+) kB"))) return -1;
  return std::stoll(m[1]) * 1024;
}

int64_t HighWaterBytes() { return StatusBytes("VmHWM"); }

// Restarts VmHWM at the current resident size; false where not permitted
// or where the kernel accepts the request and keeps the old peak.
bool ResetHighWater() {
  std::ofstream out("/proc/self/clear_refs");
  out << "5";
  out.flush();
  constexpr int64_t kSlack = 1 << 20;
  return out.good() && HighWaterBytes() >= 0 &&
         HighWaterBytes() <= StatusBytes("VmRSS") + kSlack;
}

// The process peak (resident pages, not time): the model and a few chunks
// of the files, never the files whole (the mapping's pages are released).
TEST_F(HfLoadTest, PeakIsOneCopyOfTheWeightsAndAFewChunks) {
  // The heap's free memory back to the system first, so that the load
  // faults in pages of its own instead of reusing the earlier tests' (how
  // much glibc keeps depends on its mmap threshold, which their frees move).
  malloc_trim(0);
  if (!ResetHighWater()) GTEST_SKIP() << "/proc/self/clear_refs cannot restart VmHWM here";
  const int64_t before = HighWaterBytes();
  absl::StatusOr<Transformer> model = LoadHfTransformer(dir_);
  ASSERT_TRUE(model.ok()) << model.status();
  const int64_t increase = HighWaterBytes() - before;
  // Memory the allocator already held may be reused, hence only half below.
  EXPECT_GT(increase, bytes_ / 2);
  EXPECT_LT(increase, bytes_ + 4 * static_cast<int64_t>(SafetensorsReader::kChunkBytes))
      << "weights " << bytes_;
}

}  // namespace
}  // namespace trellis::model
