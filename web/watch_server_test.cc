#include "web/watch_server.h"

#include <httplib.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "env/testing/fake_env.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trellis::web {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

TEST(WatchServerTest, ServesMetricsDashboardAndViewOfTheAttachedLedger) {
  const std::string address_file = ::testing::TempDir() + "/watch_server_test.addr";
  std::filesystem::remove(address_file);
  WatchServer::Options options;
  options.address_file = address_file;
  absl::StatusOr<std::unique_ptr<WatchServer>> watch = WatchServer::Start(options);
  ASSERT_TRUE(watch.ok()) << watch.status();
  std::ifstream in(address_file);
  std::string written;
  in >> written;
  EXPECT_EQ(written, (*watch)->address());

  env::testing::FakeEnv clock;
  ledger::Ledger ledger(&clock);
  (*watch)->Attach(&ledger);
  (*watch)->SetJob("tiny", "grpo");
  (*watch)->SetWorkers([] {
    return std::vector<WorkerStatus>{{"actor-0", "actor", "127.0.0.1:1", true},
                                     {"actor-1", "actor", "127.0.0.1:2", false}};
  });
  ledger.BeginStep(4);
  {
    auto span = ledger.Begin(ledger::Stage::kRollout, "actor-0");
    clock.Advance(absl::Milliseconds(500));
  }

  httplib::Client client("http://" + (*watch)->address());
  httplib::Result metrics = client.Get("/metrics");
  ASSERT_TRUE(metrics) << httplib::to_string(metrics.error());
  EXPECT_EQ(metrics->status, 200);
  EXPECT_THAT(metrics->get_header_value("Content-Type"), HasSubstr("text/plain; version=0.0.4"));
  EXPECT_THAT(metrics->body,
              HasSubstr("trellis_stage_seconds_count{stage=\"rollout\",role=\"actor-0\"} 1\n"));
  EXPECT_THAT(metrics->body, HasSubstr("trellis_step 4\n"));
  EXPECT_THAT(metrics->body, HasSubstr("trellis_worker_up{worker=\"scheduler\",role=\"scheduler\"} 1\n"));
  EXPECT_THAT(metrics->body, HasSubstr("trellis_worker_up{worker=\"actor-1\",role=\"actor\"} 0\n"));

  httplib::Result page = client.Get("/");
  ASSERT_TRUE(page);
  EXPECT_THAT(page->body, HasSubstr("id=\"timeline\""));
  httplib::Result view = client.Get("/api/view");
  ASSERT_TRUE(view);
  EXPECT_EQ(json::parse(view->body)["current_step"], 4);
  httplib::Result workers = client.Get("/api/workers");
  ASSERT_TRUE(workers);
  EXPECT_EQ(json::parse(workers->body)[1]["up"], false);
  httplib::Result job = client.Get("/api/job");
  ASSERT_TRUE(job);
  EXPECT_EQ(json::parse(job->body)["name"], "tiny");

  // Detached: the ledger's later records no longer reach the view.
  (*watch)->Attach(nullptr);
  ledger.BeginStep(5);
  { auto span = ledger.Begin(ledger::Stage::kUpdate, "learner-0"); }
  EXPECT_EQ((*watch)->view().current_step(), 4);
}

TEST(WatchServerTest, MetricsOnlyServerHasNoDashboard) {
  WatchServer::Options options;
  options.dashboard = false;
  options.worker = "learner-0";
  options.role = "learner";
  absl::StatusOr<std::unique_ptr<WatchServer>> watch = WatchServer::Start(options);
  ASSERT_TRUE(watch.ok()) << watch.status();
  (*watch)->AddMetrics([](ledger::PrometheusText& out) {
    out.Family("trellis_test_total", ledger::PrometheusText::Type::kCounter, "A test counter.");
    out.Sample("trellis_test_total", {}, 3);
  });
  httplib::Client client("http://" + (*watch)->address());
  httplib::Result metrics = client.Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_THAT(metrics->body, HasSubstr("trellis_worker_up{worker=\"learner-0\",role=\"learner\"} 1\n"));
  EXPECT_THAT(metrics->body, HasSubstr("trellis_test_total 3\n"));
  EXPECT_THAT(metrics->body, ::testing::Not(HasSubstr("trellis_steps_total")));
  httplib::Result page = client.Get("/");
  ASSERT_TRUE(page);
  EXPECT_EQ(page->status, 404);
}

TEST(WatchServerTest, BadOrBusyAddressesAreClearErrors) {
  WatchServer::Options options;
  options.listen = "localhost";
  EXPECT_EQ(WatchServer::Start(options).status().code(), absl::StatusCode::kInvalidArgument);
  absl::StatusOr<std::unique_ptr<WatchServer>> first = WatchServer::Start(WatchServer::Options());
  ASSERT_TRUE(first.ok());
  options.listen = (*first)->address();
  absl::StatusOr<std::unique_ptr<WatchServer>> second = WatchServer::Start(options);
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(second.status().message()), HasSubstr((*first)->address()));
}

}  // namespace
}  // namespace trellis::web
