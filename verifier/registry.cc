// VerifierRegistry and the in-process VerifierClient.

#include <exception>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
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
  if (verifier.ok() && *verifier == nullptr) {
    return absl::InternalError(
        absl::StrCat("verifier \"", config.name(), "\": factory returned null"));
  }
  return verifier;
}

bool VerifierRegistry::Contains(const std::string& name) const {
  return factories_.count(name) > 0;
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
    v1::VerifyResponse response;
    response.mutable_results()->Reserve(request.items_size());
    for (const v1::VerifyItem& item : request.items()) {
      v1::VerifyResult* result = response.add_results();
      // Verify() must not throw; a plugin that does fails only its item.
      try {
        *result = verifier_->Verify(item);
      } catch (const std::exception& e) {
        result->Clear();
        result->set_verdict(v1::ERROR);
        result->set_detail(absl::StrCat("verifier threw: ", e.what()));
      }
    }
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
