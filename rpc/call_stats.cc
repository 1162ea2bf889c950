#include "rpc/call_stats.h"

#include <grpcpp/support/status.h>

namespace trellis::rpc {
namespace {

// grpc::StatusCode as written in gRPC's docs ("OK", "DEADLINE_EXCEEDED").
std::string CodeName(int code) {
  static const char* const kNames[] = {
      "OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND",
      "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
      "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS",
      "UNAUTHENTICATED"};
  if (code >= 0 && code < static_cast<int>(std::size(kNames))) return kNames[code];
  return std::to_string(code);
}

}  // namespace

void CallStats::Record(const std::string& method, int code, double seconds) {
  absl::MutexLock lock(&mu_);
  calls_[{method, code}] += 1;
  seconds_.try_emplace(method, ledger::ExponentialBuckets(0.0001, 4, 12))
      .first->second.Observe(seconds);
}

void CallStats::WriteMetrics(ledger::PrometheusText& out) const {
  absl::MutexLock lock(&mu_);
  out.Family("trellis_rpc_calls_total", ledger::PrometheusText::Type::kCounter,
             "gRPC calls this process answered, by method and status code.");
  for (const auto& [key, n] : calls_) {
    out.Sample("trellis_rpc_calls_total", {{"method", key.first}, {"code", CodeName(key.second)}},
               static_cast<double>(n));
  }
  out.Family("trellis_rpc_seconds", ledger::PrometheusText::Type::kHistogram,
             "Wall seconds from a call's arrival to its status, by method.");
  for (const auto& [method, h] : seconds_) {
    out.HistogramSeries("trellis_rpc_seconds", {{"method", method}}, h);
  }
}

}  // namespace trellis::rpc
