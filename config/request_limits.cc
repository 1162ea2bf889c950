#include "config/request_limits.h"

#include <algorithm>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "config/worker_id.h"

namespace trellis::config {
namespace {

absl::Status TooMany(absl::string_view field, int64_t found, absl::string_view what,
                     int64_t limit) {
  return absl::ResourceExhaustedError(
      absl::StrCat(field, ": ", found, " ", what, " in one request; the limit is ", limit));
}

absl::Status CheckText(absl::string_view field, const std::string& text,
                       const RequestLimits& limits) {
  if (static_cast<int64_t>(text.size()) <= limits.max_text_bytes) return absl::OkStatus();
  return absl::ResourceExhaustedError(
      absl::StrCat(field, ": ", text.size(), " bytes; the limit is ", limits.max_text_bytes));
}

// One sequence of `prompt` and `response` tokens fits the model; adds its
// tokens to *total.
absl::Status CheckSequence(absl::string_view where, int64_t prompt, int64_t response,
                           const RequestLimits& limits, int64_t* total) {
  if (prompt + response > limits.max_seq_len) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": ", prompt + response, " tokens (prompt ", prompt, " + response ",
                     response, "); model.max_seq_len is ", limits.max_seq_len));
  }
  *total += prompt + response;
  return absl::OkStatus();
}

absl::Status CheckBatchTokens(absl::string_view field, int64_t tokens,
                              const RequestLimits& limits) {
  if (tokens <= limits.max_batch_tokens) return absl::OkStatus();
  return TooMany(field, tokens, "tokens", limits.max_batch_tokens);
}

// Checks every pair of `batch` with check(pair, where, &tokens), then the
// batch's total.
template <typename Batch, typename Check>
absl::Status CheckPairs(const Batch& batch, const RequestLimits& limits, Check check) {
  if (absl::Status s = CheckBatchSize("pairs", batch.pairs_size(), limits); !s.ok()) return s;
  int64_t tokens = 0;
  for (int i = 0; i < batch.pairs_size(); ++i) {
    if (absl::Status s = check(batch.pairs(i), absl::StrCat("pairs[", i, "]"), &tokens); !s.ok()) {
      return s;
    }
  }
  return CheckBatchTokens("pairs", tokens, limits);
}

// The samples of a TrainBatch or a LogProbRequest.
template <typename Samples>
absl::Status CheckSamples(const Samples& samples, const RequestLimits& limits) {
  if (absl::Status s = CheckBatchSize("samples", samples.size(), limits); !s.ok()) return s;
  int64_t tokens = 0;
  for (int i = 0; i < samples.size(); ++i) {
    absl::Status s = CheckSequence(absl::StrCat("samples[", i, "] (token batch row ", i, ")"),
                                   samples[i].prompt_tokens_size(),
                                   samples[i].response_tokens_size(), limits, &tokens);
    if (!s.ok()) return s;
  }
  return CheckBatchTokens("samples", tokens, limits);
}

