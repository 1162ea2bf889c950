// Weight-sync throughput: inprocess, gloo and grpc transports against plain
// loopback TCP, sender and receiver in this process over 127.0.0.1.
//
//   weightsync_bench [--max_mb=1024] [--reps=5] [--bucket_mb=64]
//
// For each size, each transport publishes a fresh version per repetition
// and the receiver's Receive is timed (the network transfer, checksum
// verification and the copy into the receiver's tensors); the median is
// printed as GB/s (1e9 bytes/s), with the TCP baseline measured in the same
// run by a socket sender/receiver thread pair moving the same bytes.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_format.h"
#include "comm/tcp_store.h"
#include "rpc/channel.h"
#include "rpc/server.h"
#include "weightsync/grpc_transport.h"
#include "weightsync/registry.h"

ABSL_FLAG(int64_t, max_mb, 1000, "largest size to run, in MB (1e6 bytes)");
ABSL_FLAG(int, reps, 5, "timed repetitions per size and transport");
ABSL_FLAG(int64_t, bucket_mb, 64, "transport bucket size in MiB");
ABSL_FLAG(std::string, only, "", "run one transport: inprocess, gloo, grpc");

namespace trellis::weightsync {
namespace {

using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
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

double TcpSeconds(const std::vector<char>& src, std::vector<char>& dst) {
  const int listener = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (bind(listener, reinterpret_cast<sockaddr*>(&addr), len) != 0 ||
      listen(listener, 1) != 0 ||
      getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    std::perror("tcp baseline");
    std::exit(1);
  }
  const size_t n = src.size();
  Clock::time_point start;
  double seconds = 0;
  std::thread receiver([&] {
    const int fd = accept(listener, nullptr, nullptr);
    size_t got = 0;
    while (got < n) {
      const ssize_t r = read(fd, dst.data() + got, n - got);
      if (r <= 0) break;
      got += static_cast<size_t>(r);
    }
    seconds = Since(start);
    close(fd);
  });
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), len) != 0) {
    std::perror("tcp baseline connect");
    std::exit(1);
  }
  start = Clock::now();
  size_t sent = 0;
  while (sent < n) {
    const ssize_t w = write(fd, src.data() + sent, n - sent);
    if (w <= 0) break;
    sent += static_cast<size_t>(w);
  }
  receiver.join();
  close(fd);
  close(listener);
  return seconds;
}

// Buffers for the baseline, faulted in once.
struct Tcp {
  explicit Tcp(int64_t bytes)
      : src(static_cast<size_t>(bytes), 1), dst(src.size(), 0) {
    TcpSeconds(src, dst);
  }
  double Seconds() { return TcpSeconds(src, dst); }
  std::vector<char> src, dst;
};

// ---- transports.

struct Result {
  double tcp_gbps = 0;      // bytes / median TCP time, taken beside each rep
  double ratio = 0;         // median over reps of receive / TCP throughput
  double gbps = 0;          // bytes / median Receive wall time
  double transfer_gbps = 0; // bytes / median reported transfer seconds
  double publish_s = 0;     // median Publish wall time
};

Result Run(Publisher& sender, Receiver& receiver, Tcp& tcp, int64_t bytes,
           int reps) {
  Result r;
  std::vector<double> recv_s, transfer_s, publish_s, tcp_s, ratio;
  NamedTensors dst;
  for (int v = 1; v <= reps + 1; ++v) {  // version 1 warms up
    NamedTensors w = MakeWeights(bytes, static_cast<float>(v));
    if (dst.empty()) dst = Like(w);
    auto p0 = Clock::now();
    absl::StatusOr<v1::WeightSyncStats> pub = sender.Publish(v, w);
    const double pub_s = Since(p0);
    if (!pub.ok()) {
      std::fprintf(stderr, "publish: %s\n", pub.status().ToString().c_str());
      std::exit(1);
    }
    auto r0 = Clock::now();
    absl::StatusOr<v1::WeightSyncStats> got =
        receiver.Receive(v, dst, absl::Seconds(120));
    const double s = Since(r0);
    if (!got.ok()) {
      std::fprintf(stderr, "receive: %s\n", got.status().ToString().c_str());
      std::exit(1);
    }
    if (v == 1) continue;
    // The baseline right beside each repetition, so that both see the
    // same load on the machine.
    tcp_s.push_back(tcp.Seconds());
    ratio.push_back(tcp_s.back() / s);
    recv_s.push_back(s);
    transfer_s.push_back(got->transfer_seconds());
    publish_s.push_back(pub_s);
  }
  r.gbps = static_cast<double>(bytes) / Median(recv_s) / 1e9;
  r.transfer_gbps = static_cast<double>(bytes) / Median(transfer_s) / 1e9;
  r.publish_s = Median(publish_s);
  r.tcp_gbps = static_cast<double>(bytes) / Median(tcp_s) / 1e9;
  r.ratio = Median(ratio);
  return r;
}

int Main() {
  const int reps = absl::GetFlag(FLAGS_reps);
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
      "receive = Receive() wall time (transfer + verify + load into dst); "
      "transfer = its transfer_seconds; publish = Publish() (pack + "
      "checksum);\nTCP = plain socket pair moving the same bytes, timed "
      "beside each repetition; recv/TCP = median of the per-repetition "
      "ratios\n\n");
  std::printf("%-8s %-10s %12s %13s %11s %11s %9s\n", "size", "transport",
              "receive GB/s", "transfer GB/s", "publish s", "TCP GB/s",
              "recv/TCP");
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
      std::printf("%-8s %-10s %12.2f %13.2f %11.3f %11.2f %8.0f%%\n",
                  absl::StrFormat("%dMB", bytes / 1'000'000).c_str(), name, r.gbps,
                  r.transfer_gbps, r.publish_s, r.tcp_gbps, 100 * r.ratio);
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
