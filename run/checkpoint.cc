#include "run/checkpoint.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "env/run_dir.h"
#include "model/safetensors.h"

namespace trellis::run {
namespace {

using env::CheckpointDir;
using env::RunDir;
using nlohmann::json;

struct FileDigest {
  int64_t bytes = 0;
  std::string fnv1a64;  // 16 hex digits
};

// Size and FNV-1a-64 of a file's contents (detects truncation and
// corruption; not a defence against tampering).
absl::StatusOr<FileDigest> Digest(env::Env* env, const std::string& path) {
  absl::StatusOr<std::unique_ptr<env::SequentialFile>> in = env->OpenSequential(path);
  if (!in.ok()) return absl::DataLossError(absl::StrCat(path, ": missing or unreadable"));
  uint64_t h = 0xcbf29ce484222325ULL;
  FileDigest d;
  std::vector<char> buf(1 << 20);
  while (true) {
    absl::StatusOr<size_t> n = (*in)->Read(buf.data(), buf.size());
    if (!n.ok()) return absl::DataLossError(n.status().message());
    if (*n == 0) break;
    for (size_t i = 0; i < *n; ++i) {
      h ^= static_cast<unsigned char>(buf[i]);
      h *= 0x100000001b3ULL;
    }
    d.bytes += static_cast<int64_t>(*n);
  }
  d.fnv1a64 = absl::StrFormat("%016x", h);
  return d;
}

// `s` with "checkpoint: " before its message.
absl::Status InCheckpoint(const absl::Status& s) {
  if (s.ok()) return s;
  return absl::Status(s.code(), absl::StrCat("checkpoint: ", s.message()));
}

json DigestJson(const FileDigest& d) { return {{"bytes", d.bytes}, {"fnv1a64", d.fnv1a64}}; }

// Checks `path` against a {"bytes", "fnv1a64"} entry; `part` names it.
absl::Status CheckFile(env::Env* env, const std::string& path, const json& expected,
                       const std::string& part) {
  if (!env->Exists(path)) {
    return absl::DataLossError(absl::StrCat("checkpoint part ", part, ": ", path, " is missing"));
  }
  absl::StatusOr<FileDigest> got = Digest(env, path);
  if (!got.ok()) return got.status();
  const int64_t bytes = expected.at("bytes").get<int64_t>();
  if (got->bytes != bytes) {
    return absl::DataLossError(absl::StrCat("checkpoint part ", part, ": ", path, " has ",
                                            got->bytes, " bytes, expected ", bytes,
                                            " (truncated or replaced)"));
  }
  const std::string hash = expected.at("fnv1a64").get<std::string>();
  if (got->fnv1a64 != hash) {
    return absl::DataLossError(absl::StrCat("checkpoint part ", part, ": ", path,
                                            " has hash ", got->fnv1a64, ", expected ", hash,
                                            " (corrupted)"));
  }
  return absl::OkStatus();
}

// With the unscored prompts of a rollout evaluation, so that a resumed
// run's headline still marks an incomplete one.
json EvalJson(const ledger::EvalMetrics& e) {
  json j = {{"prompts", e.prompts}, {"accuracy", e.accuracy}, {"mean_reward", e.mean_reward}};
  if (e.unscored.has_value()) j["unscored"] = *e.unscored;
  return j;
}

}  // namespace

absl::Status WriteCheckpoint(
    env::Env* env, const std::string& run_dir, const LoopState& state,
    const std::function<absl::Status(const std::string& dir)>& write_learner) {
  const RunDir run(run_dir);
  const std::string name = RunDir::CheckpointName(state.next_step);
  const CheckpointDir tmp = run.CheckpointInProgress(state.next_step);
  const std::string final_dir = run.Checkpoint(state.next_step).path();
  if (absl::Status s = env->RemoveAll(tmp.path()); !s.ok()) return InCheckpoint(s);
  if (absl::Status s = env->CreateDir(tmp.path()); !s.ok()) return InCheckpoint(s);
  if (absl::Status s = write_learner(tmp.path()); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat("checkpoint ", name, ": ", s.message()));
  }
  try {
    at::Generator gen = at::detail::getDefaultCPUGenerator();
    torch::Tensor rng;
    {
      std::lock_guard<std::mutex> lock(gen.mutex());
      rng = gen.get_state();
    }
    if (absl::Status s = model::SaveSafetensors(tmp.Rng(), {{"cpu", rng}}); !s.ok()) {
      return s;
    }
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("checkpoint ", name, ": saving the RNG state: ",
                                            e.what_without_backtrace()));
  }

  json j;
  j["format"] = kCheckpointFormat;
  j["step"] = state.next_step;
  j["policy_version"] = state.policy_version;
  j["seed"] = state.seed;
  j["sft_position"] = state.sft_position;
  j["train_position"] = state.train_position;
  j["train_in_flight"] = state.train_in_flight;
  j["eval_before"] = EvalJson(state.eval_before);
  const ledger::PromptAccount& account = state.prompt_account;
  j["prompt_account"] = {
      {"drawn", account.drawn}, {"trained", account.trained}, {"dropped", account.dropped}};
  j["ledger"] = json::parse(state.ledger_state.empty() ? "null" : state.ledger_state);
  json files = json::object();
  absl::StatusOr<std::vector<std::string>> names = env->ListDir(tmp.path());
  if (!names.ok()) return InCheckpoint(names.status());
  for (const std::string& file : *names) {
    absl::StatusOr<FileDigest> d = Digest(env, tmp.File(file));
    if (!d.ok()) return d.status();
    files[file] = DigestJson(*d);
    if (absl::Status s = env->Sync(tmp.File(file)); !s.ok()) return InCheckpoint(s);
  }
  j["files"] = files;
  json run_files = json::object();
  if (env->Exists(run.Reference())) {
    absl::StatusOr<FileDigest> d = Digest(env, run.Reference());
    if (!d.ok()) return d.status();
    run_files[RunDir::kReference] = DigestJson(*d);
  }
  j["run_files"] = run_files;
  if (absl::Status s = env->WriteFileAtomically(tmp.State(), j.dump(2) + "\n"); !s.ok()) {
    return InCheckpoint(s);
  }
  if (absl::Status s = env->Sync(tmp.path()); !s.ok()) return InCheckpoint(s);
  if (absl::Status s = env->RemoveAll(final_dir); !s.ok()) return InCheckpoint(s);
  if (absl::Status s = env->Rename(tmp.path(), final_dir); !s.ok()) return InCheckpoint(s);
  if (absl::Status s = env->Sync(run.Checkpoints()); !s.ok()) return InCheckpoint(s);
  if (absl::Status s = env->WriteFileAtomically(run.LatestCheckpoint(), name + "\n"); !s.ok()) {
    return InCheckpoint(s);
  }
  return InCheckpoint(env->Sync(run.Checkpoints()));
}

