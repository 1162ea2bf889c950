#include "config/http_uri.h"

#include "absl/strings/str_cat.h"
#include "config/job_config.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trellis::config {
namespace {

using ::testing::HasSubstr;

TEST(ParseHttpUri, TakesASchemeAHostAndAPort) {
  absl::StatusOr<HttpUri> uri = ParseHttpUri("http://127.0.0.1:5000");
  ASSERT_TRUE(uri.ok()) << uri.status();
  EXPECT_EQ(uri->scheme, "http");
  EXPECT_EQ(uri->host, "127.0.0.1");
  EXPECT_EQ(uri->port, 5000);
  EXPECT_EQ(uri->ToString(), "http://127.0.0.1:5000");
  uri = ParseHttpUri("https://mlflow.example-lab.org:443/");
  ASSERT_TRUE(uri.ok()) << uri.status();
  EXPECT_EQ(uri->scheme, "https");
  EXPECT_EQ(uri->host, "mlflow.example-lab.org");
  EXPECT_EQ(uri->port, 443);
}

TEST(ParseHttpUri, RefusesAnythingElseQuotingIt) {
  for (const char* bad : {"127.0.0.1:5000", "ftp://host:21", "http://host", "http://:80",
                          "http://host:0", "http://host:65536", "http://host:80/api",
                          "http://user@host:80", "http://host:8x", "http://host:"}) {
    absl::StatusOr<HttpUri> uri = ParseHttpUri(bad);
    EXPECT_EQ(uri.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(uri.status().message(), HasSubstr(absl::StrCat("\"", bad, "\""))) << bad;
  }
}

TEST(ValidateJob, ObserveMlflowNeedsAnHttpUriAndAnExperiment) {
  v1::JobConfig job;
  job.mutable_observe()->mutable_mlflow()->set_uri("127.0.0.1:5000");
  job.mutable_observe()->mutable_mlflow()->set_experiment("");
  const absl::Status s = ValidateJob(job);
  EXPECT_THAT(s.message(), HasSubstr("observe.mlflow.uri: must be http://host:port or "
                                     "https://host:port, found \"127.0.0.1:5000\""));
  EXPECT_THAT(s.message(), HasSubstr("observe.mlflow.experiment: must be a name with a uri"));
  job.mutable_observe()->mutable_mlflow()->set_uri("http://127.0.0.1:5000");
  job.mutable_observe()->mutable_mlflow()->set_experiment("grpo");
  EXPECT_TRUE(ValidateJob(job).ok()) << ValidateJob(job);
}

}  // namespace
}  // namespace trellis::config
