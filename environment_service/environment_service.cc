// trellis.v1.Environment served from an environment::Environment
// (environment_service.h).

#include "environment_service/environment_service.h"

#include <grpcpp/server_context.h>

#include <algorithm>
#include <exception>
#include <memory>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "rpc/status.h"

namespace trellis::environment {
namespace {

// Lets at most `limit` callers in at once.
class Gate {
 public:
  explicit Gate(int limit) : limit_(std::max(limit, 1)) {}

  // False when no place came free before `deadline`.
  bool Enter(absl::Time deadline) {
    absl::MutexLock lock(&mu_);
    if (!mu_.AwaitWithDeadline(absl::Condition(this, &Gate::HasRoom), deadline)) return false;
    ++inside_;
    return true;
  }
  void Leave() {
    absl::MutexLock lock(&mu_);
    --inside_;
  }
  int limit() const { return limit_; }

 private:
  bool HasRoom() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return inside_ < limit_; }

  const int limit_;
  absl::Mutex mu_;
  int inside_ ABSL_GUARDED_BY(mu_) = 0;
};

absl::Status RequireEpisodeId(const std::string& episode_id) {
  if (!episode_id.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(
      "episode_id: required (the name the episode was opened under), found \"\"");
}

class EnvironmentService final : public v1::Environment::Service {
 public:
  explicit EnvironmentService(Environment* environment)
      : environment_(environment), gate_(environment->MaxConcurrency()) {}

  grpc::Status Open(grpc::ServerContext* context, const v1::OpenEpisodeRequest* request,
                    v1::OpenEpisodeResponse* response) override {
    if (absl::Status s = RequireEpisodeId(request->episode_id()); !s.ok()) return rpc::ToGrpc(s);
    const absl::Time deadline = absl::FromChrono(context->deadline());
    return Serve("Open", deadline, [&]() -> absl::Status {
      absl::StatusOr<v1::OpenEpisodeResponse> opened = environment_->Open(*request);
      if (!opened.ok()) return opened.status();
      if (absl::Now() > deadline || context->IsCancelled()) {
        // The caller has given up on this episode and will not close it.
        v1::CloseEpisodeRequest close;
        close.set_episode_id(request->episode_id());
        environment_->Close(close).IgnoreError();
        return Late("Open");
      }
      *response = *std::move(opened);
      return absl::OkStatus();
    });
  }

  grpc::Status Step(grpc::ServerContext* context, const v1::EnvironmentStepRequest* request,
                    v1::EnvironmentStepResponse* response) override {
    if (absl::Status s = RequireEpisodeId(request->episode_id()); !s.ok()) return rpc::ToGrpc(s);
    if (request->turn() < 0) {
      return rpc::ToGrpc(absl::InvalidArgumentError(absl::StrCat(
          "turn: must be >= 0 (0 for the episode's first action), found ", request->turn())));
    }
    return Serve("Step", absl::FromChrono(context->deadline()), [&]() -> absl::Status {
      absl::StatusOr<v1::EnvironmentStepResponse> stepped = environment_->Step(*request);
      if (!stepped.ok()) return stepped.status();
      *response = *std::move(stepped);
      return absl::OkStatus();
    });
  }

  grpc::Status Close(grpc::ServerContext* context, const v1::CloseEpisodeRequest* request,
                     v1::CloseEpisodeResponse*) override {
    if (absl::Status s = RequireEpisodeId(request->episode_id()); !s.ok()) return rpc::ToGrpc(s);
    return Serve("Close", absl::FromChrono(context->deadline()),
                 [&] { return environment_->Close(*request); });
  }

 private:
  static absl::Status Late(const char* call) {
    return absl::DeadlineExceededError(
        absl::StrCat(call, ": the environment answered after the caller's deadline"));
  }

  // Runs `fn` once a place at the gate is free, within `deadline`.
  template <typename Fn>
  grpc::Status Serve(const char* call, absl::Time deadline, Fn&& fn) {
    if (!gate_.Enter(deadline)) {
      return rpc::ToGrpc(absl::DeadlineExceededError(
          absl::StrCat(call, ": the environment was busy (", gate_.limit(),
                       " calls in flight, its MaxConcurrency) until the caller's deadline")));
    }
    absl::Status status;
    try {
      status = fn();
    } catch (const std::exception& e) {
      status = absl::InternalError(absl::StrCat(call, ": the environment threw: ", e.what()));
    } catch (...) {
      status = absl::InternalError(absl::StrCat(call, ": the environment threw"));
    }
    gate_.Leave();
    if (status.ok() && absl::Now() > deadline) status = Late(call);
    return rpc::ToGrpc(status);
  }

  Environment* const environment_;
  Gate gate_;
};

}  // namespace

std::unique_ptr<v1::Environment::Service> NewEnvironmentService(Environment* environment) {
  return std::make_unique<EnvironmentService>(environment);
}

}  // namespace trellis::environment
