// Every socket a launched job listens on is bound to the address the job
// was given (127.0.0.1) and serves nobody without the job's secret. The
// job trains with the gloo weight transport and a two-learner group, every
// role a process; the test finds each listening TCP socket of its
// processes (/proc/<pid>/fd against /proc/net/tcp and tcp6) and shows:
//  - a gRPC port refuses a call without the secret (UNAUTHENTICATED) and
//    serves it with the secret;
//  - a rendezvous store (the weight transport's, the learner group's)
//    sends nothing to a client that has not presented the secret, hangs
//    up on a wrong one, and neither reads nor writes a key for it (a slot's
//    generation key written that way is unchanged); with the secret a key
//    is read and written;
//  - every other listener (Gloo's data listeners) sends nothing to a
//    connection that has not been exchanged through the store (a gRPC
//    server is told by the HTTP/2 greeting it sends first, and checked as
//    above whether or not workers.tsv names its port);
// and after all of it the job goes on training with the same processes.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "comm/store_wire.h"
#include "comm/tcp_store.h"
#include "config/job_config.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rpc/auth.h"
#include "rpc/channel.h"
#include "tests/launch_util.h"
#include "tests/tiny_job.h"
#include "trellis/v1/scheduler.grpc.pb.h"
#include "trellis/v1/services.grpc.pb.h"

namespace trellis {
namespace {

namespace fs = std::filesystem;
using testing_util::Processes;
using testing_util::Slurp;
using testing_util::StartTrellis;
using testing_util::Wait;
using testing_util::WaitFor;
using testing_util::WriteText;

struct Listener {
  std::string process;
  std::string ip;  // As the kernel reports it: "127.0.0.1", or an IPv6 address.
  int port = 0;
};

// The inodes of the sockets `pid` holds.
std::set<std::string> SocketInodes(pid_t pid) {
  std::set<std::string> inodes;
  const fs::path dir = fs::path("/proc") / std::to_string(pid) / "fd";
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string target = fs::read_symlink(entry.path(), ec).string();
    if (!ec && target.rfind("socket:[", 0) == 0) {
      inodes.insert(target.substr(8, target.size() - 9));
    }
  }
  return inodes;
}

// A /proc/net/tcp{,6} local address ("0100007F:1F90") as text and port.
std::pair<std::string, int> Decode(const std::string& hex, bool v6) {
  const size_t colon = hex.find(':');
  const std::string ip_hex = hex.substr(0, colon);
  unsigned char bytes[16] = {};
  const size_t n = v6 ? 16 : 4;
  // The kernel prints each 32-bit word in host order.
  for (size_t word = 0; word < n / 4; ++word) {
    const uint32_t w = static_cast<uint32_t>(std::stoul(ip_hex.substr(word * 8, 8), nullptr, 16));
    std::memcpy(bytes + word * 4, &w, 4);
  }
  char text[INET6_ADDRSTRLEN] = {};
  inet_ntop(v6 ? AF_INET6 : AF_INET, bytes, text, sizeof(text));
  std::string ip = text;
  // An IPv6 socket bound to an IPv4 address shows it v4-mapped.
  if (ip.rfind("::ffff:", 0) == 0 && ip.find('.') != std::string::npos) ip = ip.substr(7);
  return {ip, static_cast<int>(std::stoul(hex.substr(colon + 1), nullptr, 16))};
}

// Every listening TCP socket of the processes in `pids`.
std::vector<Listener> ListeningSockets(const std::map<std::string, pid_t>& pids) {
  std::map<std::string, std::string> owner;  // inode -> process
  for (const auto& [name, pid] : pids) {
    for (const std::string& inode : SocketInodes(pid)) owner[inode] = name;
  }
  std::vector<Listener> found;
  for (const bool v6 : {false, true}) {
    std::ifstream in(v6 ? "/proc/net/tcp6" : "/proc/net/tcp");
    std::string line;
    std::getline(in, line);  // The header.
    while (std::getline(in, line)) {
      std::istringstream fields(line);
      std::string slot, local, remote, state, queues, timer, retransmits, uid, timeout, inode;
      fields >> slot >> local >> remote >> state >> queues >> timer >> retransmits >> uid >>
          timeout >> inode;
      if (state != "0A" || !owner.count(inode)) continue;  // 0A: LISTEN.
      const auto [ip, port] = Decode(local, v6);
      found.push_back({owner.at(inode), ip, port});
    }
  }
  return found;
}

// A raw TCP connection to 127.0.0.1:port; -1 when refused.
int Connect(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// The bytes `fd` receives within `wait` (stopping at the peer's close).
std::string Received(int fd, absl::Duration wait) {
  std::string got;
  const absl::Time deadline = absl::Now() + wait;
  while (absl::Now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(deadline - absl::Now())) + 1) <= 0) {
      break;
    }
    char buf[256];
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) break;
    got.append(buf, static_cast<size_t>(n));
  }
  return got;
}

