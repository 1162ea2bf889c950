#ifndef TRELLIS_RPC_CALL_STATS_H_
#define TRELLIS_RPC_CALL_STATS_H_

// Counts and times every call a gRPC server answers, by method and status
// code, for a worker's /metrics: trellis_rpc_calls_total{method,code} and
// trellis_rpc_seconds{method} (a histogram of handler wall seconds, from
// the call's arrival to its status being sent). Server::Start installs it
// as a server interceptor.
//
// Thread-safe.

#include <map>
#include <string>
#include <utility>

#include "absl/synchronization/mutex.h"
#include "ledger/prometheus.h"

namespace trellis::rpc {

class CallStats {
 public:
  // `method` is the full gRPC method ("/trellis.v1.Actor/Generate"),
  // `code` a grpc::StatusCode number.
  void Record(const std::string& method, int code, double seconds);
  void WriteMetrics(ledger::PrometheusText& out) const;

 private:
  mutable absl::Mutex mu_;
  std::map<std::pair<std::string, int>, int64_t> calls_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, ledger::Histogram> seconds_ ABSL_GUARDED_BY(mu_);
};

}  // namespace trellis::rpc

#endif  // TRELLIS_RPC_CALL_STATS_H_
