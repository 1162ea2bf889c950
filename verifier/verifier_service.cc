// trellis.v1.Verifier over gRPC: the service, the scheduler's client and the
// "remote" verifier (verifier_service.h).

#include "verifier/verifier_service.h"

#include <grpcpp/client_context.h>
#include <grpcpp/server_context.h>

#include <cmath>
#include <exception>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "rpc/channel.h"
#include "rpc/counted_request.h"
#include "rpc/status.h"
#include "verifier/internal/result.h"

namespace trellis::verifier {
namespace {

using internal::Failed;

// Empty when `r` is a well-formed result, else why not.
std::string Malformation(const v1::VerifyResult& r) {
  if (!std::isfinite(r.reward())) return absl::StrCat("reward ", r.reward(), " is not finite");
  if (r.verdict() == v1::VERDICT_UNSPECIFIED || !v1::Verdict_IsValid(r.verdict())) {
    return absl::StrCat("verdict ", static_cast<int>(r.verdict()),
                        " is not one of CORRECT, WRONG, UNPARSEABLE, ERROR, TIMEOUT");
  }
  return "";
}

// Replaces a malformed result by an ERROR with reward `error_reward` whose
// detail starts with `what`.
void Sanitize(v1::VerifyResult& r, float error_reward, const std::string& what) {
  const std::string why = Malformation(r);
  if (why.empty()) return;
  std::string name = r.verifier();
  r = Failed(v1::ERROR, error_reward, absl::StrCat(what, ": ", why), v1::VerifyResult::MALFORMED);
  r.set_verifier(std::move(name));
}

// "" when `metadata_json` is empty or a JSON object text, else why not.
std::string MetadataProblem(const std::string& metadata_json) {
  if (metadata_json.empty()) return "";
  const nlohmann::json parsed = nlohmann::json::parse(metadata_json, nullptr, false);
  if (parsed.is_discarded()) return "not valid JSON";
  if (!parsed.is_object()) return absl::StrCat("a JSON ", parsed.type_name(), ", not an object");
  return "";
}

class VerifierService final : public rpc::CountingService<v1::Verifier::Service> {
 public:
  VerifierService(std::shared_ptr<const Verifier> verifier, std::string name,
                  VerifierServiceOptions options)
      : verifier_(std::move(verifier)), name_(std::move(name)), options_(options) {
    // Items counted before the request is parsed.
    CountUnary(
        "trellis.v1.Verifier", "Verify", v1::VerifyRequest::kItemsFieldNumber,
        [this](int64_t items) { return config::CheckVerifyItemCount(items, options_.limits); },
        &VerifierService::Verify);
  }

  grpc::Status Verify(grpc::ServerContext*, const v1::VerifyRequest* request,
                      v1::VerifyResponse* response) override {
    if (absl::Status s = config::CheckVerifyRequest(*request, options_.limits); !s.ok()) {
      return rpc::ToGrpc(s);
    }
    const int n = request->items_size();
    std::vector<v1::VerifyResult> results(n);
    // Items whose metadata is unusable are answered here; the rest go to
    // the verifier as one batch.
    google::protobuf::RepeatedPtrField<v1::VerifyItem> subset;
    std::vector<int> positions;
    for (int i = 0; i < n; ++i) {
      const std::string problem = MetadataProblem(request->items(i).metadata_json());
      if (problem.empty()) {
        positions.push_back(i);
        continue;
      }
      results[i] = Failed(v1::ERROR, 0,
                          absl::StrCat("items[", i, "].metadata_json: ", problem,
                                       "; expected \"\" or a JSON object text"),
                          v1::VerifyResult::MALFORMED);
    }
    const bool all = static_cast<int>(positions.size()) == n;
    if (!all) {
      for (int i : positions) *subset.Add() = request->items(i);
    }
    std::vector<v1::VerifyResult> scored;
    std::string failure;
    v1::VerifierStats stats;
    try {
      scored = verifier_->VerifyBatchWithStats(all ? request->items() : subset, &stats);
    } catch (const std::exception& e) {
      failure = absl::StrCat("verifier failed on the batch: ", e.what());
    } catch (...) {
      failure = "verifier failed on the batch (unknown exception)";
    }
    if (failure.empty() && scored.size() != positions.size()) {
      failure = absl::StrCat("verifier returned ", scored.size(), " results for ",
                             positions.size(), " items");
    }
    for (size_t k = 0; k < positions.size(); ++k) {
      v1::VerifyResult& r = results[positions[k]];
      if (!failure.empty()) {
        r = Failed(v1::ERROR, 0, failure, v1::VerifyResult::CALL_FAILED);
        continue;
      }
      r = std::move(scored[k]);
      Sanitize(r, 0, absl::StrCat("items[", positions[k], "]: malformed verifier result"));
    }
    response->mutable_results()->Reserve(n);
    for (v1::VerifyResult& r : results) {
      if (r.verifier().empty()) r.set_verifier(name_);
      *response->add_results() = std::move(r);
    }
    if (!stats.verifier().empty()) *response->add_stats() = std::move(stats);
    return grpc::Status::OK;
  }

