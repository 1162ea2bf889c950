#include "reference/testing/reference_conformance.h"

#include <sys/stat.h>
#include <unistd.h>

#include <torch/torch.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "model/safetensors.h"
#include "model/testing/failing_allocator.h"
#include "model/transformer.h"

namespace trellis::reference::conformance {
namespace {

using ::absl::StatusCode;
using ::testing::HasSubstr;

v1::LogProbRequest RequestOf(const std::vector<v1::Sample>& samples) {
  v1::LogProbRequest request;
  for (const v1::Sample& s : samples) *request.add_samples() = s;
  return request;
}

}  // namespace

std::string ReferenceFactoryName(const ::testing::TestParamInfo<ReferenceFactory>& info) {
  return info.param.name;
}

void ReferenceConformanceTest::SetUp() {
  tokenizer_ = text::NewCharTokenizer();
  weights_path_ = ::testing::TempDir() + "/reference_conformance_" + GetParam().name +
                  ".safetensors";
  torch::manual_seed(11);
  model::Transformer policy(job().model(), tokenizer_->vocab_size());
  model::NamedTensors weights;
  for (const auto& [name, t] : policy->NamedWeights()) weights.emplace_back(name, t.detach());
  ASSERT_TRUE(model::SaveSafetensors(weights_path_, weights).ok());
  absl::StatusOr<BoundReference> bound = GetParam().make(job(), tokenizer_.get());
  ASSERT_TRUE(bound.ok()) << bound.status();
  bound_ = *std::move(bound);
}

void ReferenceConformanceTest::Load() {
  absl::Status loaded = reference().Load(weights_path_);
  ASSERT_TRUE(loaded.ok()) << loaded;
}

v1::Sample ReferenceConformanceTest::Sample(const std::string& response) const {
  v1::Sample s;
  s.add_prompt_tokens(*tokenizer_->bos_id());
  const std::vector<int32_t> prompt = *tokenizer_->Encode("1+2=");
  const std::vector<int32_t> tokens = *tokenizer_->Encode(response);
  s.mutable_prompt_tokens()->Add(prompt.begin(), prompt.end());
  s.mutable_response_tokens()->Add(tokens.begin(), tokens.end());
  return s;
}

TEST_P(ReferenceConformanceTest, LogProbsBeforeLoadIsFailedPrecondition) {
  absl::StatusOr<v1::LogProbResponse> early = reference().LogProbs(RequestOf({Sample("3")}));
  EXPECT_EQ(early.status().code(), StatusCode::kFailedPrecondition) << early.status();
}

TEST_P(ReferenceConformanceTest, LoadOfAMissingFileFailsNamingItAndLoadsNothing) {
  absl::Status missing = reference().Load(::testing::TempDir() + "/no_such_weights.safetensors");
  EXPECT_EQ(missing.code(), StatusCode::kNotFound) << missing;
  EXPECT_THAT(std::string(missing.message()), HasSubstr("no_such_weights.safetensors"));
  EXPECT_EQ(reference().LogProbs(RequestOf({Sample("3")})).status().code(),
            StatusCode::kFailedPrecondition);
}

// A hard link in the run directory to a file elsewhere, and a FIFO, are
// refused before anything is read: no error shows the file's bytes, and
// nothing is loaded.
TEST_P(ReferenceConformanceTest, LoadOfAHardLinkOrAFifoIsRefusedUnread) {
  const std::string dir = ::testing::TempDir() + "/reference_";
  const std::string secret = dir + "secret_" + GetParam().name;
  const std::string link = dir + "link_" + GetParam().name + ".safetensors";
  const std::string fifo = dir + "fifo_" + GetParam().name + ".safetensors";
  for (const std::string& path : {secret, link, fifo}) std::remove(path.c_str());
  std::ofstream(secret) << "TOPSECRETBYTES";
  ASSERT_EQ(::link(secret.c_str(), link.c_str()), 0);
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const absl::Status linked = reference().Load(link);
  EXPECT_EQ(linked.code(), StatusCode::kPermissionDenied) << linked;
  EXPECT_THAT(std::string(linked.message()), HasSubstr("2 hard links"));
  EXPECT_THAT(std::string(linked.message()), ::testing::Not(HasSubstr("TOPSECRET")));
  const absl::Status piped = reference().Load(fifo);
  EXPECT_EQ(piped.code(), StatusCode::kFailedPrecondition) << piped;
  EXPECT_THAT(std::string(piped.message()), HasSubstr("is a FIFO"));
  EXPECT_EQ(reference().LogProbs(RequestOf({Sample("3")})).status().code(),
            StatusCode::kFailedPrecondition);
  for (const std::string& path : {secret, link, fifo}) std::remove(path.c_str());
}

TEST_P(ReferenceConformanceTest, OneRowPerSampleInOrderAsLongAsItsResponse) {
  Load();
  const std::vector<v1::Sample> samples = {Sample("3"), Sample("12345"), Sample("42")};
  absl::StatusOr<v1::LogProbResponse> out = reference().LogProbs(RequestOf(samples));
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->sequences_size(), 3);
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(out->sequences(i).logprobs_size(), samples[i].response_tokens_size()) << i;
    for (float lp : out->sequences(i).logprobs()) {
      EXPECT_LE(lp, 0.0f);
      EXPECT_TRUE(std::isfinite(lp));
    }
  }
  // Each row is its sample's alone: the same as the sample asked by itself.
  for (int i = 0; i < 3; ++i) {
    absl::StatusOr<v1::LogProbResponse> alone = reference().LogProbs(RequestOf({samples[i]}));
    ASSERT_TRUE(alone.ok()) << alone.status();
    for (int k = 0; k < samples[i].response_tokens_size(); ++k) {
      EXPECT_NEAR(alone->sequences(0).logprobs(k), out->sequences(i).logprobs(k), 1e-5)
          << "sample " << i << " token " << k;
    }
  }
}