// What a client that skips the handshake sends: set `key` to `value`,
// then read it.
std::string UnauthenticatedRequests(const std::string& key, const std::string& value) {
  using comm::store_wire::Op;
  using comm::store_wire::Writer;
  const std::string set =
      Writer().Byte(static_cast<uint8_t>(Op::kSet)).Bytes(key).Bytes(value).body();
  const std::string get = Writer().Byte(static_cast<uint8_t>(Op::kGet)).Bytes(key).Int(0).body();
  std::string frames;
  for (const std::string& body : {set, get}) {
    const uint32_t size = static_cast<uint32_t>(body.size());
    for (int i = 0; i < 4; ++i) frames.push_back(static_cast<char>((size >> (8 * i)) & 0xff));
    frames += body;
  }
  return frames;
}

int64_t ActorVersion(const std::string& address, const rpc::JobSecret& secret) {
  v1::Actor::Stub stub(rpc::NewChannel(address, rpc::kDefaultStallLimit, secret));
  grpc::ClientContext context;
  rpc::SetDeadline(context, absl::Seconds(10));
  v1::VersionResponse r;
  return stub.GetVersion(&context, v1::Empty(), &r).ok() ? r.policy_version() : -1;
}

grpc::StatusCode JobStatusCode(const std::string& address, const rpc::JobSecret& secret) {
  v1::Scheduler::Stub stub(rpc::NewChannel(address, rpc::kDefaultStallLimit, secret));
  grpc::ClientContext context;
  rpc::SetDeadline(context, absl::Seconds(30));
  v1::JobStatusRequest request;
  request.set_job_id("listeners");
  v1::JobStatus status;
  return stub.GetJobStatus(&context, request, &status).error_code();
}

class ListenersTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::path(::testing::TempDir()) / ("listeners_test_" + std::to_string(::getpid()));
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  void TearDown() override {
    if (launcher_ > 0 && ::kill(launcher_, SIGTERM) == 0) Wait(launcher_);
  }

  fs::path root_;
  pid_t launcher_ = -1;
};

