#include "web/watch_server.h"

#include <httplib.h>

#include <chrono>
#include <thread>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "env/env.h"
#include "env/run_dir.h"
#include "rpc/channel.h"
#include "web/page.h"

namespace trellis::web {

using nlohmann::json;

struct WatchServer::Http {
  httplib::Server server;
  std::thread thread;
};

absl::StatusOr<std::unique_ptr<WatchServer>> WatchServer::Start(const Options& options) {
  absl::StatusOr<rpc::HostPort> where = rpc::SplitHostPort(options.listen);
  if (!where.ok()) return where.status();
  auto http = std::make_unique<Http>();
  // httplib's default sets SO_REUSEPORT, which lets a second server bind
  // the same port and take half the requests; refuse that instead.
  http->server.set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  const int port = where->port == 0 ? http->server.bind_to_any_port(where->host)
                                    : (http->server.bind_to_port(where->host, where->port)
                                           ? where->port
                                           : -1);
  if (port <= 0) {
    return absl::UnavailableError(
        absl::StrCat("http: cannot listen on ", options.listen, " (address in use or not local?)"));
  }
  std::unique_ptr<WatchServer> watch(
      new WatchServer(options, std::move(http), absl::StrCat(where->host, ":", port)));
  if (!options.address_file.empty()) {
    if (absl::Status s =
            env::Env::Default()->WriteFileAtomically(options.address_file, watch->address_);
        !s.ok()) {
      return s;
    }
  }
  return watch;
}

WatchServer::WatchServer(const Options& options, std::unique_ptr<Http> http, std::string address)
    : options_(options), http_(std::move(http)), address_(std::move(address)) {
  httplib::Server& s = http_->server;
  s.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(MetricsText(), "text/plain; version=0.0.4; charset=utf-8");
  });
  if (options_.dashboard) {
    s.Get("/", [](const httplib::Request&, httplib::Response& res) {
      res.set_content(DashboardPage(""), "text/html; charset=utf-8");
    });
    s.Get("/api/view", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(view_.ViewJson(), "application/json");
    });
    s.Get("/api/workers", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(WorkersJson(), "application/json");
    });
    s.Get("/api/job", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(JobJson(), "application/json");
    });
  }
  http_->thread = std::thread([this] { http_->server.listen_after_bind(); });
  // stop() before the loop runs would be lost, and the destructor would wait
  // forever: wait until it runs.
  for (int i = 0; i < 5000 && !http_->server.is_running(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

WatchServer::~WatchServer() {
  Attach(nullptr);
  http_->server.stop();
  http_->thread.join();
}

void WatchServer::Attach(ledger::Ledger* ledger) {
  absl::MutexLock lock(&mu_);
  if (attached_ != nullptr) attached_->RemoveRecordObserver(observer_);
  attached_ = ledger;
  if (ledger != nullptr) {
    // A record the view cannot read is the ledger's bug, not the run's:
    // the view skips it.
    observer_ =
        ledger->AddRecordObserver([this](std::string_view record) { (void)view_.Add(record); });
  }
}

void WatchServer::SetWorkers(std::function<std::vector<WorkerStatus>()> workers) {
  absl::MutexLock lock(&mu_);
  workers_ = std::move(workers);
}

void WatchServer::AddMetrics(std::function<void(ledger::PrometheusText&)> write) {
  absl::MutexLock lock(&mu_);
  extra_.push_back(std::move(write));
}

void WatchServer::SetJob(const std::string& name, const std::string& algorithm) {
  absl::MutexLock lock(&mu_);
  job_name_ = name;
  job_algorithm_ = algorithm;
}

std::string WatchServer::MetricsText() const {
  ledger::PrometheusText out;
  view_.WriteMetrics(out, options_.dashboard ? ledger::RunView::Scope::kJob
                                             : ledger::RunView::Scope::kProcess);
  absl::MutexLock lock(&mu_);
  out.Family("trellis_worker_up", ledger::PrometheusText::Type::kGauge,
             "1 while a worker is alive (heartbeats), 0 once declared dead; the serving "
             "process reports itself.");
  out.Sample("trellis_worker_up", {{"worker", options_.worker}, {"role", options_.role}}, 1);
  if (workers_) {
    for (const WorkerStatus& w : workers_()) {
      out.Sample("trellis_worker_up", {{"worker", w.worker}, {"role", w.role}}, w.up ? 1 : 0);
    }
  }
  for (const auto& write : extra_) write(out);
  return out.text();
}

std::string WatchServer::WorkersJson() const {
  absl::MutexLock lock(&mu_);
  json out = json::array();
  if (workers_) {
    for (const WorkerStatus& w : workers_()) {
      out.push_back({{"worker", w.worker}, {"role", w.role}, {"address", w.address}, {"up", w.up}});
    }
  }
  return out.dump();
}

std::string WatchServer::JobJson() const {
  absl::MutexLock lock(&mu_);
  return json({{"name", job_name_}, {"algorithm", job_algorithm_}}).dump();
}

absl::StatusOr<std::unique_ptr<WatchServer>> StartRunWatch(const std::string& listen,
                                                          const std::string& out_dir,
                                                          const std::string& job_name,
                                                          const std::string& algorithm,
                                                          std::ostream& progress) {
  if (listen.empty()) return nullptr;
  if (absl::Status s = env::Env::Default()->CreateDir(out_dir); !s.ok()) return s;
  WatchServer::Options options;
  options.listen = listen;
  options.address_file = env::RunDir(out_dir).HttpAddress();
  absl::StatusOr<std::unique_ptr<WatchServer>> watch = WatchServer::Start(options);
  if (!watch.ok()) return watch.status();
  (*watch)->SetJob(job_name, algorithm);
  progress << "dashboard on http://" << (*watch)->address() << "/ (metrics: /metrics)"
           << std::endl;
  return watch;
}

}  // namespace trellis::web
