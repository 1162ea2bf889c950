// Loading a Hugging Face directory: the streaming load (model/hf_model.h
// LoadHfTransformer: memory-mapped shards copied tensor by tensor into the
// model's parameters) next to the eager one (LoadHfModel, every tensor read
// into memory, then NewHfTransformer copying them into the model), on a
// generated Llama-shaped checkpoint of about 1 GB in float32 shards.
//
//   hf_load_bench [--layers=16] [--shards=4] [--reps=2] [--cold] [--dir=D --keep]
//
// Each load runs in a fresh process (this binary with --load=stream|eager)
// so that its peak is its own: VmHWM is restarted (/proc/self/clear_refs
// "5") right before the load, and the peak increase is VmHWM after the load
// less VmRSS before it. The load runs inside a ledger span (Stage::kLoad,
// role "learner", ledger.jsonl beside the checkpoint) whose tracked peak
// (c10's CPU allocations) is reconciled against the objects reported:
// the parameters and, for the eager path, the tensors it staged
// (workspace). --cold drops the files from the page cache before each load
// (posix_fadvise DONTNEED), so the disk is read; otherwise they are cached.

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <regex>
#include <string>

#include <torch/torch.h>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "ledger/ledger.h"
#include "ledger/memory_tracker.h"
#include "model/hf_model.h"
#include "model/policy.h"
#include "model/testing/sharded_checkpoint.h"

ABSL_FLAG(int, layers, 16, "decoder layers (16: about 0.97 GB of float32 weights)");
ABSL_FLAG(int, shards, 4, "safetensors shards");
ABSL_FLAG(int, reps, 2, "loads per path (each in a fresh process)");
ABSL_FLAG(bool, cold, false, "drop the files from the page cache before each load");
ABSL_FLAG(std::string, dir, "", "checkpoint directory (default: a fresh temporary one)");
ABSL_FLAG(bool, keep, false, "keep the checkpoint directory");
ABSL_FLAG(std::string, load, "", "internal: load DIR once by this path (stream, eager)");

namespace trellis {
namespace {

namespace fs = std::filesystem;

// A field of /proc/self/status in bytes ("VmRSS", "VmHWM").
int64_t StatusBytes(const std::string& field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field + ":", 0) == 0) return std::stoll(line.substr(field.size() + 1)) * 1024;
  }
  return -1;
}

void DropFromPageCache(const std::string& dir) {
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().extension() != ".safetensors") continue;
    const int fd = ::open(entry.path().c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
  }
}

int64_t ParameterBytes(const model::Transformer& m) {
  int64_t bytes = 0;
  for (const auto& [name, p] : m->NamedWeights()) bytes += static_cast<int64_t>(p.nbytes());
  return bytes;
}

// The child: one load of `dir` by `path`; prints one RESULT line.
int LoadOnce(const std::string& path, const std::string& dir) {
  ledger::MemoryTracker::Install();
  if (absl::GetFlag(FLAGS_cold)) DropFromPageCache(dir);
  ledger::Ledger ledger;
  if (absl::Status s = ledger.Open(absl::StrCat(dir, "/ledger-", path, ".jsonl")); !s.ok()) {
    std::fprintf(stderr, "%s\n", s.ToString().c_str());
    return 1;
  }
  const int64_t rss_before = StatusBytes("VmRSS");
  const bool reset = static_cast<bool>(std::ofstream("/proc/self/clear_refs") << "5");
  model::HfLoadStats stats;
  ledger::Ledger::Span span = ledger.Begin(ledger::Stage::kLoad, "learner");
  absl::StatusOr<model::Transformer> loaded;
  if (path == "stream") {
    loaded = model::LoadHfTransformer(dir, {}, &stats);
  } else {
    absl::StatusOr<model::HfModel> hf = model::LoadHfModel(dir);
    if (!hf.ok()) loaded = hf.status();
    for (const auto& [name, t] : hf.ok() ? hf->weights : model::NamedTensors{}) {
      stats.file_bytes += static_cast<int64_t>(t.nbytes());
    }
    ledger.RecordObject("learner", ledger::Object::kWorkspace, stats.file_bytes,
                        ledger::Stage::kLoad);
    if (hf.ok()) loaded = model::NewHfTransformer(*hf);
  }
  if (!loaded.ok()) {
    std::fprintf(stderr, "%s\n", loaded.status().ToString().c_str());
    return 1;
  }
  ledger.RecordObject("learner", ledger::Object::kParameters, ParameterBytes(*loaded),
                      ledger::Stage::kLoad);
  const double seconds = span.End();
  const int64_t hwm = StatusBytes("VmHWM");
  ledger.RecordObject("learner", ledger::Object::kWorkspace, 0, ledger::Stage::kLoad);
  int64_t span_peak = 0, unattributed = 0;
  for (const ledger::PeakAttribution& peak : ledger.RolePeaks()) {
    if (peak.role != "learner") continue;
    span_peak = peak.measured_bytes;
    unattributed = peak.unattributed_bytes;
  }
  std::printf(
      "RESULT reset=%d weights=%lld peak_increase=%lld seconds=%.4f build=%.4f "
      "fill=%.4f ledger_peak=%lld unattributed=%lld\n",
      reset ? 1 : 0, static_cast<long long>(stats.file_bytes),
      static_cast<long long>(hwm - rss_before), seconds, stats.build_seconds, stats.fill_seconds,
      static_cast<long long>(span_peak), static_cast<long long>(unattributed));
  return 0;
}

