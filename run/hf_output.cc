#include "run/hf_output.h"

#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "config/worker_id.h"
#include "env/env.h"
#include "model/hf_config.h"
#include "model/hf_export.h"
#include "model/lora.h"
#include "model/safetensors.h"
#include "model/token_ids.h"
#include "model/torch_status.h"

namespace trellis::run {
namespace {

// A float32 model of the job's shape (with `lora`'s adapters) holding the
// weights of `path` (its adapters alone with `lora`), exported by `write`;
// the file's tensors and the model's are the scheduler's workspace in
// `ledger` meanwhile.
template <typename Write>
absl::Status ExportFrom(const v1::JobConfig& job, const text::Tokenizer& tokenizer,
                        const v1::LoraConfig& lora, const std::string& path,
                        ledger::Ledger& ledger, Write write) {
  absl::StatusOr<model::NamedTensors> weights = model::LoadSafetensors(path);
  if (!weights.ok()) return weights.status();
  const std::string scheduler = config::WorkerId(v1::SCHEDULER).ToString();
  return model::TorchEdge(scheduler)
      .Call("export to Hugging Face", [&]() -> absl::Status {
        model::Transformer trained(
            job.model(), model::VocabSize(job.model(), tokenizer.vocab_size()),
            model::Head::kLanguageModel, lora, model::InitialValues::kOverwritten);
        // The adapters alone when exporting them: a sharded learner's
        // checkpoint keeps the base in its shards.
        model::NamedTensors adapters;
        for (const auto& [name, tensor] : *weights) {
          if (model::IsAdapterName(name)) adapters.emplace_back(name, tensor);
        }
        if (absl::Status s = lora.rank() > 0 ? trained->LoadAdapterWeights(adapters)
                                             : trained->LoadWeights(*weights);
            !s.ok()) {
          return absl::Status(s.code(), absl::StrCat(path, ": ", s.message()));
        }
        int64_t bytes = 0;
        for (const auto& [name, tensor] : *weights) bytes += tensor.nbytes();
        for (const torch::Tensor& p : trained->parameters()) bytes += p.nbytes();
        ledger.RecordObject(scheduler, ledger::Object::kWorkspace, bytes,
                            ledger::Stage::kCheckpoint);
        absl::Status written = write(trained);
        ledger.RecordObject(scheduler, ledger::Object::kWorkspace, 0, ledger::Stage::kCheckpoint);
        return written;
      });
}

}  // namespace

absl::Status ExportHfPolicy(const v1::JobConfig& job, const text::Tokenizer& tokenizer,
                            const env::RunDir& run, learner::LearnerWorker& learner,
                            ledger::Ledger& ledger) {
  const std::string& source = job.model().path();
  absl::StatusOr<model::HfConfig> hf_config = model::ReadHfConfig(source);
  if (!hf_config.ok()) return hf_config.status();
  model::HfExportOptions options = model::HfExportOptionsFor(source, *hf_config);
  options.token_ids.bos = tokenizer.bos_id();
  options.token_ids.eos.assign(tokenizer.eos_ids().begin(), tokenizer.eos_ids().end());
  options.token_ids.pad = tokenizer.pad_id();
  absl::Status s =
      ExportFrom(job, tokenizer, v1::LoraConfig(), run.File(env::RunDir::kPolicy), ledger,
                 [&](const model::Transformer& trained) {
                   return model::ExportHfModel(trained, options, run.File(env::RunDir::kHfPolicy));
                 });
  const v1::LoraConfig& lora = job.memory().lora();
  if (!s.ok() || lora.rank() <= 0) return s;

  // The adapters live in the learner's checkpoint, not in the merged
  // policy.safetensors.
  const std::string staged = run.File(absl::StrCat(env::RunDir::kHfAdapter, ".checkpoint"));
  env::Env* env = env::Env::Default();
  if (s = env->CreateDir(staged); !s.ok()) return s;
  model::PeftExportOptions peft;
  peft.base_model_name_or_path = source;
  peft.dtype = hf_config->dtype;
  s = learner.SaveCheckpoint(staged);
  if (s.ok()) {
    s = ExportFrom(job, tokenizer, lora, env::CheckpointDir(staged).Weights(), ledger,
                   [&](const model::Transformer& trained) {
                     return model::ExportPeftAdapters(trained, lora, peft,
                                                      run.File(env::RunDir::kHfAdapter));
                   });
  }
  const absl::Status removed = env->RemoveAll(staged);
  return s.ok() ? removed : s;
}

}  // namespace trellis::run