 private:
  const std::shared_ptr<const Verifier> verifier_;
  const std::string name_;
  const VerifierServiceOptions options_;
};

class GrpcVerifierClient final : public VerifierClient {
 public:
  GrpcVerifierClient(std::shared_ptr<grpc::Channel> channel, std::string worker_id,
                     absl::Duration timeout)
      : stub_(v1::Verifier::NewStub(std::move(channel))),
        what_(absl::StrCat(worker_id, " Verify")),
        timeout_(timeout) {}

  absl::StatusOr<v1::VerifyResponse> Verify(const v1::VerifyRequest& request) override {
    absl::StatusOr<v1::VerifyResponse> response =
        rpc::Call(*stub_, &v1::Verifier::Stub::Verify, request, timeout_, what_);
    if (!response.ok()) return response.status();
    if (response->results_size() != request.items_size()) {
      return absl::InternalError(absl::StrCat(what_, ": replied ", response->results_size(),
                                              " results for ", request.items_size(),
                                              " items"));
    }
    for (int i = 0; i < response->results_size(); ++i) {
      Sanitize(*response->mutable_results(i), 0,
               absl::StrCat(what_, ": results[", i, "] malformed"));
    }
    return response;
  }

 private:
  std::unique_ptr<v1::Verifier::Stub> stub_;
  const std::string what_;
  const absl::Duration timeout_;
};

class RemoteVerifier final : public Verifier {
 public:
  RemoteVerifier(const v1::VerifierConfig& config, std::shared_ptr<grpc::Channel> channel)
      : config_(config), channel_(channel), stub_(v1::Verifier::NewStub(std::move(channel))) {}

  v1::VerifyResult Verify(const v1::VerifyItem& item) const override {
    google::protobuf::RepeatedPtrField<v1::VerifyItem> one;
    *one.Add() = item;
    return std::move(VerifyBatch(one)[0]);
  }

  bool PrefersBatches() const override { return true; }

  std::vector<v1::VerifyResult> VerifyBatch(
      const google::protobuf::RepeatedPtrField<v1::VerifyItem>& items) const override {
    const size_t n = items.size();
    if (n == 0) return {};
    v1::VerifyRequest request;
    *request.mutable_items() = items;
    const absl::Duration deadline = absl::Milliseconds(config_.deadline_ms());
    const absl::Time start = absl::Now();
    v1::VerifyResponse response;
    grpc::Status status;
    std::string unavailable;  // why the first attempt could not be sent
    for (int attempt = 0; attempt < 2; ++attempt) {
      grpc::ClientContext context;
      rpc::SetDeadline(context, deadline - (absl::Now() - start));
      // The retry waits for the channel to reconnect (a restarted service)
      // instead of failing fast, within what is left of the deadline.
      context.set_wait_for_ready(attempt > 0);
      response.Clear();
      status = stub_->Verify(&context, request, &response);
      if (status.error_code() != grpc::StatusCode::UNAVAILABLE) break;
      unavailable = status.error_message();
      if (absl::Now() - start >= deadline) break;
    }
    const std::string& address = config_.address();
    // Every item counts the retry after UNAVAILABLE, answered or not.
    const int retries = unavailable.empty() ? 0 : 1;
    if (!status.ok() && !unavailable.empty()) {
      // Connected after the call: the service itself answered UNAVAILABLE
      // (shutting down, overloaded, or its handler's code), which no wait
      // for a connection mends.
      const bool answered = status.error_code() == grpc::StatusCode::UNAVAILABLE &&
                            channel_->GetState(false) == GRPC_CHANNEL_READY;
      return Uniform(
          n, v1::ERROR, config_.reward_wrong(),
          answered ? absl::StrCat("the verifier at ", address, " answered UNAVAILABLE (",
                                  status.error_message(), "): connected, but the service refused")
                   : absl::StrCat("the verifier at ", address, " is unavailable (", unavailable,
                                  "); no connection within ", config_.deadline_ms(),
                                  " ms (refused, unreachable or dropped)"),
          v1::VerifyResult::UNAVAILABLE, retries);
    }
    if (status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
      return Uniform(n, v1::TIMEOUT, config_.timeout_reward(),
                     absl::StrCat("timeout: the verifier at ", address, " did not answer ", n,
                                  " items within ", config_.deadline_ms(), " ms"),
                     v1::VerifyResult::DEADLINE, retries);
    }
    if (!status.ok()) {
      return Uniform(
          n, v1::ERROR, config_.reward_wrong(),
          rpc::FromGrpc(status, absl::StrCat("the verifier at ", address, " Verify")).ToString(),
          v1::VerifyResult::CALL_FAILED, retries);
    }
    if (static_cast<size_t>(response.results_size()) != n) {
      return Uniform(n, v1::ERROR, config_.reward_wrong(),
                     absl::StrCat("malformed reply from the verifier at ", address, ": ",
                                  response.results_size(), " results for ", n, " items"),
                     v1::VerifyResult::MALFORMED, retries);
    }
    std::vector<v1::VerifyResult> results(n);
    for (size_t i = 0; i < n; ++i) {
      results[i] = std::move(*response.mutable_results(static_cast<int>(i)));
      results[i].set_retries(results[i].retries() + retries);
      Sanitize(results[i], config_.reward_wrong(),
               absl::StrCat("malformed reply from the verifier at ", address, ": results[", i,
                            "]"));
    }
    return results;
  }

