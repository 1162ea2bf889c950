#include "observe/mlflow_sink.h"

#include <algorithm>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "env/testing/fake_env.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trellis::observe {
namespace {

using env::testing::FakeEnv;
using nlohmann::json;
using ::testing::HasSubstr;
using ::testing::StartsWith;

// An MLflow tracking server in the test's process: it knows no experiment
// at first, and records every request. With `gate`, every request waits
// until the gate opens; with `down`, every request fails as a closed port.
class FakeMlflow {
 public:
  struct Request {
    std::string path;
    json body;
  };

  std::vector<Request> requests() const {
    absl::MutexLock lock(&mu_);
    return requests_;
  }
  // The requests to `path` ("runs/log-batch").
  std::vector<json> Bodies(const std::string& path) const {
    std::vector<json> bodies;
    for (const Request& r : requests()) {
      if (r.path == "/api/2.0/mlflow/" + path) bodies.push_back(r.body);
    }
    return bodies;
  }

  absl::Notification gate;
  bool down = false;

  class Client final : public HttpClient {
   public:
    explicit Client(FakeMlflow* server) : server_(server) {}
    absl::StatusOr<std::string> Get(const std::string& path,
                                    const std::map<std::string, std::string>& query) override {
      return server_->Answer(path, json(query));
    }
    absl::StatusOr<std::string> Post(const std::string& path, const std::string& body) override {
      return server_->Answer(path, json::parse(body));
    }

   private:
    FakeMlflow* const server_;
  };

 private:
  absl::StatusOr<std::string> Answer(const std::string& path, const json& body) {
    gate.WaitForNotification();
    if (down) return absl::UnavailableError(path + ": no answer (Connection)");
    absl::MutexLock lock(&mu_);
    requests_.push_back({path, body});
    if (path.ends_with("experiments/get-by-name")) {
      if (!created_) return absl::NotFoundError("RESOURCE_DOES_NOT_EXIST");
      return json{{"experiment", {{"experiment_id", "1"}}}}.dump();
    }
    if (path.ends_with("experiments/create")) {
      created_ = true;
      return json{{"experiment_id", "1"}}.dump();
    }
    if (path.ends_with("runs/create")) return json{{"run", {{"info", {{"run_id", "r1"}}}}}}.dump();
    return std::string("{}");
  }

  mutable absl::Mutex mu_;
  std::vector<Request> requests_ ABSL_GUARDED_BY(mu_);
  bool created_ ABSL_GUARDED_BY(mu_) = false;
};

MetricPoint Point(int64_t step, int scalars, absl::Time time) {
  MetricPoint point{step, time, {}};
  for (int i = 0; i < scalars; ++i) point.scalars.push_back({absl::StrCat("m", i), 0.5 * i});
  return point;
}

class MlflowSinkTest : public ::testing::Test {
 protected:
  std::unique_ptr<MlflowSink> Sink(size_t params, size_t max_queued = 100000) {
    MlflowSinkOptions options;
    options.uri = "http://127.0.0.1:5000";
    options.experiment = "grpo";
    options.run_name = "job";
    for (size_t i = 0; i < params; ++i) {
      options.params.emplace_back(absl::StrCat("p", i), absl::StrCat(i));
    }
    options.max_queued_metrics = max_queued;
    options.warnings = &warnings_;
    return std::make_unique<MlflowSink>(std::move(options),
                                        std::make_unique<FakeMlflow::Client>(&server_), &env_);
  }

