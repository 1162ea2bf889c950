#include "actor/actor_service.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "model/token_ids.h"
#include "rpc/channel.h"

namespace trellis::actor {
namespace {

// Prompts per streamed message: each message carries whole groups.
constexpr int kPromptsPerMessage = 8;

}  // namespace

void ActorService::Bind(RolloutWorker* worker, const config::RequestLimits& limits) {
  limits_.Set(limits);
  worker_.Bind(worker);
}

ActorService::ActorService(std::string worker_id)
    : worker_(std::move(worker_id), model::StatusFromException) {
  CountServerStreaming(
      "trellis.v1.Actor", "Generate", v1::GenerateRequest::kPromptsFieldNumber,
      [this](int64_t prompts) { return config::CheckPromptCount(prompts, limits_.Get()); },
      &ActorService::GenerateInto);
}

grpc::Status ActorService::GenerateInto(
    grpc::ServerContext* context, const v1::GenerateRequest* request,
    grpc::internal::WriterInterface<v1::GenerateResponse>* writer) {
  const config::RequestLimits limits = limits_.Get();
  if (absl::Status s = config::CheckGenerateRequest(*request, limits); !s.ok()) {
    return rpc::ToGrpc(s);
  }
  for (int i = 0; i < request->prompts_size(); ++i) {
    absl::Status s = model::CheckTokenIds(request->prompts(i).token_ids(), limits.vocab_size,
                                          absl::StrCat("prompts[", i, "].token_ids"));
    if (!s.ok()) return rpc::ToGrpc(s);
  }
  // The work stops once the caller cancels or its deadline passes.
  const RolloutWorker::StopFn caller_gone = [context] {
    return context->IsCancelled() || std::chrono::system_clock::now() > context->deadline();
  };
  absl::StatusOr<v1::GenerateResponse> response;
  absl::Status run = worker_.Run([&](RolloutWorker& worker) {
    response = worker.GenerateUntil(*request, caller_gone);
    return response.status();
  });
  if (!run.ok()) return rpc::ToGrpc(run);
  // Groups are contiguous and in prompt order: stream them a few prompts at
  // a time, the totals with the last message.
  const int group = std::max(1, request->responses_per_prompt());
  const int per_message = kPromptsPerMessage * group;
  const int total = response->samples_size();
  int begin = 0;
  do {  // At least one message, even for an empty response.
    const int end = std::min(total, begin + per_message);
    v1::GenerateResponse part;
    for (int i = begin; i < end; ++i) *part.add_samples() = std::move(*response->mutable_samples(i));
    if (end == total) {
      part.set_kv_cache_bytes(response->kv_cache_bytes());
      part.set_generated_tokens(response->generated_tokens());
      part.set_prefill_tokens(response->prefill_tokens());
      part.set_forward_flops(response->forward_flops());
      part.set_decode_seconds(response->decode_seconds());
      part.set_decode_token_budget(response->decode_token_budget());
    }
    if (!writer->Write(part)) return grpc::Status(grpc::StatusCode::CANCELLED, "client gone");
    begin = end;
  } while (begin < total);
  return grpc::Status::OK;
}

grpc::Status ActorService::SyncWeights(grpc::ServerContext*, const v1::SyncWeightsRequest* request,
                                       v1::WeightSyncStats* response) {
  return worker_.Unary(response, [&](RolloutWorker& worker) {
    return worker.SyncWeights(request->min_version());
  });
}

grpc::Status ActorService::GetVersion(grpc::ServerContext*, const v1::Empty*,
                                      v1::VersionResponse* response) {
  return worker_.Unary(response, [](RolloutWorker& worker) -> absl::StatusOr<v1::VersionResponse> {
    v1::VersionResponse r;
    r.set_policy_version(worker.policy_version());
    return r;
  });
}

namespace {

class GrpcActorClient final : public RolloutWorker {
 public:
  GrpcActorClient(std::shared_ptr<grpc::Channel> channel, std::string worker_id,
                  absl::Duration timeout)
      : stub_(v1::Actor::NewStub(channel)), id_(std::move(worker_id)), timeout_(timeout) {}

  absl::StatusOr<v1::GenerateResponse> Generate(const v1::GenerateRequest& request) override {
    return GenerateStreaming(request, nullptr);
  }

  // Each streamed message is a part.
  absl::StatusOr<v1::GenerateResponse> GenerateStreaming(const v1::GenerateRequest& request,
                                                         const PartSink& on_part) override {
    grpc::ClientContext context;
    rpc::SetDeadline(context, timeout_);
    std::unique_ptr<grpc::ClientReader<v1::GenerateResponse>> reader =
        stub_->Generate(&context, request);
    v1::GenerateResponse all, part;
    while (reader->Read(&part)) {
      if (on_part && part.samples_size() > 0) on_part(part);
      for (v1::Sample& s : *part.mutable_samples()) *all.add_samples() = std::move(s);
      all.set_kv_cache_bytes(std::max(all.kv_cache_bytes(), part.kv_cache_bytes()));
      all.set_generated_tokens(all.generated_tokens() + part.generated_tokens());
      all.set_prefill_tokens(all.prefill_tokens() + part.prefill_tokens());
      all.set_forward_flops(all.forward_flops() + part.forward_flops());
      // The totals come with the last message.
      all.set_decode_seconds(all.decode_seconds() + part.decode_seconds());
      all.set_decode_token_budget(std::max(all.decode_token_budget(), part.decode_token_budget()));
    }
    grpc::Status status = reader->Finish();
    if (!status.ok()) return rpc::FromGrpc(status, absl::StrCat(id_, " Generate"));
    return all;
  }

  absl::StatusOr<v1::WeightSyncStats> SyncWeights(int64_t version) override {
    v1::SyncWeightsRequest request;
    request.set_min_version(version);
    absl::StatusOr<v1::WeightSyncStats> stats =
        rpc::Call(*stub_, &v1::Actor::Stub::SyncWeights, request, timeout_,
                  absl::StrCat(id_, " SyncWeights"));
    if (stats.ok()) version_ = stats->version();
    return stats;
  }

  int64_t policy_version() const override { return version_; }

 private:
  std::unique_ptr<v1::Actor::Stub> stub_;
  const std::string id_;
  const absl::Duration timeout_;
  int64_t version_ = -1;
};

}  // namespace

std::unique_ptr<RolloutWorker> NewGrpcActorClient(std::shared_ptr<grpc::Channel> channel,
                                                  std::string worker_id,
                                                  absl::Duration timeout) {
  return std::make_unique<GrpcActorClient>(std::move(channel), std::move(worker_id), timeout);
}

}  // namespace trellis::actor
