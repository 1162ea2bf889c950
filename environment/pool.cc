// The environment pool (pool.h): deadlines, reply checks, circuit breaker
// and counts around any environment.

#include "environment/pool.h"

#include <cmath>
#include <iostream>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "nlohmann/json.hpp"
#include "plugin/breaker.h"

namespace trellis::environment {
namespace {

// One call's result, shared by the caller and the thread that makes it (which
// may outlive the caller's wait).
template <typename T>
struct CallState {
  absl::Mutex mu;
  bool done ABSL_GUARDED_BY(mu) = false;
  absl::StatusOr<T> result ABSL_GUARDED_BY(mu) = absl::UnknownError("not run");
};

absl::Status CheckMetadata(absl::string_view call, const std::string& metadata_json) {
  if (metadata_json.empty()) return absl::OkStatus();
  const nlohmann::json j = nlohmann::json::parse(metadata_json, nullptr, false);
  if (j.is_object()) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(call, ": metadata_json must be a JSON object text or \"\", found ",
                   j.is_discarded() ? "text that is not JSON" : j.type_name()));
}

absl::Status CheckReply(const v1::OpenEpisodeResponse& r) {
  for (int i = 0; i < r.tools_size(); ++i) {
    if (r.tools(i).name().empty()) {
      return absl::InvalidArgumentError(absl::StrCat("Open: tools[", i, "].name is empty"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckReply(const v1::EnvironmentStepResponse& r) {
  if (!std::isfinite(r.reward())) {
    return absl::InvalidArgumentError(
        absl::StrCat("Step: reward must be finite, found ", r.reward()));
  }
  return CheckMetadata("Step", r.metadata_json());
}

absl::Status CheckReply(const v1::CloseEpisodeResponse&) { return absl::OkStatus(); }

class Pool : public Environment {
 public:
  Pool(std::unique_ptr<Environment> inner, const v1::EnvironmentConfig& config, PoolOptions options)
      : inner_(std::move(inner)),
        label_(EnvironmentLabel(config)),
        deadline_(absl::Milliseconds(config.call_deadline_ms())),
        env_(options.env != nullptr ? options.env : env::Env::Default()),
        breaker_(
            "environment", label_, config.breaker_failures(),
            absl::Milliseconds(config.breaker_pause_ms()), env_,
            options.log ? std::move(options.log)
                        : [](const std::string& line) { std::cerr << line << std::endl; }) {}

  absl::StatusOr<v1::OpenEpisodeResponse> Open(const v1::OpenEpisodeRequest& request) override {
    return Guarded<v1::OpenEpisodeResponse>(
        "Open", /*admit=*/true, [inner = inner_, request] { return inner->Open(request); });
  }

  absl::StatusOr<v1::EnvironmentStepResponse> Step(
      const v1::EnvironmentStepRequest& request) override {
    return Guarded<v1::EnvironmentStepResponse>(
        "Step", /*admit=*/true, [inner = inner_, request] { return inner->Step(request); });
  }

  absl::Status Close(const v1::CloseEpisodeRequest& request) override {
    return Guarded<v1::CloseEpisodeResponse>(
               "Close", /*admit=*/false,
               [inner = inner_, request]() -> absl::StatusOr<v1::CloseEpisodeResponse> {
                 absl::Status s = inner->Close(request);
                 if (!s.ok()) return s;
                 return v1::CloseEpisodeResponse();
               })
        .status();
  }

  int MaxConcurrency() const override { return inner_->MaxConcurrency(); }

 private:
  // Runs `call` on its own thread and waits for it until the deadline;
  // checks the reply and tells the breaker.
  template <typename T>
  absl::StatusOr<T> Guarded(absl::string_view what, bool admit,
                            std::function<absl::StatusOr<T>()> call) {
    if (admit) {
      const std::string refused = breaker_.Admit();
      if (!refused.empty()) {
        return CircuitOpen(absl::UnavailableError(absl::StrCat(label_, " ", what, ": ", refused)));
      }
    }
    const absl::Time start = env_->Now();
    auto state = std::make_shared<CallState<T>>();
    std::thread([state, call = std::move(call)] {
      absl::StatusOr<T> result = call();
      absl::MutexLock lock(&state->mu);
      state->result = std::move(result);
      state->done = true;
    }).detach();
    absl::StatusOr<T> result = absl::UnknownError("not run");
    {
      absl::MutexLock lock(&state->mu);
      const bool done =
          env_->AwaitWithDeadline(state->mu, absl::Condition(&state->done), start + deadline_);
      if (done) {
        result = std::move(state->result);
      } else {
        result = absl::DeadlineExceededError(absl::StrCat(label_, " ", what, ": no answer within ",
                                                          absl::FormatDuration(deadline_)));
      }
    }
    if (result.ok()) {
      if (absl::Status bad = CheckReply(*result); !bad.ok()) {
        result =
            absl::InvalidArgumentError(absl::StrCat(label_, " answered garbage: ", bad.message()));
      }
    } else if (!absl::StrContains(result.status().message(), label_)) {
      result = absl::Status(result.status().code(),
                            absl::StrCat(label_, " ", what, ": ", result.status().message()));
    }
    breaker_.Observe(!result.ok(), result.status().ToString());
    return result;
  }

  // Shared with calls that outlive their deadline.
  const std::shared_ptr<Environment> inner_;
  const std::string label_;
  const absl::Duration deadline_;
  env::Env* const env_;
  plugin::Breaker breaker_;
};

}  // namespace

std::string EnvironmentLabel(const v1::EnvironmentConfig& config) {
  return config.version().empty() ? config.name()
                                  : absl::StrCat(config.name(), "@", config.version());
}

std::unique_ptr<Environment> NewEnvironmentPool(std::unique_ptr<Environment> inner,
                                                const v1::EnvironmentConfig& config,
                                                PoolOptions options) {
  return std::make_unique<Pool>(std::move(inner), config, std::move(options));
}

}  // namespace trellis::environment
