#include "rpc/server.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server_builder.h>
#include <grpcpp/support/server_interceptor.h>

#include <chrono>

#include "absl/strings/str_cat.h"
#include "rpc/call_stats.h"
#include "rpc/channel.h"

namespace trellis::rpc {
namespace {

// Times one call from its creation (the call's arrival) to its status.
class StatsInterceptor final : public grpc::experimental::Interceptor {
 public:
  StatsInterceptor(grpc::experimental::ServerRpcInfo* info, CallStats* stats)
      : method_(info->method()), stats_(stats), start_(std::chrono::steady_clock::now()) {}

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::PRE_SEND_STATUS)) {
      const std::chrono::duration<double> seconds = std::chrono::steady_clock::now() - start_;
      stats_->Record(method_, methods->GetSendStatus().error_code(), seconds.count());
    }
    methods->Proceed();
  }

 private:
  const std::string method_;
  CallStats* const stats_;
  const std::chrono::steady_clock::time_point start_;
};

class StatsInterceptorFactory final
    : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit StatsInterceptorFactory(CallStats* stats) : stats_(stats) {}
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    return new StatsInterceptor(info, stats_);
  }

 private:
  CallStats* const stats_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Server>> Server::Start(const std::string& listen,
                                                      const std::vector<grpc::Service*>& services,
                                                      const ServerOptions& options) {
  const std::string& advertise = options.advertise;
  absl::StatusOr<HostPort> where = SplitHostPort(listen);
  if (!where.ok()) return where.status();
  if (advertise.empty() && IsWildcardHost(where->host)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "listen address ", listen, " takes every interface and names none that other hosts "
        "can dial: give the host to advertise (the machine's name or address)"));
  }
  if (advertise.find(':') != std::string::npos && advertise.front() != '[') {
    return absl::InvalidArgumentError(absl::StrCat(
        "advertise host '", advertise, "': expected a host without a port (IPv6 in brackets)"));
  }
  static const bool plugins_ready = [] {
    grpc::EnableDefaultHealthCheckService(true);
    grpc::reflection::InitProtoReflectionServerBuilderPlugin();
    return true;
  }();
  (void)plugins_ready;

  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(listen, ServerCredentialsFor(options.secret), &port);
  builder.SetMaxReceiveMessageSize(options.max_receive_bytes);
  builder.SetMaxSendMessageSize(kMaxMessageBytes);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, 10000);
  // A stopped client (SIGSTOP, a long pause) is waited for; a dead one
  // closes its connection anyway.
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, kServerStallLimitMs);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 5000);
  for (grpc::Service* service : services) builder.RegisterService(service);
  if (options.stats != nullptr) {
    std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> creators;
    creators.push_back(std::make_unique<StatsInterceptorFactory>(options.stats));
    builder.experimental().SetInterceptorCreators(std::move(creators));
  }
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", listen,
                                               " (address in use or not local?)"));
  }
  return std::unique_ptr<Server>(new Server(
      std::move(server), absl::StrCat(advertise.empty() ? where->host : advertise, ":", port),
      port));
}

Server::Server(std::unique_ptr<grpc::Server> server, std::string address, int port)
    : server_(std::move(server)), address_(std::move(address)), port_(port) {
  SetServing(false);
}

Server::~Server() { Shutdown(absl::ZeroDuration()); }

void Server::SetServing(bool serving) {
  grpc::HealthCheckServiceInterface* health = server_->GetHealthCheckService();
  if (health != nullptr) health->SetServingStatus(serving);
}

void Server::Shutdown(absl::Duration grace) {
  if (server_ == nullptr) return;
  server_->Shutdown(std::chrono::system_clock::now() +
                    std::chrono::milliseconds(absl::ToInt64Milliseconds(grace)));
}

void Server::Wait() { server_->Wait(); }

}  // namespace trellis::rpc
