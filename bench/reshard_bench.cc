// Weight sync that reshards (weightsync/reshard.h) against plain loopback
// TCP: a model-shaped layout of about 1 GB of fp32 (Llama-named blocks and
// an outer unit), N learner ranks holding flat shards, K tensor-parallel
// actor ranks, every rank a thread of this process over 127.0.0.1.
//
//   reshard_bench [--learners=2] [--actors=2] [--reps=5] [--bucket_mb=64] [--blocks=5]
//
// Each repetition publishes a new version from every learner rank (each
// on its own thread) while every actor rank is already waiting for it, and
// times from the first Publish to the last Receive (packing, the transfer,
// checksum verification and placing the pieces in the actor's slices). The
// baseline, timed beside each repetition: one plain TCP socket pair per
// (learner, actor) link, all at once, each moving what that link moves.
// Prints both throughputs (10^9 bytes/s over the bytes moved) and their
// ratio (medians; the first repetition, with its connections and first
// page faults, is not counted), and `uptime` before and after.

#include <ATen/ATen.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_format.h"
#include "bench/tcp_baseline.h"
#include "bench/timing.h"
#include "comm/tcp_store.h"
#include "config/threads.h"
#include "weightsync/reshard.h"
#include "weightsync/testing/reshard_model.h"

ABSL_FLAG(int, learners, 2, "learner ranks (N)");
ABSL_FLAG(int, actors, 2, "tensor-parallel actor ranks (K)");
ABSL_FLAG(int, reps, 5, "timed repetitions (after one untimed)");
ABSL_FLAG(int64_t, bucket_mb, 64, "bucket size in MiB");
ABSL_FLAG(int, blocks, 5, "transformer blocks (about 180 MB each, plus 134 MB outer)");
ABSL_FLAG(std::string, transport, "tcp", "the links' weight transport (tcp, gloo)");
ABSL_FLAG(bool, tcp, true, "time the TCP baseline (false: only the sync, for profiling it)");

