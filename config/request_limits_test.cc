#include "config/request_limits.h"

#include <string>

#include "gtest/gtest.h"

namespace trellis::config {
namespace {

TEST(RequestLimits, ComeFromTheModel) {
  v1::ModelConfig model;
  model.set_max_seq_len(48);
  const RequestLimits limits = RequestLimitsFor(model, 300);
  EXPECT_EQ(limits.max_seq_len, 48);
  EXPECT_EQ(limits.vocab_size, 300);
  EXPECT_EQ(limits.max_prompts, RequestLimits().max_prompts);
}

TEST(RequestLimits, WorkerIdsAreBoundedAndWellFormed) {
  const RequestLimits limits;
  EXPECT_TRUE(CheckWorkerId("actor-12", limits).ok());
  EXPECT_EQ(CheckWorkerId("", limits).code(), absl::StatusCode::kInvalidArgument);
  const absl::Status huge = CheckWorkerId(std::string(1 << 20, 'x'), limits);
  EXPECT_EQ(huge.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(huge.message(), "worker_id: 1048576 bytes; a worker id has at most 32");
}

TEST(RequestLimits, ALedgerReportIsBoundedBeforeItsRecordsAreRead) {
  RequestLimits limits;
  limits.max_ledger_records = 2;
  v1::LedgerReport report;
  report.set_worker_id("learner-0");
  report.add_records();
  report.add_records();
  EXPECT_TRUE(CheckLedgerReport(report, limits).ok());
  report.add_records();
  const absl::Status s = CheckLedgerReport(report, limits);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(s.message(), "records: 3 records in one request; the limit is 2");
}

TEST(RequestLimits, GenerateCountsAreCheckedAsProducts) {
  RequestLimits limits;
  limits.max_seq_len = 8;
  limits.max_generated_samples = 10;
  v1::GenerateRequest request;
  request.set_responses_per_prompt(4);
  request.mutable_sampling()->set_max_new_tokens(4);
  for (int i = 0; i < 3; ++i) request.add_prompts()->add_token_ids(1);
  const absl::Status s = CheckGenerateRequest(request, limits);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(s.message(),
            "prompts x responses_per_prompt: 12 samples in one request; the limit is 10");
  request.set_responses_per_prompt(3);
  EXPECT_TRUE(CheckGenerateRequest(request, limits).ok());
  request.mutable_sampling()->set_max_new_tokens(8);
  EXPECT_EQ(CheckGenerateRequest(request, limits).message(),
            "prompts[0] (prompt 0) with sampling.max_new_tokens: 9 tokens (prompt 1 + response "
            "8); model.max_seq_len is 8");
}

TEST(RequestLimits, ANegativeDecodeBudgetIsRefusedByName) {
  RequestLimits limits;
  limits.max_seq_len = 8;
  v1::GenerateRequest request;
  request.mutable_sampling()->set_max_new_tokens(4);
  request.add_prompts()->add_token_ids(1);
  request.set_decode_token_budget(2);
  EXPECT_TRUE(CheckGenerateRequest(request, limits).ok());
  request.set_decode_token_budget(-1);
  const absl::Status s = CheckGenerateRequest(request, limits);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "decode_token_budget: must be >= 0 (0: the actor's own), found -1");
}

TEST(RequestLimits, StopSequencesNeedTokensInTheVocabulary) {
  RequestLimits limits;
  limits.max_seq_len = 8;
  limits.vocab_size = 10;
  v1::GenerateRequest request;
  request.mutable_sampling()->set_max_new_tokens(2);
  request.add_prompts()->add_token_ids(1);
  request.mutable_sampling()->add_stop()->add_token_ids(9);
  EXPECT_TRUE(CheckGenerateRequest(request, limits).ok());
  v1::StopSequence* second = request.mutable_sampling()->add_stop();
  absl::Status s = CheckGenerateRequest(request, limits);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "sampling.stop[1]: empty (a stop sequence needs a token)");
  second->add_token_ids(3);
  second->add_token_ids(10);
  s = CheckGenerateRequest(request, limits);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "sampling.stop[1].token_ids[1]: id 10 is outside the vocabulary [0, 10)");
  second->set_token_ids(1, -1);
  EXPECT_EQ(CheckGenerateRequest(request, limits).code(), absl::StatusCode::kInvalidArgument);
}

TEST(RequestLimits, FetchWaitsAreBounded) {
  v1::FetchWeightsRequest request;
  request.set_wait_ms(RequestLimits().max_fetch_wait_ms + 1);
  EXPECT_EQ(CheckFetchRequest(request, RequestLimits()).code(), absl::StatusCode::kInvalidArgument);
  request.set_wait_ms(1000);
  EXPECT_TRUE(CheckFetchRequest(request, RequestLimits()).ok());
}

}  // namespace
}  // namespace trellis::config
