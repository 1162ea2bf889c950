// Weight-sync throughput: inprocess, gloo and grpc transports against plain
// loopback TCP, sender and receiver in this process over 127.0.0.1.
//
//   weightsync_bench [--max_mb=1024] [--reps=5] [--bucket_mb=64]
//   weightsync_bench --gpu   (GPU transports against the device copy peak:
//                             weightsync_gpu.h)
//
// For each size and transport, every repetition publishes the same
// tensors (changed in place) as new versions and times Publish alone,
// Publish then Receive, and Publish with the receiver already waiting (end
// to end: the network transfer, checksum verification and the load into
// the receiver's tensors, overlapping the packing where the transport
// streams); medians are printed as GB/s (1e9 bytes/s), with the TCP
// baseline measured in the same run by a socket sender/receiver thread
// pair moving the same bytes (bench/tcp_baseline.h).

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_format.h"
#include "bench/tcp_baseline.h"
#include "bench/timing.h"
#include "bench/weightsync_gpu.h"
#include "comm/tcp_store.h"
#include "rpc/channel.h"
#include "rpc/server.h"
#include "weightsync/grpc_transport.h"
#include "weightsync/registry.h"

ABSL_FLAG(int64_t, max_mb, 1000, "largest size to run, in MB (1e6 bytes)");
ABSL_FLAG(int, reps, 5, "timed repetitions per size and transport");
ABSL_FLAG(int64_t, bucket_mb, 64, "transport bucket size in MiB");
ABSL_FLAG(std::string, only, "", "run one transport: inprocess, gloo, grpc");
ABSL_FLAG(bool, gpu, false, "run the GPU transports (cuda_ipc, nccl) against the D2D copy peak");

namespace trellis::weightsync {
namespace {

using bench::Clock;
using bench::Median;
using bench::Since;

// CPU seconds of the calling thread (user + system).
double ThreadCpuSeconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) / 1e9;
}

// `bytes` of float32 weights in tensors of at most 16 MB, like a model's
// layers.
NamedTensors MakeWeights(int64_t bytes, float value) {
  NamedTensors w;
  const int64_t per = 4'000'000;  // floats: 16 MB
  int64_t left = bytes / 4;
  for (int i = 0; left > 0; ++i) {
    const int64_t n = std::min(per, left);
    w.emplace_back("layer" + std::to_string(i), torch::full({n}, value));
    left -= n;
  }
  return w;
}

NamedTensors Like(const NamedTensors& src) {
  NamedTensors d;
  for (const auto& [name, t] : src) d.emplace_back(name, torch::zeros_like(t));
  return d;
}

// ---- plain TCP over loopback: the baseline.

// Buffers for the baseline, faulted in once.
struct Tcp {
  explicit Tcp(int64_t bytes)
      : src{std::vector<char>(static_cast<size_t>(bytes), 1)},
        dst{std::vector<char>(static_cast<size_t>(bytes), 0)} {
    Seconds();
  }
  double Seconds() { return bench::TcpStreamsSeconds(src, dst); }
  std::vector<std::vector<char>> src, dst;  // One stream.
};

// ---- transports.

struct Result {
  double tcp_gbps = 0;          // bytes / median TCP time, taken beside each rep
  double publish_gbps = 0;      // bytes / median Publish() wall time, no receiver waiting
  double publish_cpu_gbps = 0;  // bytes / median CPU time of the thread calling Publish()
  double e2e_gbps = 0;          // bytes / median end to end, the receiver waiting
  double e2e_ratio = 0;         // median over reps of TCP time / end-to-end time
  double seq_gbps = 0;          // bytes / median Publish() + Receive() one after the other
  double seq_ratio = 0;         // median over reps of TCP time / that
};

void Check(const absl::StatusOr<v1::WeightSyncStats>& got, const char* what) {
  if (!got.ok()) {
    std::fprintf(stderr, "%s: %s\n", what, got.status().ToString().c_str());
    std::exit(1);
  }
}

// Each repetition syncs two versions: one published with nobody waiting
// and then received (publish alone, and publish + receive in sequence),
// and one that the receiver is already waiting for when Publish starts, as
// an actor waiting for the next version is (end to end: from the start of
// Publish to the end of Receive, packing overlapping the transfer where
// the transport streams).
Result Run(Publisher& sender, Receiver& receiver, Tcp& tcp, int64_t bytes, int reps) {
  std::vector<double> publish_s, publish_cpu_s, seq_s, e2e_s, tcp_s, e2e_ratio, seq_ratio;
  NamedTensors w = MakeWeights(bytes, 0);
  NamedTensors dst = Like(w);
  int64_t v = 0;
  for (int rep = 0; rep <= reps; ++rep) {  // rep 0 warms up
    // The learner's weights change between versions, in place.
    for (auto& [name, t] : w) t.fill_(static_cast<float>(rep));
    const double cpu0 = ThreadCpuSeconds();
    auto p0 = Clock::now();
    Check(sender.Publish(++v, w), "publish");
    const double pub = Since(p0);
    const double pub_cpu = ThreadCpuSeconds() - cpu0;
    Check(receiver.Receive(v, dst, absl::Seconds(120)), "receive");
    const double seq = Since(p0);

    absl::StatusOr<v1::WeightSyncStats> got;
    const int64_t next = v + 1;
    std::thread waiting([&, next] { got = receiver.Receive(next, dst, absl::Seconds(120)); });
    // Time for the request to reach the publisher.
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    auto e0 = Clock::now();
    Check(sender.Publish(v = next, w), "publish");
    waiting.join();
    const double e2e = Since(e0);
    Check(got, "receive");
    if (rep == 0) continue;
    // The baseline right beside each repetition, so that both see the
    // same load on the machine.
    tcp_s.push_back(tcp.Seconds());
    publish_s.push_back(pub);
    publish_cpu_s.push_back(pub_cpu);
    seq_s.push_back(seq);
    e2e_s.push_back(e2e);
    e2e_ratio.push_back(tcp_s.back() / e2e);
    seq_ratio.push_back(tcp_s.back() / seq);
  }
  const double gb = static_cast<double>(bytes) / 1e9;
  Result r;
  r.tcp_gbps = gb / Median(tcp_s);
  r.publish_gbps = gb / Median(publish_s);
  r.publish_cpu_gbps = gb / Median(publish_cpu_s);
  r.e2e_gbps = gb / Median(e2e_s);
  r.e2e_ratio = Median(e2e_ratio);
  r.seq_gbps = gb / Median(seq_s);
  r.seq_ratio = Median(seq_ratio);
  return r;
}