absl::StatusOr<Checkpoint> ReadLatestCheckpoint(env::Env* env, const std::string& run_dir) {
  const RunDir run(run_dir);
  const std::string latest_path = run.LatestCheckpoint();
  if (!env->Exists(latest_path)) {
    return absl::NotFoundError(absl::StrCat(
        "no checkpoint to resume from: ", latest_path,
        " does not exist (was runtime.checkpoint_every set, and did the run reach it?)"));
  }
  absl::StatusOr<std::string> latest = env->ReadFile(latest_path);
  if (!latest.ok()) return absl::DataLossError(latest.status().message());
  const std::string line(absl::StripSuffix(*latest, "\n"));
  absl::string_view name = line;
  int64_t named_step = 0;
  if (!absl::ConsumePrefix(&name, "step_") || !absl::SimpleAtoi(name, &named_step)) {
    return absl::DataLossError(absl::StrCat("checkpoint part latest: ", latest_path,
                                            ": expected \"step_<N>\", found \"", line, "\""));
  }
  Checkpoint ckpt;
  const CheckpointDir dir = run.Checkpoint(named_step);
  ckpt.dir = dir.path();
  const std::string state_path = dir.State();
  absl::StatusOr<std::string> text = env->ReadFile(state_path);
  if (!text.ok()) {
    return absl::DataLossError(
        absl::StrCat("checkpoint part state.json: ", state_path, " is missing"));
  }
  std::string field = "(the text)";
  try {
    const json j = json::parse(*text);
    field = "format";
    const int format = j.at(field).get<int>();
    if (format != kCheckpointFormat) {
      return absl::FailedPreconditionError(absl::StrCat(
          "checkpoint part state.json: ", state_path, ": format ", format,
          ", this build reads format ", kCheckpointFormat));
    }
    LoopState& s = ckpt.state;
    field = "step";
    s.next_step = j.at(field).get<int64_t>();
    if (s.next_step != named_step) {
      return absl::DataLossError(absl::StrCat("checkpoint part state.json: ", state_path,
                                              ": step ", s.next_step, ", but the directory is step_",
                                              named_step));
    }
    field = "policy_version";
    s.policy_version = j.at(field).get<int64_t>();
    field = "seed";
    s.seed = j.at(field).get<uint64_t>();
    field = "sft_position";
    s.sft_position = j.at(field).get<uint64_t>();
    field = "train_position";
    s.train_position = j.at(field).get<uint64_t>();
    field = "train_in_flight";  // absent before partial rollout
    if (j.contains(field)) s.train_in_flight = j.at(field).get<std::vector<uint64_t>>();
    field = "eval_before";
    const json& e = j.at(field);
    s.eval_before = {e.at("prompts").get<int64_t>(), e.at("accuracy").get<double>(),
                     e.at("mean_reward").get<double>()};
    if (e.contains("unscored")) s.eval_before.unscored = e.at("unscored").get<int64_t>();
    field = "prompt_account";  // absent before the asynchronous pipeline
    if (j.contains(field)) {
      const json& a = j.at(field);
      s.prompt_account.drawn = a.at("drawn").get<int64_t>();
      s.prompt_account.trained = a.at("trained").get<int64_t>();
      s.prompt_account.dropped = a.at("dropped").get<std::map<std::string, int64_t>>();
      s.prompt_account.in_flight = static_cast<int64_t>(s.train_in_flight.size());
    }
    field = "ledger";
    s.ledger_state = j.at(field).dump();
    field = "files";
    // The policy whole, or as a sharded learner group's shards.
    const char* policy = j.at(field).contains(CheckpointDir::kShardsIndex)
                             ? CheckpointDir::kShardsIndex
                             : CheckpointDir::kWeights;
    for (const char* required : {policy, CheckpointDir::kOptimizer, CheckpointDir::kRng}) {
      if (!j.at(field).contains(required)) {
        return absl::DataLossError(absl::StrCat("checkpoint part ", required, ": ", state_path,
                                                " does not list it"));
      }
    }
    for (const auto& [file, digest] : j.at(field).items()) {
      if (absl::Status st = CheckFile(env, dir.File(file), digest, file); !st.ok()) return st;
    }
    field = "run_files";
    for (const auto& [file, digest] : j.at(field).items()) {
      if (absl::Status st = CheckFile(env, run.File(file), digest, file); !st.ok()) return st;
    }
  } catch (const json::exception& e) {
    return absl::DataLossError(absl::StrCat("checkpoint part state.json: ", state_path,
                                            ": field ", field, ": ", e.what()));
  }
  return ckpt;
}

absl::Status RestoreGlobalRng(const std::string& dir) {
  const std::string path = CheckpointDir(dir).Rng();
  absl::StatusOr<model::NamedTensors> tensors = model::LoadSafetensors(path);
  if (!tensors.ok()) return tensors.status();
  if (tensors->size() != 1 || tensors->front().first != "cpu") {
    return absl::FailedPreconditionError(
        absl::StrCat("checkpoint part ", CheckpointDir::kRng, ": ", path, ": expected one tensor \"cpu\""));
  }
  try {
    at::Generator gen = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(gen.mutex());
    gen.set_state(tensors->front().second);
  } catch (const c10::Error& e) {
    return absl::FailedPreconditionError(absl::StrCat("checkpoint part ", CheckpointDir::kRng, ": ", path,
                                                      ": ", e.what_without_backtrace()));
  }
  return absl::OkStatus();
}

}  // namespace trellis::run