TEST_F(ListenersTest, EveryListenerIsOnTheJobsAddressAndServesOnlyTheSecret) {
  v1::JobConfig job = testing_util::TinyJob();
  job.set_name("listeners");
  job.mutable_grpo()->set_steps(100000);  // Cancelled by the test.
  job.mutable_deployment()->mutable_actor()->set_count(1);
  job.mutable_deployment()->mutable_learner()->set_count(2);
  job.mutable_memory()->set_zero_stage(1);
  job.mutable_deployment()->set_weight_transport("gloo");
  WriteText(root_ / "job.yaml", config::ResolvedJobYaml(job));
  const fs::path out = root_ / "run";
  launcher_ = StartTrellis({"launch", (root_ / "job.yaml").string(), "--out", out.string()},
                           root_ / "launch.log");
  ASSERT_TRUE(WaitFor([&] { return fs::exists(out / "workers.tsv"); }, 300))
      << Slurp(root_ / "launch.log");
  absl::StatusOr<rpc::JobSecret> secret =
      rpc::JobSecret::ReadFile((out / "launch" / "secret").string());
  ASSERT_TRUE(secret.ok()) << secret.status();
  std::map<std::string, std::string> addresses;  // worker id -> host:port
  {
    std::ifstream in(out / "workers.tsv");
    std::string header, id, address, pid;
    std::getline(in, header);
    while (in >> id >> address >> pid) addresses[id] = address;
  }
  const std::string scheduler_addr = Slurp(out / "launch" / "scheduler.addr");
  addresses["scheduler"] = scheduler_addr.substr(0, scheduler_addr.find_last_not_of('\n') + 1);
  ASSERT_EQ(addresses.size(), 6u) << Slurp(out / "workers.tsv");
  // Weights have reached the actor over gloo: every listener is open.
  ASSERT_TRUE(WaitFor([&] { return ActorVersion(addresses["actor-0"], *secret) >= 1; }, 300))
      << Slurp(root_ / "launch.log");

  std::map<std::string, pid_t> pids = Processes(out);
  const std::map<std::string, pid_t> started = pids;
  pids["launcher"] = launcher_;
  std::set<int> grpc_ports;
  for (const auto& [id, address] : addresses) {
    int port = 0;
    ASSERT_TRUE(absl::SimpleAtoi(address.substr(address.rfind(':') + 1), &port)) << address;
    grpc_ports.insert(port);
  }
  const std::vector<Listener> listeners = ListeningSockets(pids);
  int stores = 0;
  int gloo = 0;
  std::set<int> grpc_seen;
  for (const Listener& l : listeners) {
    const std::string what = absl::StrCat(l.process, " listening on ", l.ip, ":", l.port);
    EXPECT_EQ(l.ip, "127.0.0.1") << what << ": not the address the job was given";
    // A gRPC server opens with its HTTP/2 SETTINGS frame (type 4); every
    // other listener waits for its client to speak first.
    const int silent = Connect(l.port);
    ASSERT_GE(silent, 0) << what;
    const std::string greeting = Received(silent, absl::Seconds(1));
    close(silent);
    const bool http2 = greeting.size() >= 9 && greeting[3] == 4;
    EXPECT_TRUE(http2 || greeting.empty()) << what << " sent " << greeting.size() << " bytes";
    if (grpc_ports.count(l.port) || http2) {
      grpc_seen.insert(l.port);
      const std::string address = absl::StrCat("127.0.0.1:", l.port);
      EXPECT_EQ(JobStatusCode(address, rpc::JobSecret::Insecure()),
                grpc::StatusCode::UNAUTHENTICATED)
          << what;
      EXPECT_NE(JobStatusCode(address, *secret), grpc::StatusCode::UNAUTHENTICATED) << what;
      continue;
    }
    // A wrong secret is refused, whatever listens.
    EXPECT_FALSE(comm::ConnectStore("127.0.0.1", l.port, /*server=*/false, absl::Seconds(3),
                                    std::string(64, 'x'))
                     .ok())
        << what;
    absl::StatusOr<c10::intrusive_ptr<c10d::Store>> store = comm::ConnectStore(
        "127.0.0.1", l.port, /*server=*/false, absl::Seconds(3), secret->value());
    if (!store.ok()) {
      ++gloo;  // Gloo's data listener: it answered no handshake.
      continue;
    }
    ++stores;
    // With the secret: a key written and read.
    (*store)->set("listeners_test/probe", std::vector<uint8_t>{'o', 'k'});
    EXPECT_EQ((*store)->get("listeners_test/probe"), (std::vector<uint8_t>{'o', 'k'})) << what;
    const std::string generation = "slot/0/generation";
    if (!(*store)->check({generation})) continue;  // The learner group's store.
    const int64_t before = (*store)->add(generation, 0);
    // Without it: a slot's generation key set and read, which the store
    // neither does nor answers.
    const int raw = Connect(l.port);
    ASSERT_GE(raw, 0) << what;
    const std::string frames = UnauthenticatedRequests(generation, "1000000");
    ASSERT_EQ(send(raw, frames.data(), frames.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(frames.size()));
    EXPECT_EQ(Received(raw, absl::Seconds(10)), "") << what;
    close(raw);
    EXPECT_LT((*store)->add(generation, 0), 1000000) << what;
    EXPECT_GE((*store)->add(generation, 0), before) << what;
  }
  for (int port : grpc_ports) {
    EXPECT_TRUE(grpc_seen.count(port)) << "no listener found for the service on port " << port;
  }
  // The weight transport's store and the learner group's.
  EXPECT_EQ(stores, 2);
  // Gloo's data listeners: each learner's and the actor's.
  EXPECT_GE(gloo, 3);

  // The job trains on, with the same processes.
  const int64_t version = ActorVersion(addresses["actor-0"], *secret);
  EXPECT_TRUE(
      WaitFor([&] { return ActorVersion(addresses["actor-0"], *secret) >= version + 2; }, 300))
      << Slurp(root_ / "launch.log");
  EXPECT_EQ(Processes(out), started) << Slurp(root_ / "launch.log");

  v1::Scheduler::Stub scheduler(
      rpc::NewChannel(addresses["scheduler"], rpc::kDefaultStallLimit, *secret));
  grpc::ClientContext context;
  rpc::SetDeadline(context, absl::Seconds(30));
  v1::JobStatusRequest cancel;
  cancel.set_job_id(job.name());
  v1::JobStatus status;
  EXPECT_TRUE(scheduler.CancelJob(&context, cancel, &status).ok());
  Wait(launcher_);
  launcher_ = -1;
}

}  // namespace
}  // namespace trellis