namespace trellis::weightsync {
namespace {

using bench::Clock;
using bench::CpuSeconds;
using bench::Median;
using bench::Since;
using bench::TcpStreamsSeconds;

void Uptime(const char* when) {
  std::printf("uptime %s: ", when);
  std::fflush(stdout);
  if (std::system("uptime") != 0) std::printf("(uptime failed)\n");
}

int Main() {
  const int n_ranks = absl::GetFlag(FLAGS_learners);
  const int k_ranks = absl::GetFlag(FLAGS_actors);
  const testing::ModelShape shape{absl::GetFlag(FLAGS_blocks), 2048, 512, 5632, 8192};
  absl::StatusOr<ReshardPlan> made =
      ReshardPlan::Make(testing::ModelUnits(shape, n_ranks), k_ranks);
  if (!made.ok()) {
    std::fprintf(stderr, "%s\n", made.status().ToString().c_str());
    return 1;
  }
  auto plan = std::make_shared<const ReshardPlan>(*std::move(made));
  int64_t model_bytes = 0;
  for (const model::FlatUnit& u : plan->units()) model_bytes += u.numel * 4;
  ReshardOptions options;
  options.transport.host = "127.0.0.1";
  options.transport_name = absl::GetFlag(FLAGS_transport);
  options.transport.bucket_bytes = absl::GetFlag(FLAGS_bucket_mb) << 20;
  for (int i = 0; i < n_ranks * k_ranks; ++i) {
    absl::StatusOr<int> port = comm::PickFreeTcpPort("127.0.0.1");
    if (!port.ok()) return 1;
    options.ports.push_back(*port);
  }
  std::vector<std::unique_ptr<ReshardSender>> senders;
  std::vector<std::vector<at::Tensor>> shards(n_ranks);
  for (int n = 0; n < n_ranks; ++n) {
    auto s = ReshardSender::Start(plan, n, options);
    if (!s.ok()) {
      std::fprintf(stderr, "%s\n", s.status().ToString().c_str());
      return 1;
    }
    senders.push_back(*std::move(s));
    for (const model::FlatUnit& u : plan->units()) {
      shards[n].push_back(at::randn({u.shard_numel}));
    }
  }
  std::vector<std::unique_ptr<ReshardReceiver>> receivers;
  for (int k = 0; k < k_ranks; ++k) {
    auto r = ReshardReceiver::Start(plan, k, options);
    if (!r.ok()) return 1;
    receivers.push_back(*std::move(r));
  }
  // The baseline's buffers: one stream per link, the link's bytes.
  std::vector<std::vector<char>> src, dst;
  int64_t moved = 0;
  for (int n = 0; n < n_ranks; ++n) {
    for (int k = 0; k < k_ranks; ++k) {
      const int64_t bytes = plan->PairBytes(n, k);
      src.emplace_back(static_cast<size_t>(bytes), 1);
      dst.emplace_back(static_cast<size_t>(bytes), 0);
      moved += bytes;
    }
  }
  std::printf(
      "model %.0f MB fp32 (%zu units), N=%d learner ranks -> K=%d actor ranks, "
      "%lld MiB buckets; %.0f MB moved per version over %d %s links\n",
      model_bytes / 1e6, plan->units().size(), n_ranks, k_ranks,
      static_cast<long long>(absl::GetFlag(FLAGS_bucket_mb)), moved / 1e6, n_ranks * k_ranks,
      options.transport_name.c_str());
  Uptime("before");
  std::vector<double> sync_gbs, tcp_gbs, ratio, cpu, tcp_cpus;
  const int reps = absl::GetFlag(FLAGS_reps);
  for (int rep = 0; rep <= reps; ++rep) {
    const int64_t version = rep + 1;
    for (auto& rank : shards) rank[0].add_(1.0);  // A new version's weights.
    std::atomic<bool> ok{true};
    std::vector<double> pack(n_ranks);  // Each learner rank's links' packing and checksumming.
    const double cpu_start = CpuSeconds();
    const Clock::time_point start = Clock::now();
    {
      std::vector<std::jthread> threads;
      for (int k = 0; k < k_ranks; ++k) {
        threads.emplace_back([&, k] {
          absl::StatusOr<ReshardReceived> got = receivers[k]->Receive(version, absl::Seconds(600));
          if (!got.ok()) {
            std::fprintf(stderr, "actor rank %d: %s\n", k, got.status().ToString().c_str());
            ok = false;
          }
        });
      }
      for (int n = 0; n < n_ranks; ++n) {
        threads.emplace_back([&, n] {
          absl::StatusOr<v1::WeightSyncStats> s = senders[n]->Publish(version, shards[n]);
          if (s.ok()) pack[n] = s->gather_seconds() + s->transfer_seconds();
          if (!s.ok()) {
            std::fprintf(stderr, "learner rank %d: %s\n", n, s.status().ToString().c_str());
            ok = false;
          }
        });
      }
    }
    const double sync = Since(start);
    const double sync_cpu = CpuSeconds() - cpu_start;
    if (!ok) return 1;
    const double tcp_cpu_start = CpuSeconds();
    const double tcp = absl::GetFlag(FLAGS_tcp) ? TcpStreamsSeconds(src, dst) : sync;
    const double tcp_cpu = CpuSeconds() - tcp_cpu_start;
    std::printf(
        "rep %d%s: reshard %.2f s (%.2f GB/s; %.2f CPU s, packing %.2f), tcp %.2f s (%.2f GB/s; "
        "%.2f CPU s)\n",
        rep, rep == 0 ? " (untimed)" : "", sync, moved / sync / 1e9, sync_cpu,
        *std::max_element(pack.begin(), pack.end()), tcp, moved / tcp / 1e9, tcp_cpu);
    if (rep == 0) continue;
    sync_gbs.push_back(moved / sync / 1e9);
    tcp_gbs.push_back(moved / tcp / 1e9);
    ratio.push_back(tcp / sync);
    cpu.push_back(sync_cpu);
    tcp_cpus.push_back(tcp_cpu);
  }
  Uptime("after");
  std::printf(
      "median: reshard %.2f GB/s (%.2f CPU s), tcp (%d streams) %.2f GB/s (%.2f CPU s), "
      "reshard/tcp %.0f%%\n",
      Median(sync_gbs), Median(cpu), n_ranks * k_ranks, Median(tcp_gbs), Median(tcp_cpus),
      100 * Median(ratio));
  int64_t staged = 0;
  for (auto& s : senders) staged += s->StagedBytes();
  int64_t buckets = 0;
  for (auto& r : receivers) buckets += r->BucketBytes();
  std::printf(
      "held: learner shards %.0f MB each, staged buckets %.0f MB in all; actor slices "
      "%.0f MB each, link buckets %.0f MB in all\n",
      plan->ShardBytes() / 1e6, staged / 1e6, plan->SliceBytes(0) / 1e6, buckets / 1e6);
  return 0;
}

}  // namespace
}  // namespace trellis::weightsync

int main(int argc, char** argv) {
  // LibTorch's idle OpenMP threads sleep, as in every Trellis process.
  trellis::config::StartProcess(argv);
  absl::ParseCommandLine(argc, argv);
  return trellis::weightsync::Main();
}