// More rows than one pass, lengths mixed: every row still its sample's alone,
// in request order (the local engine scores length-bucketed passes).
TEST_P(ReferenceConformanceTest, ManyRowsOfMixedLengthsEachAsItsSampleAlone) {
  Load();
  const std::vector<std::string> responses = {"12345", "3", "42", "999", "7", "1234"};
  std::vector<v1::Sample> samples;
  for (int i = 0; i < 150; ++i) samples.push_back(Sample(responses[(i * 7) % responses.size()]));
  absl::StatusOr<v1::LogProbResponse> out = reference().LogProbs(RequestOf(samples));
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->sequences_size(), 150);
  std::vector<v1::LogProbResponse> alone;
  for (const std::string& r : responses) {
    absl::StatusOr<v1::LogProbResponse> one = reference().LogProbs(RequestOf({Sample(r)}));
    ASSERT_TRUE(one.ok()) << one.status();
    alone.push_back(*one);
  }
  for (int i = 0; i < 150; ++i) {
    const v1::LogProbResponse& want = alone[(i * 7) % responses.size()];
    ASSERT_EQ(out->sequences(i).logprobs_size(), want.sequences(0).logprobs_size()) << i;
    for (int k = 0; k < want.sequences(0).logprobs_size(); ++k) {
      EXPECT_NEAR(out->sequences(i).logprobs(k), want.sequences(0).logprobs(k), 1e-5)
          << "sample " << i << " token " << k;
    }
  }
}

TEST_P(ReferenceConformanceTest, NoSamplesNoRows) {
  Load();
  absl::StatusOr<v1::LogProbResponse> out = reference().LogProbs(v1::LogProbRequest());
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->sequences_size(), 0);
}

TEST_P(ReferenceConformanceTest, SampleThatDoesNotFitIsInvalidArgumentNamingIt) {
  Load();
  const std::string too_long(job().model().max_seq_len(), '1');
  absl::StatusOr<v1::LogProbResponse> out =
      reference().LogProbs(RequestOf({Sample("3"), Sample(too_long)}));
  EXPECT_EQ(out.status().code(), StatusCode::kInvalidArgument) << out.status();
  EXPECT_THAT(std::string(out.status().message()), HasSubstr("row 1"));
  EXPECT_THAT(std::string(out.status().message()), HasSubstr("max_seq_len"));
  EXPECT_TRUE(reference().LogProbs(RequestOf({Sample("3")})).ok());
}

TEST_P(ReferenceConformanceTest, ScoresWithoutARewardModelIsFailedPrecondition) {
  Load();
  absl::StatusOr<v1::ScoreResponse> out = reference().Scores(RequestOf({Sample("3")}));
  EXPECT_EQ(out.status().code(), StatusCode::kFailedPrecondition) << out.status();
  EXPECT_THAT(std::string(out.status().message()), HasSubstr("ppo.reward"));
}

TEST_P(ReferenceConformanceTest, LibTorchOutOfMemoryIsResourceExhaustedAndTheReferenceGoesOn) {
  Load();
  absl::StatusOr<v1::LogProbResponse> out;
  {
    model::testing::FailingCpuAllocator failing;
    out = reference().LogProbs(RequestOf({Sample("3"), Sample("12")}));
  }
  EXPECT_EQ(out.status().code(), StatusCode::kResourceExhausted) << out.status();
  EXPECT_THAT(std::string(out.status().message()),
              HasSubstr("reference-0 LogProbs: out of memory"));
  EXPECT_TRUE(reference().LogProbs(RequestOf({Sample("3")})).ok());
}

}  // namespace trellis::reference::conformance
