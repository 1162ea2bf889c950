// VerifierRegistry and the in-process VerifierClient.

#include <exception>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "verifier/pool.h"
#include "verifier/verifier.h"

namespace trellis::verifier {

absl::Status VerifierRegistry::Register(const std::string& name, VerifierFactory factory) {
  if (name.empty()) return absl::InvalidArgumentError("verifier name is empty");
  if (!factory) {
    return absl::InvalidArgumentError(absl::StrCat("verifier \"", name, "\": null factory"));
  }
  if (!factories_.emplace(name, std::move(factory)).second) {
    return absl::AlreadyExistsError(
        absl::StrCat("verifier \"", name, "\" is already registered"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Verifier>> VerifierRegistry::Create(
    const v1::VerifierConfig& config) const {
  auto it = factories_.find(config.name());
  if (it == factories_.end()) {
    std::vector<std::string> known;
    for (const auto& [name, factory] : factories_) known.push_back(name);
    return absl::NotFoundError(
        absl::StrCat("verifier.name: unknown verifier \"", config.name(),
                     "\"; registered verifiers: ",
                     known.empty() ? "(none)" : absl::StrJoin(known, ", ")));
  }
  absl::StatusOr<std::unique_ptr<Verifier>> verifier = it->second(config);
  if (!verifier.ok()) return verifier.status();
  if (*verifier == nullptr) {
    return absl::InternalError(
        absl::StrCat("verifier \"", config.name(), "\": factory returned null"));
  }
  return NewVerifierPool(*std::move(verifier), config);
}

bool VerifierRegistry::Contains(const std::string& name) const {
  return factories_.count(name) > 0;
}

std::vector<v1::VerifyResult> Verifier::VerifyBatch(
    const google::protobuf::RepeatedPtrField<v1::VerifyItem>& items) const {
  std::vector<v1::VerifyResult> results(items.size());
  for (int i = 0; i < items.size(); ++i) {
    // Verify() must not throw; a plugin that does fails only its item.
    try {
      results[i] = Verify(items[i]);
    } catch (const std::exception& e) {
      results[i].Clear();
      results[i].set_verdict(v1::ERROR);
      results[i].set_detail(absl::StrCat("verifier threw: ", e.what()));
    }
  }
  return results;
}

namespace {

class LocalVerifierClient : public VerifierClient {
 public:
  explicit LocalVerifierClient(std::unique_ptr<Verifier> verifier)
      : verifier_(std::move(verifier)) {}

  absl::StatusOr<v1::VerifyResponse> Verify(const v1::VerifyRequest& request) override {
    if (verifier_ == nullptr) {
      return absl::FailedPreconditionError("local verifier client has no verifier");
    }
    v1::VerifierStats stats;
    std::vector<v1::VerifyResult> results =
        verifier_->VerifyBatchWithStats(request.items(), &stats);
    if (results.size() != static_cast<size_t>(request.items_size())) {
      return absl::InternalError(absl::StrCat("verifier returned ", results.size(),
                                              " results for ", request.items_size(), " items"));
    }
    v1::VerifyResponse response;
    response.mutable_results()->Reserve(request.items_size());
    for (v1::VerifyResult& r : results) *response.add_results() = std::move(r);
    if (!stats.verifier().empty()) *response.add_stats() = std::move(stats);
    return response;
  }

 private:
  std::unique_ptr<Verifier> verifier_;
};

}  // namespace

std::unique_ptr<VerifierClient> NewLocalVerifierClient(std::unique_ptr<Verifier> verifier) {
  return std::make_unique<LocalVerifierClient>(std::move(verifier));
}

}  // namespace trellis::verifier