int Main() {
  const int reps = absl::GetFlag(FLAGS_reps);
  if (absl::GetFlag(FLAGS_gpu)) {
    return RunGpuBench(reps, absl::GetFlag(FLAGS_bucket_mb) << 20, absl::GetFlag(FLAGS_max_mb));
  }
  const std::string only = absl::GetFlag(FLAGS_only);
  TransportOptions options;
  options.bucket_bytes = absl::GetFlag(FLAGS_bucket_mb) << 20;
  std::vector<int64_t> sizes;
  for (int64_t mb : {10, 100, 1000}) {
    if (mb <= absl::GetFlag(FLAGS_max_mb)) sizes.push_back(mb * 1'000'000);
  }
  std::printf(
      "weightsync_bench: %d reps (median), buckets %lld MiB, sender and "
      "receiver in one process over 127.0.0.1, %u hardware threads\n",
      reps, static_cast<long long>(absl::GetFlag(FLAGS_bucket_mb)),
      std::thread::hardware_concurrency());
  std::printf(
      "TCP = plain socket pair moving the same bytes, timed beside each repetition;\n"
      "publish = Publish() (pack + checksum), nobody waiting; publish CPU = over the CPU time\n"
      "of the thread calling it (what the machine's other load cannot take);\n"
      "e2e = from Publish() to the end of Receive() (transfer, verify, load into the\n"
      "receiver's tensors), the receiver waiting for the version when Publish starts;\n"
      "seq = Publish() then Receive(), one after the other; x/TCP = median of the\n"
      "per-repetition ratios of throughput\n\n");
  std::printf("%-8s %-10s %9s %13s %9s %9s %8s %9s %8s\n", "size", "transport", "TCP GB/s",
              "publish GB/s", "CPU GB/s", "e2e GB/s", "e2e/TCP", "seq GB/s", "seq/TCP");
  // Every transport by name; grpc's publisher serves on this server.
  std::unique_ptr<WeightStreamHost> host = NewWeightStreamHost();
  absl::StatusOr<std::unique_ptr<rpc::Server>> server =
      rpc::Server::Start("127.0.0.1:0", {host->service()});
  if (!server.ok()) {
    std::fprintf(stderr, "grpc: %s\n", server.status().ToString().c_str());
    return 1;
  }
  absl::StatusOr<rpc::HostPort> grpc_address = rpc::SplitHostPort((*server)->address());
  TransportRegistry registry;
  if (absl::Status s = RegisterBuiltinTransports(registry); !s.ok()) return 1;
  if (absl::Status s = RegisterGrpcTransport(registry, host.get()); !s.ok()) return 1;
  for (int64_t bytes : sizes) {
    Tcp tcp(bytes);
    for (const char* name : {"inprocess", "gloo", "grpc"}) {
      if (!only.empty() && only != name) continue;
      TransportOptions ends = options;
      if (std::string(name) == "gloo") {
        absl::StatusOr<int> port = comm::PickFreeTcpPort("127.0.0.1");
        ends.port = port.ok() ? *port : 0;
      } else if (std::string(name) == "grpc" && grpc_address.ok()) {
        ends.host = grpc_address->host;
        ends.port = grpc_address->port;
      }
      absl::StatusOr<std::unique_ptr<Publisher>> publisher = registry.NewPublisher(name, ends);
      if (!publisher.ok()) {
        std::fprintf(stderr, "%s: %s\n", name, publisher.status().ToString().c_str());
        return 1;
      }
      absl::StatusOr<std::unique_ptr<Receiver>> receiver = registry.NewReceiver(name, ends);
      if (!receiver.ok()) {
        std::fprintf(stderr, "%s: %s\n", name, receiver.status().ToString().c_str());
        return 1;
      }
      const Result r = Run(**publisher, **receiver, tcp, bytes, reps);
      std::printf("%-8s %-10s %9.2f %13.2f %9.2f %9.2f %7.0f%% %9.2f %7.0f%%\n",
                  absl::StrFormat("%dMB", bytes / 1'000'000).c_str(), name, r.tcp_gbps,
                  r.publish_gbps, r.publish_cpu_gbps, r.e2e_gbps, 100 * r.e2e_ratio, r.seq_gbps,
                  100 * r.seq_ratio);
      std::fflush(stdout);
    }
  }
  (*server)->Shutdown(absl::Milliseconds(100));
  return 0;
}

}  // namespace
}  // namespace trellis::weightsync

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return trellis::weightsync::Main();
}
