#ifndef TRELLIS_CONFIG_REQUEST_LIMITS_H_
#define TRELLIS_CONFIG_REQUEST_LIMITS_H_

// The one table of what a request to a Trellis service may ask for: the
// largest message each role's server receives, and per request the items,
// responses, tokens and bytes a handler accepts. Every handler checks its
// request against these before anything is allocated for it, so that a
// small message cannot ask for a huge allocation (2^31 responses) and a
// large one is refused whole:
//  - a count or size beyond a serving limit (more items, samples, records,
//    bytes than a request may carry) is ResourceExhausted;
//  - a sequence longer than the job's model takes (model.max_seq_len), a
//    negative count or a malformed worker id is InvalidArgument;
// each message names the field and the limit.

#include <cstdint>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "trellis/v1/job.pb.h"
#include "trellis/v1/rollout.pb.h"
#include "trellis/v1/scheduler.pb.h"
#include "trellis/v1/weights.pb.h"

namespace trellis::config {

// Largest request message the server of `role` receives (gRPC's maximum
// receive message size; a larger one is RESOURCE_EXHAUSTED before any of
// it is parsed), derived from the default RequestLimits' counts and the
// bytes one entry takes on average, the request's other fields included:
//  - actor: max_prompts x 4 KiB (a prompt's token ids, text and answer):
//    64 MiB;
//  - verifier: max_verify_items x 1 KiB: 64 MiB;
//  - learner, reference: max_batch_tokens x 4 bytes (a token's id and its
//    log-probs, packed): 256 MiB;
//  - scheduler (and every other role): max_ledger_records x 256 bytes (a
//    ledger record): 16 MiB.
// Within it, the entries of a request's top-level repeated field (items,
// prompts, samples, pairs, records) are counted on the wire before the
// request is parsed (rpc/counted_request.h, the Check...Count functions
// below), so that many small entries cannot cost more memory parsed than
// their limit allows.
int MaxRequestBytes(v1::Role role);

struct RequestLimits {
  // Token ids are in [0, vocab_size) (model/token_ids.h); 0: no job yet.
  int64_t vocab_size = 0;
  // Tokens of one sequence, prompt and response together; the job's
  // model.max_seq_len (RequestLimitsFor). 0: no job yet, every sequence
  // with a token is refused.
  int64_t max_seq_len = 0;
  // Actor.Generate: prompts in one request, responses per prompt, and
  // their product (the rows one request samples).
  int max_prompts = 1 << 14;
  int max_responses_per_prompt = 1 << 10;
  int64_t max_generated_samples = 1 << 16;
  // Learner and Reference: samples (or pairs) in one batch, and the tokens
  // of all of them.
  int max_batch_samples = 1 << 16;
  int64_t max_batch_tokens = int64_t{1} << 26;
  // Verifier.Verify: items in one request (more: InvalidArgument, as the
  // verifier protocol says).
  int max_verify_items = 1 << 16;
  // Bytes of one text field: a prompt's text or answer, a response's text,
  // a verify item's prompt, response, answer or metadata.
  int64_t max_text_bytes = 1 << 20;
  // Scheduler.ReportLedger: records in one report (a worker sends one
  // report per step); a worker id is "<role>-<index>" of at most this many
  // bytes, so that no ledger.jsonl line grows with a report.
  int max_ledger_records = 1 << 16;
  int max_worker_id_bytes = 32;
  // WeightStream.Fetch: the longest wait for a version, in ms.
  int64_t max_fetch_wait_ms = 10 * 60 * 1000;
};

// The limits of the services of a job with `model` (job.model): the
// defaults with the model's sequence length and `vocab_size`
// (model::VocabSize of the job and its tokenizer).
RequestLimits RequestLimitsFor(const v1::ModelConfig& model, int64_t vocab_size);

// The limits of a service whose worker learns its job after the server
// started (a launched worker registers first): set by Bind, read by every
// call; the defaults (no job: vocab_size and max_seq_len 0) until then.
// Thread-safe.
class SharedLimits {
 public:
  void Set(const RequestLimits& limits) {
    absl::MutexLock lock(&mu_);
    limits_ = limits;
  }
  RequestLimits Get() const {
    absl::MutexLock lock(&mu_);
    return limits_;
  }

 private:
  mutable absl::Mutex mu_;
  RequestLimits limits_ ABSL_GUARDED_BY(mu_);
};

// The counts of a request's entries, checked before it is parsed and again
// by the checks of the parsed request below (same codes, same messages):
// Generate's prompts, Verify's items (InvalidArgument, as the verifier
// protocol says), a batch's `field` ("samples", "pairs") and a report's
// records.
[[nodiscard]] absl::Status CheckPromptCount(int64_t prompts, const RequestLimits& limits);
[[nodiscard]] absl::Status CheckVerifyItemCount(int64_t items, const RequestLimits& limits);
[[nodiscard]] absl::Status CheckBatchSize(const char* field, int64_t size,
                                          const RequestLimits& limits);
[[nodiscard]] absl::Status CheckLedgerRecordCount(int64_t records, const RequestLimits& limits);

// Each checks one request against `limits` without copying it.
[[nodiscard]] absl::Status CheckGenerateRequest(const v1::GenerateRequest& request,
                                                const RequestLimits& limits);
[[nodiscard]] absl::Status CheckTrainBatch(const v1::TrainBatch& batch,
                                           const RequestLimits& limits);
[[nodiscard]] absl::Status CheckSftBatch(const v1::SftBatch& batch, const RequestLimits& limits);
[[nodiscard]] absl::Status CheckPreferenceBatch(const v1::PreferenceBatch& batch,
                                                const RequestLimits& limits);
[[nodiscard]] absl::Status CheckLogProbRequest(const v1::LogProbRequest& request,
                                               const RequestLimits& limits);
[[nodiscard]] absl::Status CheckVerifyRequest(const v1::VerifyRequest& request,
                                              const RequestLimits& limits);
[[nodiscard]] absl::Status CheckLedgerReport(const v1::LedgerReport& report,
                                             const RequestLimits& limits);
[[nodiscard]] absl::Status CheckFetchRequest(const v1::FetchWeightsRequest& request,
                                             const RequestLimits& limits);
// `worker_id` of a heartbeat or report: "<role>-<index>", bounded.
[[nodiscard]] absl::Status CheckWorkerId(const std::string& worker_id, const RequestLimits& limits);

}  // namespace trellis::config

#endif  // TRELLIS_CONFIG_REQUEST_LIMITS_H_