 private:
  static std::vector<v1::VerifyResult> Uniform(size_t n, v1::Verdict verdict, float reward,
                                               const std::string& detail,
                                               v1::VerifyResult::Failure failure, int retries) {
    v1::VerifyResult r = Failed(verdict, reward, detail, failure);
    r.set_retries(retries);
    return std::vector<v1::VerifyResult>(n, r);
  }

  const v1::VerifierConfig config_;
  const std::shared_ptr<grpc::Channel> channel_;
  const std::unique_ptr<v1::Verifier::Stub> stub_;
};

}  // namespace

std::unique_ptr<v1::Verifier::Service> NewVerifierService(std::shared_ptr<const Verifier> verifier,
                                                          std::string verifier_name,
                                                          VerifierServiceOptions options) {
  return std::make_unique<VerifierService>(std::move(verifier), std::move(verifier_name),
                                           options);
}

std::unique_ptr<VerifierClient> NewGrpcVerifierClient(std::shared_ptr<grpc::Channel> channel,
                                                      std::string worker_id,
                                                      absl::Duration timeout) {
  return std::make_unique<GrpcVerifierClient>(std::move(channel), std::move(worker_id), timeout);
}

absl::Status RegisterRemoteVerifier(VerifierRegistry& registry) {
  return registry.Register(
      "remote",
      [](const v1::VerifierConfig& c) -> absl::StatusOr<std::unique_ptr<Verifier>> {
        std::shared_ptr<grpc::Channel> channel = rpc::NewChannel(c.address());
        if (c.connect_timeout_ms() > 0) {
          absl::Status connected = rpc::WaitConnected(*channel, c.address(),
                                                      absl::Milliseconds(c.connect_timeout_ms()));
          if (!connected.ok()) {
            return absl::UnavailableError(
                absl::StrCat("verifier.address: ", connected.message(),
                             " (verifier.connect_timeout_ms); is the verifier service running?"));
          }
        }
        return std::make_unique<RemoteVerifier>(c, std::move(channel));
      },
      [](const v1::VerifierConfig& c) -> absl::Status {
        if (c.address().empty()) {
          return absl::InvalidArgumentError(
              "verifier.address: required by the remote verifier (host:port of a "
              "trellis.v1.Verifier service), found \"\"");
        }
        if (c.deadline_ms() <= 0) {
          return absl::InvalidArgumentError(absl::StrCat(
              "verifier.deadline_ms: must be > 0 (the deadline of one batch), found ",
              c.deadline_ms()));
        }
        if (c.connect_timeout_ms() < 0) {
          return absl::InvalidArgumentError(absl::StrCat(
              "verifier.connect_timeout_ms: must be >= 0, found ", c.connect_timeout_ms()));
        }
        return absl::OkStatus();
      });
}

}  // namespace trellis::verifier
