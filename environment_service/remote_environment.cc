// The "remote" environment: a client of a trellis.v1.Environment service
// (environment_service.h).

#include <cmath>
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "environment_service/environment_service.h"
#include "rpc/channel.h"

namespace trellis::environment {
namespace {

// What the caller should do next decides the code (environment.h):
// deadlines and unreachable services keep theirs, every other failure of
// the call is Internal, its code kept in the message.
absl::Status ForCaller(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kDeadlineExceeded:
    case absl::StatusCode::kUnavailable: return status;
    default:
      return absl::InternalError(
          absl::StrCat(status.message(), " (", absl::StatusCodeToString(status.code()), ")"));
  }
}

class RemoteEnvironment final : public Environment {
 public:
  RemoteEnvironment(const v1::EnvironmentConfig& config, std::shared_ptr<grpc::Channel> channel)
      : stub_(v1::Environment::NewStub(std::move(channel))),
        who_(absl::StrCat("the environment at ", config.address())),
        deadline_(absl::Milliseconds(config.call_deadline_ms())),
        workers_(config.workers()) {}

  absl::StatusOr<v1::OpenEpisodeResponse> Open(const v1::OpenEpisodeRequest& request) override {
    absl::StatusOr<v1::OpenEpisodeResponse> response = rpc::Call(
        *stub_, &v1::Environment::Stub::Open, request, deadline_, absl::StrCat(who_, " Open"));
    if (!response.ok()) return ForCaller(response.status());
    return response;
  }

  absl::StatusOr<v1::EnvironmentStepResponse> Step(
      const v1::EnvironmentStepRequest& request) override {
    const std::string what = absl::StrCat(who_, " Step");
    absl::StatusOr<v1::EnvironmentStepResponse> response =
        rpc::Call(*stub_, &v1::Environment::Stub::Step, request, deadline_, what);
    if (!response.ok()) return ForCaller(response.status());
    if (!std::isfinite(response->reward())) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, ": malformed reply: reward ", response->reward(), " is not finite (episode ",
          request.episode_id(), ", turn ", request.turn(), ")"));
    }
    return response;
  }

  absl::Status Close(const v1::CloseEpisodeRequest& request) override {
    absl::StatusOr<v1::CloseEpisodeResponse> response = rpc::Call(
        *stub_, &v1::Environment::Stub::Close, request, deadline_, absl::StrCat(who_, " Close"));
    return response.ok() ? absl::OkStatus() : ForCaller(response.status());
  }

  int MaxConcurrency() const override { return workers_; }

 private:
  const std::unique_ptr<v1::Environment::Stub> stub_;
  const std::string who_;
  const absl::Duration deadline_;
  const int workers_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Environment>> NewRemoteEnvironment(
    const v1::EnvironmentConfig& config) {
  if (config.address().empty()) {
    return absl::InvalidArgumentError(
        "environment.address: required by the remote environment (host:port of a "
        "trellis.v1.Environment service), found \"\"");
  }
  if (absl::StatusOr<rpc::HostPort> split = rpc::SplitHostPort(config.address()); !split.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("environment.address: ", split.status().message()));
  }
  if (config.call_deadline_ms() < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "environment.call_deadline_ms: must be >= 1, found ", config.call_deadline_ms()));
  }
  if (config.workers() < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("environment.workers: must be >= 1, found ", config.workers()));
  }
  return std::make_unique<RemoteEnvironment>(config, rpc::NewChannel(config.address()));
}

}  // namespace trellis::environment
