#include "run/checkpoint.h"

#include "data/text_file.h"

#include <ATen/CPUGeneratorImpl.h>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <vector>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "model/safetensors.h"

namespace trellis::run {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr char kRngFile[] = "rng.safetensors";
constexpr char kStateFile[] = "state.json";
constexpr char kReferenceFile[] = "reference.safetensors";

struct FileDigest {
  int64_t bytes = 0;
  std::string fnv1a64;  // 16 hex digits
};

// Size and FNV-1a-64 of a file's contents (detects truncation and
// corruption; not a defence against tampering).
absl::StatusOr<FileDigest> Digest(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in.is_open()) return absl::DataLossError(absl::StrCat(path, ": missing or unreadable"));
  uint64_t h = 0xcbf29ce484222325ULL;
  FileDigest d;
  std::vector<char> buf(1 << 20);
  while (in) {
    in.read(buf.data(), buf.size());
    const std::streamsize n = in.gcount();
    for (std::streamsize i = 0; i < n; ++i) {
      h ^= static_cast<unsigned char>(buf[i]);
      h *= 0x100000001b3ULL;
    }
    d.bytes += n;
  }
  if (in.bad()) return absl::DataLossError(absl::StrCat(path, ": read error"));
  d.fnv1a64 = absl::StrFormat("%016x", h);
  return d;
}

absl::Status FsyncPath(const std::string& path, bool directory) {
  const int fd = ::open(path.c_str(), (directory ? O_RDONLY | O_DIRECTORY : O_RDONLY) | O_CLOEXEC);
  if (fd < 0) return absl::ErrnoToStatus(errno, absl::StrCat("checkpoint: cannot open ", path));
  const bool ok = ::fsync(fd) == 0;
  const int error = errno;
  ::close(fd);
  if (!ok) return absl::ErrnoToStatus(error, absl::StrCat("checkpoint: fsync ", path));
  return absl::OkStatus();
}

// Writes `text` to path via path.tmp + fsync + rename.
absl::Status WriteAtomically(const std::string& path, const std::string& text) {
  absl::Status s = data::WriteTextFileAtomically(path, text);
  if (s.ok()) return s;
  return absl::Status(s.code(), absl::StrCat("checkpoint: ", s.message()));
}

json DigestJson(const FileDigest& d) { return {{"bytes", d.bytes}, {"fnv1a64", d.fnv1a64}}; }

// Checks `path` against a {"bytes", "fnv1a64"} entry; `part` names it.
absl::Status CheckFile(const std::string& path, const json& expected, const std::string& part) {
  if (!fs::exists(path)) {
    return absl::DataLossError(absl::StrCat("checkpoint part ", part, ": ", path, " is missing"));
  }
  absl::StatusOr<FileDigest> got = Digest(path);
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

json EvalJson(const ledger::EvalMetrics& e) {
  return {{"prompts", e.prompts}, {"accuracy", e.accuracy}, {"mean_reward", e.mean_reward}};
}

}  // namespace