// The Llama-shaped model: d_model 1024, 16 heads over 4 KV heads, d_ff
// 2816, vocabulary 32000, untied head.
// *build_seconds: building it with InitialValues::kDrawn (a fresh model).
absl::Status Generate(const std::string& dir, int64_t* bytes, double* build_seconds) {
  trellis::v1::ModelConfig c;
  c.set_d_model(1024);
  c.set_n_layers(absl::GetFlag(FLAGS_layers));
  c.set_n_heads(16);
  c.set_n_kv_heads(4);
  c.set_d_ff(2816);
  c.set_rope_theta(10000);
  c.set_rms_norm_eps(1e-5f);
  c.set_init_std(0.02f);
  const std::unique_lock<std::recursive_mutex> draws = model::LockInitialDraws();
  torch::manual_seed(0);
  const auto start = std::chrono::steady_clock::now();
  const model::Transformer m(c, /*vocab_size=*/32000);
  *build_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return model::testing::WriteShardedLlama(dir, *m, absl::GetFlag(FLAGS_shards), bytes);
}

std::map<std::string, double> RunChild(const std::string& self, const std::string& path,
                                       const std::string& dir) {
  const std::string command = absl::StrCat(self, " --load=", path, " --dir=", dir,
                                           absl::GetFlag(FLAGS_cold) ? " --cold" : "");
  FILE* pipe = ::popen(command.c_str(), "r");
  std::map<std::string, double> out;
  if (pipe == nullptr) return out;
  char line[1024];
  while (std::fgets(line, sizeof(line), pipe) != nullptr) {
    const std::string text(line);
    if (text.rfind("RESULT ", 0) != 0) continue;
    static const std::regex kField("(\\w+)=([-0-9.e]+)");
    for (std::sregex_iterator it(text.begin(), text.end(), kField), end; it != end; ++it) {
      out[(*it)[1]] = std::stod((*it)[2]);
    }
  }
  ::pclose(pipe);
  return out;
}

int Main() {
  std::string dir = absl::GetFlag(FLAGS_dir);
  const bool temporary = dir.empty();
  if (temporary)
    dir = absl::StrCat(fs::temp_directory_path().string(), "/hf_load_bench.", ::getpid());
  const std::string self = fs::read_symlink("/proc/self/exe").string();
  if (!fs::exists(dir + "/model.safetensors.index.json")) {
    int64_t bytes = 0;
    double drawn = 0;
    if (absl::Status s = Generate(dir, &bytes, &drawn); !s.ok()) {
      std::fprintf(stderr, "%s\n", s.ToString().c_str());
      return 1;
    }
    std::printf(
        "generated %s: %.1f MB of float32 weights in %d shards; building the model "
        "with drawn initial values (kDrawn) took %.2f s\n",
        dir.c_str(), bytes / 1e6, absl::GetFlag(FLAGS_shards), drawn);
  }
  std::printf("%-7s %-5s %10s %10s %8s %8s %7s %8s %8s %12s %10s\n", "path", "cache", "weights MB",
              "peak +MB", "peak/w", "load s", "GB/s", "build s", "fill s", "ledger peak",
              "unattr MB");
  for (int rep = 0; rep < absl::GetFlag(FLAGS_reps); ++rep) {
    for (const std::string path : {"stream", "eager"}) {
      std::map<std::string, double> r = RunChild(self, path, dir);
      if (r.empty()) {
        std::printf("%-7s failed (see stderr)\n", path.c_str());
        continue;
      }
      const double w = r["weights"];
      std::printf("%-7s %-5s %10.1f %10.1f %8.3f %8.3f %7.2f %8.3f %8.3f %12.1f %10.1f%s\n",
                  path.c_str(), absl::GetFlag(FLAGS_cold) ? "cold" : "warm", w / 1e6,
                  r["peak_increase"] / 1e6, r["peak_increase"] / w, r["seconds"],
                  w / r["seconds"] / 1e9, r["build"], r["fill"], r["ledger_peak"] / 1e6,
                  r["unattributed"] / 1e6, r["reset"] == 1 ? "" : " (VmHWM not reset)");
    }
  }
  if (temporary && !absl::GetFlag(FLAGS_keep)) fs::remove_all(dir);
  return 0;
}

}  // namespace
}  // namespace trellis

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const std::string load = absl::GetFlag(FLAGS_load);
  if (!load.empty()) return trellis::LoadOnce(load, absl::GetFlag(FLAGS_dir));
  return trellis::Main();
}
