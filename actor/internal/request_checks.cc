#include "actor/internal/request_checks.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"

namespace trellis::actor::internal {
namespace {

absl::Status Invalid(absl::string_view worker, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(worker, ": ", what));
}

absl::Status CheckResume(const v1::Prompt& prompt, int64_t n, int64_t max_new,
                         absl::string_view worker) {
  if (prompt.resume_size() == 0) return absl::OkStatus();
  const std::string where = absl::StrCat("prompt ", prompt.id(), " resume");
  if (prompt.resume_size() != n) {
    return Invalid(worker, absl::StrCat(where, " has ", prompt.resume_size(),
                                        " responses; responses_per_prompt is ", n));
  }
  for (int i = 0; i < prompt.resume_size(); ++i) {
    const v1::Sample& r = prompt.resume(i);
    const int64_t tokens = r.response_tokens_size();
    if (r.logprobs_size() != tokens) {
      return Invalid(worker, absl::StrCat(where, "[", i, "] has ", tokens, " tokens but ",
                                          r.logprobs_size(), " log-probs"));
    }
    if (r.token_versions_size() != 0 && r.token_versions_size() != tokens) {
      return Invalid(worker, absl::StrCat(where, "[", i, "] has ", tokens, " tokens but ",
                                          r.token_versions_size(), " token_versions"));
    }
    if (tokens > max_new || (r.unfinished() && tokens == max_new)) {
      return Invalid(worker, absl::StrCat(where, "[", i, "] has ", tokens,
                                          " tokens; max_new_tokens is ", max_new,
                                          r.unfinished() ? " and it is unfinished" : ""));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckRequest(const v1::GenerateRequest& request, int64_t max_seq_len,
                          absl::string_view worker) {
  const int64_t n = std::max(1, request.responses_per_prompt());
  const int64_t max_new = request.sampling().max_new_tokens();
  if (max_new < 1) {
    return Invalid(worker, absl::StrCat("sampling.max_new_tokens must be >= 1, found ", max_new));
  }
  for (int i = 0; i < request.sampling().stop_size(); ++i) {
    if (request.sampling().stop(i).token_ids().empty()) {
      return Invalid(worker,
                     absl::StrCat("sampling.stop[", i, "] is empty (a stop needs a token)"));
    }
  }
  if (request.finish_prompts() < 0) {
    return Invalid(worker,
                   absl::StrCat("finish_prompts (", request.finish_prompts(), ") must be >= 0"));
  }
  for (const v1::Prompt& prompt : request.prompts()) {
    if (prompt.token_ids().empty()) {
      return Invalid(worker, absl::StrCat("prompt ", prompt.id(), " has no token_ids"));
    }
    const int64_t len = prompt.token_ids_size();
    if (len + max_new > max_seq_len) {
      return Invalid(worker, absl::StrCat("prompt ", prompt.id(), " has ", len,
                                          " tokens; with max_new_tokens ", max_new,
                                          " it exceeds max_seq_len ", max_seq_len));
    }
    if (prompt.min_new_tokens() < 0) {
      return Invalid(worker, absl::StrCat("prompt ", prompt.id(), " has min_new_tokens ",
                                          prompt.min_new_tokens(), " (must be >= 0)"));
    }
    if (absl::Status s = CheckResume(prompt, n, max_new, worker); !s.ok()) return s;
  }
  return absl::OkStatus();
}

void TagVersions(const v1::Prompt& prompt, int64_t index, int64_t version, v1::Sample* sample) {
  sample->clear_token_versions();
  if (prompt.resume_size() == 0) {  // every sample of a fresh prompt
    sample->set_policy_version(version);
    return;
  }
  const v1::Sample& resumed = prompt.resume(static_cast<int>(index));
  std::vector<int64_t> versions;
  if (resumed.token_versions_size() > 0) {
    versions.assign(resumed.token_versions().begin(), resumed.token_versions().end());
  } else {
    versions.assign(resumed.response_tokens_size(), resumed.policy_version());
  }
  versions.resize(sample->response_tokens_size(), version);
  const auto [oldest, newest] = std::minmax_element(versions.begin(), versions.end());
  sample->set_policy_version(versions.empty() ? version : *oldest);
  if (!versions.empty() && *oldest != *newest) {
    sample->mutable_token_versions()->Add(versions.begin(), versions.end());
  }
}

}  // namespace trellis::actor::internal
