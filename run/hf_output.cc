#include "run/hf_output.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "config/worker_id.h"
#include "model/hf_export.h"
#include "model/hf_model.h"
#include "model/safetensors.h"
#include "model/token_ids.h"
#include "model/torch_status.h"

namespace trellis::run {

absl::Status ExportHfPolicy(const v1::JobConfig &job, const text::Tokenizer &tokenizer,
                            const env::RunDir &run) {
  model::HfModel source;
  source.dir = job.model().path();
  absl::StatusOr<model::HfConfig> hf_config = model::ReadHfConfig(source.dir);
  if (!hf_config.ok()) return hf_config.status();
  source.config = *std::move(hf_config);
  model::HfExportOptions options = model::HfExportOptionsFor(source);
  options.token_ids.bos = tokenizer.bos_id();
  options.token_ids.eos.assign(tokenizer.eos_ids().begin(), tokenizer.eos_ids().end());
  options.token_ids.pad = tokenizer.pad_id();

  const std::string policy = run.File(env::RunDir::kPolicy);
  absl::StatusOr<model::NamedTensors> weights = model::LoadSafetensors(policy);
  if (!weights.ok()) return weights.status();
  return model::TorchEdge(config::WorkerId(v1::LEARNER).ToString())
      .Call("export to Hugging Face", [&]() -> absl::Status {
        model::Transformer trained(job.model(),
                                   model::VocabSize(job.model(), tokenizer.vocab_size()),
                                   model::Head::kLanguageModel, v1::LoraConfig(),
                                   model::InitialValues::kOverwritten);
        if (absl::Status s = trained->LoadWeights(*weights); !s.ok()) {
          return absl::Status(s.code(), absl::StrCat(policy, ": ", s.message()));
        }
        return model::ExportHfModel(trained, options, run.File(env::RunDir::kHfPolicy));
      });
}

}  // namespace trellis::run