// Each stop sequence has a token, every one in the vocabulary; no more
// sequences, nor longer ones, than a sequence has tokens.
absl::Status CheckStops(const v1::SamplingParams& sampling, const RequestLimits& limits) {
  if (sampling.stop_size() > limits.max_seq_len) {
    return TooMany("sampling.stop", sampling.stop_size(), "stop sequences", limits.max_seq_len);
  }
  for (int i = 0; i < sampling.stop_size(); ++i) {
    const auto& ids = sampling.stop(i).token_ids();
    const std::string where = absl::StrCat("sampling.stop[", i, "]");
    if (ids.empty()) {
      return absl::InvalidArgumentError(where + ": empty (a stop sequence needs a token)");
    }
    if (ids.size() > limits.max_seq_len) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": ", ids.size(), " tokens; model.max_seq_len is ", limits.max_seq_len));
    }
    for (int k = 0; k < ids.size(); ++k) {
      if (ids[k] < 0 || ids[k] >= limits.vocab_size) {
        return absl::InvalidArgumentError(absl::StrCat(where, ".token_ids[", k, "]: id ", ids[k],
                                                       " is outside the vocabulary [0, ",
                                                       limits.vocab_size, ")"));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

// Bytes one entry of a request takes on the wire on average, its share of
// the request's other fields included (MaxRequestBytes).
constexpr int64_t kPromptBytes = 4 << 10;
constexpr int64_t kVerifyItemBytes = 1 << 10;
constexpr int64_t kBatchTokenBytes = 4;
constexpr int64_t kLedgerRecordBytes = 256;

int MaxRequestBytes(v1::Role role) {
  const RequestLimits limits;
  switch (role) {
    case v1::LEARNER:
    case v1::REFERENCE:
      return static_cast<int>(limits.max_batch_tokens * kBatchTokenBytes);
    case v1::ACTOR:
      return static_cast<int>(limits.max_prompts * kPromptBytes);
    case v1::VERIFIER:
      return static_cast<int>(limits.max_verify_items * kVerifyItemBytes);
    default:
      return static_cast<int>(limits.max_ledger_records * kLedgerRecordBytes);
  }
}

absl::Status CheckPromptCount(int64_t prompts, const RequestLimits& limits) {
  if (prompts <= limits.max_prompts) return absl::OkStatus();
  return TooMany("prompts", prompts, "prompts", limits.max_prompts);
}

absl::Status CheckVerifyItemCount(int64_t items, const RequestLimits& limits) {
  if (items <= limits.max_verify_items) return absl::OkStatus();
  // InvalidArgument: the code the verifier protocol gives a request with
  // more items than a server accepts (docs/verifier-protocol.md).
  return absl::InvalidArgumentError(absl::StrCat("items: ", items,
                                                 " items in one request; the limit is ",
                                                 limits.max_verify_items, " (split the batch)"));
}

absl::Status CheckBatchSize(const char* field, int64_t size, const RequestLimits& limits) {
  if (size <= limits.max_batch_samples) return absl::OkStatus();
  return TooMany(field, size, "entries", limits.max_batch_samples);
}

absl::Status CheckLedgerRecordCount(int64_t records, const RequestLimits& limits) {
  if (records <= limits.max_ledger_records) return absl::OkStatus();
  return TooMany("records", records, "records", limits.max_ledger_records);
}

RequestLimits RequestLimitsFor(const v1::ModelConfig& model, int64_t vocab_size) {
  RequestLimits limits;
  limits.vocab_size = vocab_size;
  limits.max_seq_len = model.max_seq_len();
  return limits;
}

absl::Status CheckGenerateRequest(const v1::GenerateRequest& request, const RequestLimits& limits) {
  const int prompts = request.prompts_size();
  if (absl::Status s = CheckPromptCount(prompts, limits); !s.ok()) return s;
  const int n = request.responses_per_prompt();
  if (n < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("responses_per_prompt: must be >= 0, found ", n));
  }
  if (n > limits.max_responses_per_prompt) {
    return TooMany("responses_per_prompt", n, "responses per prompt",
                   limits.max_responses_per_prompt);
  }
  const int64_t rows = int64_t{prompts} * std::max(1, n);
  if (rows > limits.max_generated_samples) {
    return TooMany("prompts x responses_per_prompt", rows, "samples", limits.max_generated_samples);
  }
  if (request.decode_token_budget() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("decode_token_budget: must be >= 0 (0: the actor's own), found ",
                     request.decode_token_budget()));
  }
  if (absl::Status s = CheckStops(request.sampling(), limits); !s.ok()) return s;
  const int64_t max_new = request.sampling().max_new_tokens();
  int64_t tokens = 0;
  for (int i = 0; i < prompts; ++i) {
    const v1::Prompt& p = request.prompts(i);
    const std::string where = absl::StrCat("prompts[", i, "]");
    absl::Status s =
        CheckSequence(absl::StrCat(where, " (prompt ", p.id(), ") with sampling.max_new_tokens"),
                      p.token_ids_size(), max_new, limits, &tokens);
    if (s.ok()) s = CheckText(where + ".text", p.text(), limits);
    if (s.ok()) s = CheckText(where + ".answer", p.answer(), limits);
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status CheckTrainBatch(const v1::TrainBatch& batch, const RequestLimits& limits) {
  return CheckSamples(batch.samples(), limits);
}

absl::Status CheckLogProbRequest(const v1::LogProbRequest& request, const RequestLimits& limits) {
  if (absl::Status s = CheckSamples(request.samples(), limits); !s.ok()) return s;
  for (int i = 0; i < request.samples_size(); ++i) {
    absl::Status s = CheckText(absl::StrCat("samples[", i, "].response_text"),
                               request.samples(i).response_text(), limits);
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status CheckSftBatch(const v1::SftBatch& batch, const RequestLimits& limits) {
  return CheckPairs(
      batch, limits,
      [&limits](const v1::SftBatch::Pair& p, const std::string& where, int64_t* tokens) {
        return CheckSequence(where, p.prompt_tokens_size(), p.target_tokens_size(), limits, tokens);
      });
}

absl::Status CheckPreferenceBatch(const v1::PreferenceBatch& batch, const RequestLimits& limits) {
  return CheckPairs(
      batch, limits,
      [&limits](const v1::PreferencePair& p, const std::string& where, int64_t* tokens) {
        absl::Status s = CheckSequence(where + ".chosen_tokens", p.prompt_tokens_size(),
                                       p.chosen_tokens_size(), limits, tokens);
        if (!s.ok()) return s;
        return CheckSequence(where + ".rejected_tokens", p.prompt_tokens_size(),
                             p.rejected_tokens_size(), limits, tokens);
      });
}

absl::Status CheckVerifyRequest(const v1::VerifyRequest& request, const RequestLimits& limits) {
  const int n = request.items_size();
  if (absl::Status s = CheckVerifyItemCount(n, limits); !s.ok()) return s;
  for (int i = 0; i < n; ++i) {
    const v1::VerifyItem& item = request.items(i);
    const std::string where = absl::StrCat("items[", i, "].");
    const std::pair<const char*, const std::string*> fields[] = {
        {"prompt", &item.prompt()},
        {"response", &item.response()},
        {"answer", &item.answer()},
        {"metadata_json", &item.metadata_json()}};
    for (const auto& [name, text] : fields) {
      if (absl::Status s = CheckText(where + name, *text, limits); !s.ok()) return s;
    }
  }
  return absl::OkStatus();
}

absl::Status CheckWorkerId(const std::string& worker_id, const RequestLimits& limits) {
  if (static_cast<int64_t>(worker_id.size()) > limits.max_worker_id_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("worker_id: ", worker_id.size(),
                                                   " bytes; a worker id has at most ",
                                                   limits.max_worker_id_bytes));
  }
  absl::StatusOr<WorkerId> id = WorkerId::Parse(worker_id);
  if (!id.ok())
    return absl::InvalidArgumentError(absl::StrCat("worker_id: ", id.status().message()));
  return absl::OkStatus();
}

absl::Status CheckLedgerReport(const v1::LedgerReport& report, const RequestLimits& limits) {
  if (absl::Status s = CheckWorkerId(report.worker_id(), limits); !s.ok()) return s;
  return CheckLedgerRecordCount(report.records_size(), limits);
}

absl::Status CheckFetchRequest(const v1::FetchWeightsRequest& request,
                               const RequestLimits& limits) {
  if (request.min_version() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("min_version: must be >= 0, found ", request.min_version()));
  }
  if (request.wait_ms() > limits.max_fetch_wait_ms) {
    return absl::InvalidArgumentError(absl::StrCat(
        "wait_ms: ", request.wait_ms(), "; the longest wait is ", limits.max_fetch_wait_ms, " ms"));
  }
  return absl::OkStatus();
}

}  // namespace trellis::config
