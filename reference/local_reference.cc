#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "model/safetensors.h"
#include "model/token_batch.h"
#include "model/transformer.h"
#include "reference/reference_worker.h"

namespace trellis::reference {
namespace {

class LocalReference : public ReferenceWorker {
 public:
  LocalReference(const v1::ModelConfig& config, const model::Tokenizer* tokenizer,
                 double temperature, ledger::Ledger* ledger)
      : config_(config),
        tokenizer_(tokenizer),
        temperature_(temperature),
        ledger_(ledger) {}

  absl::Status Load(const std::string& weights_path) override {
    absl::StatusOr<model::NamedTensors> weights = model::LoadSafetensors(weights_path);
    if (!weights.ok()) return weights.status();
    model::Transformer model(config_, tokenizer_->vocab_size());
    model->eval();
    for (auto& p : model->parameters()) p.set_requires_grad(false);
    if (absl::Status s = model->LoadWeights(*weights); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat("reference weights ", weights_path,
                                                 ": ", s.message()));
    }
    if (ledger_ != nullptr) {
      int64_t bytes = 0;
      for (const auto& p : model->parameters()) bytes += p.nbytes();
      ledger_->RecordObject("reference-0", ledger::Object::kReferenceModel, bytes,
                            ledger::Stage::kLoad);
    }
    model_ = std::move(model);
    return absl::OkStatus();
  }

  absl::StatusOr<v1::LogProbResponse> LogProbs(
      const v1::LogProbRequest& request) override {
    if (model_.is_empty()) {
      return absl::FailedPreconditionError("reference: LogProbs before Load");
    }
    std::vector<model::SequencePair> pairs;
    pairs.reserve(request.samples_size());
    for (const auto& s : request.samples()) {
      pairs.push_back({s.prompt_tokens(), s.response_tokens()});
    }
    v1::LogProbResponse response;
    if (pairs.empty()) return response;
    absl::StatusOr<model::TokenBatch> batch =
        model::MakeTokenBatch(pairs, tokenizer_->pad_id(), config_.max_seq_len());
    if (!batch.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("reference: ", batch.status().message()));
    }
    torch::NoGradGuard no_grad;
    torch::Tensor logp = model::TargetLogProbs(model_, *batch, temperature_);
    for (int64_t i = 0; i < static_cast<int64_t>(pairs.size()); ++i) {
      std::vector<float> row = model::RowResponseValues(logp, *batch, i);
      response.add_sequences()->mutable_logprobs()->Add(row.begin(), row.end());
    }
    return response;
  }

 private:
  const v1::ModelConfig config_;
  const model::Tokenizer* tokenizer_;
  const double temperature_;
  ledger::Ledger* ledger_;
  model::Transformer model_{nullptr};
};

}  // namespace

std::unique_ptr<ReferenceWorker> NewLocalReference(const v1::ModelConfig& model,
                                                   const model::Tokenizer* tokenizer,
                                                   double temperature,
                                                   ledger::Ledger* ledger) {
  return std::make_unique<LocalReference>(model, tokenizer, temperature, ledger);
}

}  // namespace trellis::reference