  FakeEnv env_;
  FakeMlflow server_;
  std::ostringstream warnings_;
};

TEST_F(MlflowSinkTest, MakesTheRunAndLogsParamsAndMetricsInBatches) {
  server_.gate.Notify();
  std::unique_ptr<MlflowSink> sink = Sink(/*params=*/250);
  sink->Write(Point(0, 2500, env_.Now()));
  env_.Advance(absl::Seconds(3));
  sink->Write(Point(1, 3, env_.Now()));
  sink->Finish(Point(2, 1, env_.Now()), /*succeeded=*/true);

  const std::vector<FakeMlflow::Request> requests = server_.requests();
  ASSERT_GE(requests.size(), 3u);
  EXPECT_EQ(requests[0].path, "/api/2.0/mlflow/experiments/get-by-name");
  EXPECT_EQ(requests[0].body["experiment_name"], "grpo");
  EXPECT_EQ(requests[1].path, "/api/2.0/mlflow/experiments/create");
  EXPECT_EQ(requests[2].path, "/api/2.0/mlflow/runs/create");
  EXPECT_EQ(requests[2].body["experiment_id"], "1");
  EXPECT_EQ(requests[2].body["run_name"], "job");

  // Parameters 100 at a time; metrics at most 1000 a batch, each with its
  // step and time.
  std::vector<size_t> params, metrics;
  std::map<int64_t, int64_t> per_step;
  for (const json& batch : server_.Bodies("runs/log-batch")) {
    EXPECT_EQ(batch["run_id"], "r1");
    if (!batch["params"].empty()) params.push_back(batch["params"].size());
    if (batch["metrics"].empty()) continue;
    metrics.push_back(batch["metrics"].size());
    for (const json& m : batch["metrics"]) {
      ++per_step[m["step"].get<int64_t>()];
      if (m["step"] == 1) {
        EXPECT_EQ(m["timestamp"], (FakeEnv::kStartUnixSeconds + 3) * 1000);
      }
    }
  }
  EXPECT_EQ(params, (std::vector<size_t>{100, 100, 50}));
  EXPECT_LE(*std::max_element(metrics.begin(), metrics.end()), MlflowClient::kMaxMetricsPerBatch);
  EXPECT_EQ(per_step, (std::map<int64_t, int64_t>{{0, 2500}, {1, 3}, {2, 1}}));
  const std::vector<json> ends = server_.Bodies("runs/update");
  ASSERT_EQ(ends.size(), 1u);
  EXPECT_EQ(ends[0]["status"], "FINISHED");
  EXPECT_EQ(ends[0]["run_id"], "r1");

  const MlflowSink::Stats stats = sink->stats();
  EXPECT_EQ(stats.metrics_logged, 2504);
  EXPECT_EQ(stats.metrics_lost, 0);
  EXPECT_EQ(stats.failed_requests, 0);
  EXPECT_EQ(warnings_.str(), "");
}

// While the server has not answered, Write still returns at once: points
// queue, and those beyond the queue's bound are dropped and counted. The
// sink's thread may have taken one queue's worth before it blocked on the
// server, so at most two bounds' worth (200 of the 500) can survive.
TEST_F(MlflowSinkTest, AWriteNeverWaitsOnTheServer) {
  std::unique_ptr<MlflowSink> sink = Sink(/*params=*/0, /*max_queued=*/100);
  for (int step = 0; step < 50; ++step) sink->Write(Point(step, 10, env_.Now()));
  // Every Write returned with the server still holding its first request.
  EXPECT_FALSE(server_.gate.HasBeenNotified());
  server_.gate.Notify();
  sink->Finish({}, /*succeeded=*/false);
  const MlflowSink::Stats stats = sink->stats();
  EXPECT_EQ(stats.metrics_logged + stats.metrics_lost, 500);
  EXPECT_GE(stats.metrics_lost, 300);
  const std::vector<json> ends = server_.Bodies("runs/update");
  ASSERT_EQ(ends.size(), 1u);
  EXPECT_EQ(ends[0]["status"], "FAILED");
}

TEST_F(MlflowSinkTest, AServerThatIsDownCostsOneLineAndTheCounts) {
  server_.down = true;
  server_.gate.Notify();
  std::unique_ptr<MlflowSink> sink = Sink(/*params=*/5);
  for (int step = 0; step < 4; ++step) sink->Write(Point(step, 10, env_.Now()));
  sink->Finish(Point(4, 2, env_.Now()), /*succeeded=*/true);
  const MlflowSink::Stats stats = sink->stats();
  EXPECT_EQ(stats.metrics_logged, 0);
  EXPECT_EQ(stats.metrics_lost, 42);
  EXPECT_GE(stats.failed_requests, 1);
  EXPECT_EQ(stats.failed_requests, stats.requests);
  const std::string said = warnings_.str();
  EXPECT_THAT(said, StartsWith("mlflow: http://127.0.0.1:5000: "));
  EXPECT_THAT(said, HasSubstr("the run goes on"));
  EXPECT_EQ(std::count(said.begin(), said.end(), '\n'), 1) << said;
}

}  // namespace
}  // namespace trellis::observe
