// Every service's request handling (config/request_limits.h, the checks
// each gRPC handler runs first): the first byte picks a request type of the
// actor, learner, reference, verifier, scheduler or weight-stream service,
// the rest is parsed as that message (any bytes parse or fail), and a
// parsed request is checked against the limits of a small job. The
// verifier's request then goes through the Verify handler itself
// (verifier/verifier_service.h) with the built-in numeric verifier.
// Whatever the bytes, a check answers OK, InvalidArgument or
// ResourceExhausted, never anything else and never an abort.

#include <google/protobuf/stubs/logging.h>
#include <grpcpp/server_context.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>

#include "config/request_limits.h"
#include "trellis/v1/rollout.pb.h"
#include "trellis/v1/scheduler.pb.h"
#include "trellis/v1/services.pb.h"
#include "trellis/v1/weights.pb.h"
#include "verifier/verifier.h"
#include "verifier/verifier_service.h"

namespace {

namespace v1 = trellis::v1;
using trellis::config::RequestLimits;

// A small job's limits, so that the fuzzer reaches every limit.
RequestLimits Limits() {
  v1::ModelConfig model;
  model.set_max_seq_len(64);
  RequestLimits limits = trellis::config::RequestLimitsFor(model, /*vocab_size=*/100);
  limits.max_prompts = 8;
  limits.max_responses_per_prompt = 4;
  limits.max_generated_samples = 16;
  limits.max_batch_samples = 16;
  limits.max_batch_tokens = 512;
  limits.max_verify_items = 8;
  limits.max_text_bytes = 256;
  limits.max_ledger_records = 8;
  return limits;
}

v1::Verifier::Service* VerifierService() {
  static v1::Verifier::Service* service = [] {
    trellis::verifier::VerifierRegistry registry;
    if (!trellis::verifier::RegisterBuiltinVerifiers(registry).ok()) abort();
    v1::VerifierConfig config;
    config.set_name("numeric");
    auto verifier = registry.Create(config);
    if (!verifier.ok()) abort();
    trellis::verifier::VerifierServiceOptions options;
    options.limits = Limits();
    return trellis::verifier::NewVerifierService(
               std::shared_ptr<const trellis::verifier::Verifier>(*std::move(verifier)), "numeric",
               options)
        .release();
  }();
  return service;
}

void Expect(const absl::Status& s) {
  if (!s.ok() && !absl::IsInvalidArgument(s) && !absl::IsResourceExhausted(s)) abort();
}

template <typename Message>
bool Parse(const uint8_t* data, size_t size, Message* m) {
  return m->ParseFromArray(data, static_cast<int>(size));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  // Protobuf logs every string field with invalid UTF-8 it parses: quiet.
  static const bool quiet = (google::protobuf::SetLogHandler(nullptr), true);
  (void)quiet;
  static const RequestLimits limits = Limits();
  const uint8_t pick = data[0] % 9;
  ++data;
  --size;
  switch (pick) {
    case 0: {  // Actor.Generate
      v1::GenerateRequest r;
      if (Parse(data, size, &r)) Expect(trellis::config::CheckGenerateRequest(r, limits));
      break;
    }
    case 1: {  // Learner.TrainStep
      v1::TrainBatch r;
      if (Parse(data, size, &r)) Expect(trellis::config::CheckTrainBatch(r, limits));
      break;
    }
    case 2: {  // Learner.SftStep, EvalSft
      v1::SftBatch r;
      if (Parse(data, size, &r)) Expect(trellis::config::CheckSftBatch(r, limits));
      break;
    }
    case 3: {  // Learner.PreferenceStep, EvalPreference
      v1::PreferenceBatch r;
      if (Parse(data, size, &r)) Expect(trellis::config::CheckPreferenceBatch(r, limits));
      break;
    }
    case 4: {  // Reference.LogProbs, Scores
      v1::LogProbRequest r;
      if (Parse(data, size, &r)) Expect(trellis::config::CheckLogProbRequest(r, limits));
      break;
    }
    case 5: {  // Verifier.Verify: the check, then the handler itself
      v1::VerifyRequest r;
      if (!Parse(data, size, &r)) break;
      Expect(trellis::config::CheckVerifyRequest(r, limits));
      grpc::ServerContext context;
      v1::VerifyResponse response;
      const grpc::Status s = VerifierService()->Verify(&context, &r, &response);
      if (s.ok() && response.results_size() != r.items_size()) abort();
      break;
    }
    case 6: {  // Scheduler.ReportLedger
      v1::LedgerReport r;
      if (Parse(data, size, &r)) Expect(trellis::config::CheckLedgerReport(r, limits));
      break;
    }
    case 7: {  // Scheduler.Heartbeat
      v1::HeartbeatRequest r;
      if (Parse(data, size, &r)) Expect(trellis::config::CheckWorkerId(r.worker_id(), limits));
      break;
    }
    case 8: {  // WeightStream.Fetch
      v1::FetchWeightsRequest r;
      if (Parse(data, size, &r)) Expect(trellis::config::CheckFetchRequest(r, limits));
      break;
    }
  }
  return 0;
}
