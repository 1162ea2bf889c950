#include "rpc/channel.h"

#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/support/channel_arguments.h>
#include <grpcpp/support/client_interceptor.h>

#include <chrono>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "rpc/server.h"

namespace trellis::rpc {
namespace {

std::chrono::system_clock::time_point DeadlineIn(absl::Duration timeout) {
  return std::chrono::system_clock::now() +
         std::chrono::microseconds(absl::ToInt64Microseconds(timeout));
}

// Adds the job's secret to every call's initial metadata.
class SecretInterceptor final : public grpc::experimental::Interceptor {
 public:
  explicit SecretInterceptor(const std::string* header) : header_(header) {}
  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::PRE_SEND_INITIAL_METADATA)) {
      methods->GetSendInitialMetadata()->emplace(kAuthorizationKey, *header_);
    }
    methods->Proceed();
  }

 private:
  const std::string* const header_;
};

class SecretInterceptorFactory final
    : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  explicit SecretInterceptorFactory(const JobSecret& secret) : header_(secret.BearerHeader()) {}
  grpc::experimental::Interceptor* CreateClientInterceptor(
      grpc::experimental::ClientRpcInfo*) override {
    return new SecretInterceptor(&header_);
  }

 private:
  const std::string header_;
};

}  // namespace

absl::StatusOr<HostPort> SplitHostPort(const std::string& address) {
  const size_t colon = address.rfind(':');
  HostPort hp;
  if (colon == std::string::npos || !absl::SimpleAtoi(address.substr(colon + 1), &hp.port) ||
      hp.port < 0 || hp.port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("address '", address, "': expected host:port with a port in 0..65535"));
  }
  hp.host = address.substr(0, colon);
  return hp;
}

bool IsWildcardHost(const std::string& host) {
  return host.empty() || host == "0.0.0.0" || host == "::" || host == "[::]";
}

std::shared_ptr<grpc::Channel> NewChannel(const std::string& address, absl::Duration stall_limit,
                                          const JobSecret& secret) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(kMaxMessageBytes);
  args.SetMaxSendMessageSize(kMaxMessageBytes);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 10000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS,
              static_cast<int>(absl::ToInt64Milliseconds(stall_limit)));
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  // Reconnect quickly after a peer restarts.
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  if (!secret.secure()) {
    return grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
  }
  std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>> secrets;
  secrets.push_back(std::make_unique<SecretInterceptorFactory>(secret));
  return grpc::experimental::CreateCustomChannelWithInterceptors(
      address, grpc::InsecureChannelCredentials(), args, std::move(secrets));
}

absl::Status WaitConnected(grpc::Channel& channel, const std::string& address,
                           absl::Duration timeout) {
  if (channel.WaitForConnected(DeadlineIn(timeout))) return absl::OkStatus();
  return absl::UnavailableError(absl::StrCat("cannot connect to ", address, " within ",
                                             absl::FormatDuration(timeout)));
}

void SetDeadline(grpc::ClientContext& context, absl::Duration timeout) {
  context.set_deadline(DeadlineIn(timeout));
}

}  // namespace trellis::rpc
