#ifndef TRELLIS_WEB_WATCH_SERVER_H_
#define TRELLIS_WEB_WATCH_SERVER_H_

// The HTTP side of watching a job (cpp-httplib from Debian's
// libcpp-httplib-dev):
//
//   /metrics      Prometheus text: the run's metrics from its ledger records
//                 (ledger::RunView::WriteMetrics), trellis_worker_up, and
//                 whatever AddMetrics adds (a worker's gRPC call stats)
//   /             the dashboard (web/page.h), when Options::dashboard
//   /api/view     the run's view as JSON (ledger::RunView::ViewJson)
//   /api/workers  [{worker, role, address, up}] of the job's workers
//   /api/job      {name, algorithm}
//
// The scheduler serves all of it (`--http`); a worker process serves only
// /metrics (`trellis serve ROLE --metrics`).

#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "config/worker_id.h"
#include "ledger/ledger.h"
#include "ledger/prometheus.h"
#include "ledger/run_view.h"

namespace trellis::web {

struct WorkerStatus {
  std::string worker;  // "actor-1"
  std::string role;    // "actor"
  std::string address;
  bool up = false;
};

class WatchServer {
 public:
  struct Options {
    // host:port; port 0 picks a free one.
    std::string listen = "127.0.0.1:0";
    // When set, the bound host:port is written there (atomically).
    std::string address_file;
    // Serve the dashboard and /api/*, not only /metrics; false: a worker
    // process, whose /metrics has only its own spans and memory objects
    // (ledger::RunView::Scope::kProcess).
    bool dashboard = true;
    // This process, reported as trellis_worker_up{worker,role} 1.
    std::string worker = config::WorkerId(v1::SCHEDULER).ToString();
    std::string role = config::RoleName(v1::SCHEDULER);
  };

  // Binds and starts serving on a thread of its own. InvalidArgument for a
  // malformed `listen`, Unavailable when it cannot bind.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<WatchServer>> Start(
      const Options& options);
  // Stops serving and detaches from the ledger (which must still exist).
  ~WatchServer();
  WatchServer(const WatchServer&) = delete;
  WatchServer& operator=(const WatchServer&) = delete;

  // "host:port" with the port actually bound.
  const std::string& address() const { return address_; }

  // Feeds the view from every record `ledger` writes from now on (null
  // detaches; detach before the ledger goes).
  void Attach(ledger::Ledger* ledger);
  // The job's workers (for trellis_worker_up and /api/workers); called on
  // each request.
  void SetWorkers(std::function<std::vector<WorkerStatus>()> workers);
  // More metric families for /metrics; called on each scrape.
  void AddMetrics(std::function<void(ledger::PrometheusText&)> write);
  void SetJob(const std::string& name, const std::string& algorithm);

  const ledger::RunView& view() const { return view_; }

  // The /metrics text as served now.
  std::string MetricsText() const;

 private:
  struct Http;
  WatchServer(const Options& options, std::unique_ptr<Http> http, std::string address);
  std::string WorkersJson() const;
  std::string JobJson() const;

  const Options options_;
  ledger::RunView view_;
  std::unique_ptr<Http> http_;
  std::string address_;
  mutable absl::Mutex mu_;
  ledger::Ledger* attached_ ABSL_GUARDED_BY(mu_) = nullptr;
  ledger::Ledger::ObserverId observer_ ABSL_GUARDED_BY(mu_) = 0;
  std::function<std::vector<WorkerStatus>()> workers_ ABSL_GUARDED_BY(mu_);
  std::vector<std::function<void(ledger::PrometheusText&)>> extra_ ABSL_GUARDED_BY(mu_);
  std::string job_name_ ABSL_GUARDED_BY(mu_);
  std::string job_algorithm_ ABSL_GUARDED_BY(mu_);
};

// The dashboard and /metrics of the run writing to `out_dir`, on `listen`
// (host:port; null when empty), its bound address in out_dir/http.addr
// (out_dir is created) and announced on `progress`.
[[nodiscard]] absl::StatusOr<std::unique_ptr<WatchServer>> StartRunWatch(
    const std::string& listen, const std::string& out_dir, const std::string& job_name,
    const std::string& algorithm, std::ostream& progress);

}  // namespace trellis::web

#endif  // TRELLIS_WEB_WATCH_SERVER_H_