absl::Status WriteCheckpoint(
    const std::string& run_dir, const LoopState& state,
    const std::function<absl::Status(const std::string& dir)>& write_learner) {
  const std::string root = run_dir + "/checkpoints";
  const std::string name = absl::StrCat("step_", state.next_step);
  const std::string tmp = absl::StrCat(root, "/.tmp_", name);
  const std::string final_dir = absl::StrCat(root, "/", name);
  std::error_code ec;
  fs::remove_all(tmp, ec);
  fs::create_directories(tmp, ec);
  if (ec) return absl::InternalError(absl::StrCat("checkpoint: cannot create ", tmp, ": ",
                                                  ec.message()));
  if (absl::Status s = write_learner(tmp); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat("checkpoint ", name, ": ", s.message()));
  }
  try {
    at::Generator gen = at::detail::getDefaultCPUGenerator();
    torch::Tensor rng;
    {
      std::lock_guard<std::mutex> lock(gen.mutex());
      rng = gen.get_state();
    }
    if (absl::Status s = model::SaveSafetensors(tmp + "/" + kRngFile, {{"cpu", rng}}); !s.ok()) {
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
  j["eval_before"] = EvalJson(state.eval_before);
  j["ledger"] = json::parse(state.ledger_state.empty() ? "null" : state.ledger_state);
  json files = json::object();
  for (const auto& entry : fs::directory_iterator(tmp)) {
    const std::string file = entry.path().filename().string();
    absl::StatusOr<FileDigest> d = Digest(entry.path().string());
    if (!d.ok()) return d.status();
    files[file] = DigestJson(*d);
    if (absl::Status s = FsyncPath(entry.path().string(), false); !s.ok()) return s;
  }
  j["files"] = files;
  json run_files = json::object();
  const std::string reference = run_dir + "/" + kReferenceFile;
  if (fs::exists(reference)) {
    absl::StatusOr<FileDigest> d = Digest(reference);
    if (!d.ok()) return d.status();
    run_files[kReferenceFile] = DigestJson(*d);
  }
  j["run_files"] = run_files;
  if (absl::Status s = WriteAtomically(tmp + "/" + kStateFile, j.dump(2) + "\n"); !s.ok()) {
    return s;
  }
  if (absl::Status s = FsyncPath(tmp, true); !s.ok()) return s;
  fs::remove_all(final_dir, ec);
  if (std::rename(tmp.c_str(), final_dir.c_str()) != 0) {
    return absl::ErrnoToStatus(errno,
                               absl::StrCat("checkpoint: renaming ", tmp, " to ", final_dir));
  }
  if (absl::Status s = FsyncPath(root, true); !s.ok()) return s;
  if (absl::Status s = WriteAtomically(root + "/latest", name + "\n"); !s.ok()) return s;
  return FsyncPath(root, true);
}

absl::StatusOr<Checkpoint> ReadLatestCheckpoint(const std::string& run_dir) {
  const std::string root = run_dir + "/checkpoints";
  const std::string latest_path = root + "/latest";
  std::ifstream latest(latest_path);
  if (!latest.is_open()) {
    return absl::NotFoundError(absl::StrCat(
        "no checkpoint to resume from: ", latest_path,
        " does not exist (was runtime.checkpoint_every set, and did the run reach it?)"));
  }
  std::string line;
  std::getline(latest, line);
  absl::string_view name = line;
  int64_t named_step = 0;
  if (!absl::ConsumePrefix(&name, "step_") || !absl::SimpleAtoi(name, &named_step)) {
    return absl::DataLossError(absl::StrCat("checkpoint part latest: ", latest_path,
                                            ": expected \"step_<N>\", found \"", line, "\""));
  }
  Checkpoint ckpt;
  ckpt.dir = absl::StrCat(root, "/step_", named_step);
  const std::string state_path = ckpt.dir + "/" + kStateFile;
  std::ifstream in(state_path);
  if (!in.is_open()) {
    return absl::DataLossError(
        absl::StrCat("checkpoint part state.json: ", state_path, " is missing"));
  }
  std::stringstream text;
  text << in.rdbuf();
  std::string field = "(the text)";
  try {
    const json j = json::parse(text.str());
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
    field = "eval_before";
    const json& e = j.at(field);
    s.eval_before = {e.at("prompts").get<int64_t>(), e.at("accuracy").get<double>(),
                     e.at("mean_reward").get<double>()};
    field = "ledger";
    s.ledger_state = j.at(field).dump();
    field = "files";
    for (const char* required : {"weights.safetensors", "optimizer.safetensors", kRngFile}) {
      if (!j.at(field).contains(required)) {
        return absl::DataLossError(absl::StrCat("checkpoint part ", required, ": ", state_path,
                                                " does not list it"));
      }
    }
    for (const auto& [file, digest] : j.at(field).items()) {
      if (absl::Status st = CheckFile(ckpt.dir + "/" + file, digest, file); !st.ok()) return st;
    }
    field = "run_files";
    for (const auto& [file, digest] : j.at(field).items()) {
      if (absl::Status st = CheckFile(run_dir + "/" + file, digest, file); !st.ok()) return st;
    }
  } catch (const json::exception& e) {
    return absl::DataLossError(absl::StrCat("checkpoint part state.json: ", state_path,
                                            ": field ", field, ": ", e.what()));
  }
  return ckpt;
}

absl::Status RestoreGlobalRng(const std::string& dir) {
  const std::string path = dir + "/" + kRngFile;
  absl::StatusOr<model::NamedTensors> tensors = model::LoadSafetensors(path);
  if (!tensors.ok()) return tensors.status();
  if (tensors->size() != 1 || tensors->front().first != "cpu") {
    return absl::FailedPreconditionError(
        absl::StrCat("checkpoint part ", kRngFile, ": ", path, ": expected one tensor \"cpu\""));
  }
  try {
    at::Generator gen = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(gen.mutex());
    gen.set_state(tensors->front().second);
  } catch (const c10::Error& e) {
    return absl::FailedPreconditionError(absl::StrCat("checkpoint part ", kRngFile, ": ", path,
                                                      ": ", e.what_without_backtrace()));
  }
  return absl::OkStatus();
}

}  // namespace trellis::run
