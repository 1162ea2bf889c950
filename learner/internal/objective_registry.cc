#include <algorithm>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "learner/internal/objective.h"

namespace trellis::learner::internal {
namespace {

const char* BatchKindName(BatchKind kind) {
  static constexpr const char* kNames[] = {"SFT", "train", "preference"};
  return kNames[static_cast<int>(kind)];
}

std::string KeyName(const ObjectiveKey& key) {
  return absl::StrCat(BatchKindName(key.batch), " batches under ",
                      key.recipe
                          ? absl::StrCat("recipe ", std::string(config::RecipeName(*key.recipe)))
                          : std::string("every recipe"));
}

}  // namespace

BatchKind KindOf(const BatchRef& batch) { return static_cast<BatchKind>(batch.index()); }

absl::StatusOr<model::TokenBatch> ObjectiveInput::Tokens(
    const std::vector<model::SequencePair>& pairs) const {
  return model::MakeTokenBatch(pairs, pad_id, job->model().max_seq_len());
}

absl::Status Objective::Complete(UpdateEngine& engine, v1::TrainStats* stats) {
  return absl::OkStatus();
}

absl::Status ObjectiveRegistry::Register(ObjectiveKey key, ObjectiveFactory factory) {
  if (!factories_.try_emplace({key.batch, key.recipe}, std::move(factory)).second) {
    return absl::AlreadyExistsError(
        absl::StrCat("an objective for ", KeyName(key), " is registered already"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Objective>> ObjectiveRegistry::New(
    std::optional<config::Recipe> recipe, const ObjectiveInput& input) const {
  const BatchKind kind = KindOf(input.batch);
  auto it = factories_.find({kind, recipe});
  if (it == factories_.end()) it = factories_.find({kind, std::nullopt});
  if (it == factories_.end()) {
    return absl::NotFoundError(absl::StrCat(input.worker_id, ": no objective registered for ",
                                            KeyName({kind, recipe}), " or every recipe"));
  }
  return it->second(input);
}

absl::Status AtRows(const absl::Status& status, const std::string& worker_id, int64_t begin,
                    int64_t end) {
  return absl::Status(status.code(), absl::StrCat(worker_id, ": rows [", begin, ", ", end,
                                                  "): ", status.message()));
}

int64_t MicroBatchRows(const v1::JobConfig& job) {
  return std::max(1, job.grpo().micro_batch_size());
}

}  // namespace trellis::learner::internal
