// VerifierRegistry and the in-process VerifierClient.

#include <exception>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "config/printable.h"
#include "verifier/pool.h"
#include "verifier/verifier.h"

namespace trellis::verifier {

absl::Status VerifierRegistry::Register(const std::string& name, VerifierFactory factory,
                                        VerifierCheck check) {
  if (name.empty()) return absl::InvalidArgumentError("verifier name is empty");
  if (!factory) {
    return absl::InvalidArgumentError(absl::StrCat("verifier \"", name, "\": null factory"));
  }
  if (!kinds_.emplace(name, Kind{std::move(factory), std::move(check)}).second) {
    return absl::AlreadyExistsError(
        absl::StrCat("verifier \"", name, "\" is already registered"));
  }
  return absl::OkStatus();
}

absl::Status VerifierRegistry::Check(const v1::VerifierConfig& config) const {
  auto it = kinds_.find(config.name());
  if (it == kinds_.end()) {
    std::vector<std::string> known;
    for (const auto& [name, kind] : kinds_) known.push_back(name);
    return absl::InvalidArgumentError(
        absl::StrCat("verifier.name: unknown verifier \"", config::Printable(config.name(), 60),
                     "\"; registered verifiers: ",
                     known.empty() ? "(none)" : absl::StrJoin(known, ", ")));
  }
  return it->second.check ? it->second.check(config) : absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Verifier>> VerifierRegistry::Create(
    const v1::VerifierConfig& config) const {
  if (absl::Status s = Check(config); !s.ok()) return s;
  absl::StatusOr<std::unique_ptr<Verifier>> verifier = kinds_.at(config.name()).factory(config);
  if (!verifier.ok()) return verifier.status();
  if (*verifier == nullptr) {
    return absl::InternalError(
        absl::StrCat("verifier \"", config.name(), "\": factory returned null"));
  }
  return NewVerifierPool(*std::move(verifier), config);
}

namespace {

std::vector<VerifierKinds>& AddedKinds() {
  static auto* kinds = new std::vector<VerifierKinds>();
  return *kinds;
}

}  // namespace

void AddProcessVerifierKinds(VerifierKinds kinds) { AddedKinds().push_back(std::move(kinds)); }

absl::StatusOr<VerifierRegistry> ProcessVerifiers() {
  VerifierRegistry registry;
  if (absl::Status s = RegisterBuiltinVerifiers(registry); !s.ok()) return s;
  for (const VerifierKinds& kinds : AddedKinds()) {
    if (absl::Status s = kinds(registry); !s.ok()) return s;
  }
  return registry;
}

bool VerifierRegistry::Contains(const std::string& name) const {
  return kinds_.count(name) > 0;
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
