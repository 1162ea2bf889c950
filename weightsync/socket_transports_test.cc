// The transports that stream over sockets (gloo, tcp): the conformance
// suite and the behaviour both promise, run against each.

#include <sys/socket.h>
#include <torch/torch.h>

#include <chrono>
#include <future>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "comm/tcp_store.h"
#include "env/testing/cpu_contention.h"
#include "gtest/gtest.h"
#include "weightsync/gloo_transport.h"
#include "weightsync/internal/socket_io.h"
#include "weightsync/registry.h"
#include "weightsync/tcp_transport.h"
#include "weightsync/testing/transport_conformance.h"

namespace trellis::weightsync {
namespace {

using ::absl::StatusCode;
using conformance::TransportConformanceTest;
using conformance::TransportEnds;
using conformance::TransportFactory;

TransportOptions FreshOptions(int num_receivers = 1) {
  absl::StatusOr<int> port = comm::PickFreeTcpPort("127.0.0.1");
  EXPECT_TRUE(port.ok()) << port.status();
  TransportOptions options;
  options.host = "127.0.0.1";
  options.port = port.ok() ? *port : 0;
  options.num_receivers = num_receivers;
  options.connect_timeout = absl::Seconds(10);
  return options;
}

const TransportRegistry& Builtins() {
  static const TransportRegistry* const registry = [] {
    auto* r = new TransportRegistry();
    EXPECT_TRUE(RegisterBuiltinTransports(*r).ok());
    return r;
  }();
  return *registry;
}

// Both ends by name, as the role factories make them.
absl::StatusOr<TransportEnds> MakeByName(const std::string& name, const TransportOptions& base) {
  TransportOptions options = FreshOptions();
  options.bucket_bytes = base.bucket_bytes;
  return conformance::MakeByName(Builtins(), name, options);
}

INSTANTIATE_TEST_SUITE_P(
    Sockets, TransportConformanceTest,
    ::testing::Values(
        TransportFactory{"gloo", [](const TransportOptions& o) { return MakeByName("gloo", o); },
                         conformance::CorruptStaged},
        TransportFactory{"tcp", [](const TransportOptions& o) { return MakeByName("tcp", o); },
                         conformance::CorruptStaged}),
    conformance::TransportFactoryName);

// Each test runs against the transport its parameter names.
class SocketTransportTest : public ::testing::TestWithParam<std::string> {
 public:
  std::unique_ptr<Publisher> StartPublisher(const TransportOptions& options) {
    absl::StatusOr<std::unique_ptr<Publisher>> p = Builtins().NewPublisher(GetParam(), options);
    EXPECT_TRUE(p.ok()) << p.status();
    return p.ok() ? *std::move(p) : nullptr;
  }

  std::unique_ptr<Receiver> ReceiverAt(TransportOptions options, int index) {
    options.receiver_index = index;
    absl::StatusOr<std::unique_ptr<Receiver>> r = Builtins().NewReceiver(GetParam(), options);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *std::move(r) : nullptr;
  }
};

INSTANTIATE_TEST_SUITE_P(Sockets, SocketTransportTest, ::testing::Values("gloo", "tcp"),
                         [](const auto& info) { return info.param; });

NamedTensors Weights(float v) {
  return {{"a", torch::full({1000}, v)}, {"b", torch::full({3, 7}, v + 1)}};
}

NamedTensors Zeros() { return {{"a", torch::zeros({1000})}, {"b", torch::zeros({3, 7})}}; }

double SecondsSince(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// A receiver waiting for the version gets its buckets while they are packed;
// when packing fails halfway (a tensor that cannot be copied to the host),
// it gets an error, not half a version (the packing's error when its
// sender took the version before packing failed, else its deadline), and
// the next Publish still arrives.
TEST_P(SocketTransportTest, PackingFailureWhileStreamingIsAnErrorAndTheNextPublishArrives) {
  TransportOptions options = FreshOptions();
  options.bucket_bytes = 1024;  // "a" in bucket 0, "b" in bucket 1.
  auto publisher = StartPublisher(options);
  auto receiver = ReceiverAt(options, 0);
  NamedTensors dst = Zeros();
  std::future<absl::StatusOr<v1::WeightSyncStats>> waiting =
      std::async(std::launch::async, [&] { return receiver->Receive(1, dst, absl::Seconds(3)); });
  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // The request arrives.
  const NamedTensors broken = {
      {"a", torch::full({1000}, 5.0f)},
      {"b", torch::empty({3, 7}, torch::TensorOptions().device(torch::kMeta))}};
  EXPECT_EQ(publisher->Publish(1, broken).status().code(), StatusCode::kInternal);
  const absl::StatusOr<v1::WeightSyncStats> failed = waiting.get();
  EXPECT_FALSE(failed.ok());
  EXPECT_EQ(dst[0].second.sum().item<float>(), 0.0f);

  ASSERT_TRUE(publisher->Publish(1, Weights(1)).ok());
  absl::StatusOr<v1::WeightSyncStats> got = receiver->Receive(1, dst, absl::Seconds(20));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(dst[0].second.sum().item<float>(), 1000.0f);
}

TEST_P(SocketTransportTest, PublisherNeverStartedIsAnErrorByTheDeadline) {
  auto receiver = ReceiverAt(FreshOptions(), 0);
  NamedTensors dst = Zeros();
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<v1::WeightSyncStats> got = receiver->Receive(1, dst, absl::Seconds(1));
  EXPECT_LE(SecondsSince(start), 2.0);
  EXPECT_TRUE(got.status().code() == StatusCode::kDeadlineExceeded ||
              got.status().code() == StatusCode::kUnavailable)
      << got.status();
}

// A publisher serving two receiver slots, and a receiver in each.
struct TwoSlots {
  explicit TwoSlots(SocketTransportTest& test)
      : publisher(test.StartPublisher(options)),
        r0(test.ReceiverAt(options, 0)),
        r1(test.ReceiverAt(options, 1)) {}

  TransportOptions options = FreshOptions(2);
  std::unique_ptr<Publisher> publisher;
  std::unique_ptr<Receiver> r0;
  std::unique_ptr<Receiver> r1;
};

TEST_P(SocketTransportTest, TwoReceiversBothGetTheVersion) {
  TwoSlots t(*this);
  ASSERT_NE(t.publisher, nullptr);
  ASSERT_TRUE(t.publisher->Publish(3, Weights(3)).ok());
  NamedTensors d0 = Zeros(), d1 = Zeros();
  auto f0 = std::async(std::launch::async, [&] { return t.r0->Receive(3, d0, absl::Seconds(10)); });
  auto f1 = std::async(std::launch::async, [&] { return t.r1->Receive(3, d1, absl::Seconds(10)); });
  absl::StatusOr<v1::WeightSyncStats> g0 = f0.get(), g1 = f1.get();
  ASSERT_TRUE(g0.ok()) << g0.status();
  ASSERT_TRUE(g1.ok()) << g1.status();
  EXPECT_EQ(g0->version(), 3);
  EXPECT_EQ(g1->version(), 3);
  for (const NamedTensors* d : {&d0, &d1}) {
    EXPECT_TRUE(torch::equal((*d)[0].second, Weights(3)[0].second));
    EXPECT_TRUE(torch::equal((*d)[1].second, Weights(3)[1].second));
  }
}

TEST_P(SocketTransportTest, PublisherKeepsServingAfterAReceiverWentAway) {
  TwoSlots t(*this);  // r0 goes, r1 stays.
  ASSERT_NE(t.publisher, nullptr);
  ASSERT_TRUE(t.publisher->Publish(1, Weights(1)).ok());
  NamedTensors d = Zeros();
  ASSERT_TRUE(t.r0->Receive(1, d, absl::Seconds(10)).ok());
  ASSERT_TRUE(t.r1->Receive(1, d, absl::Seconds(10)).ok());
  // Receiver 0 leaves mid-wait: its request is pending on the publisher.
  auto abandoned = std::async(std::launch::async, [&] {
    NamedTensors mine = Zeros();
    return t.r0->Receive(2, mine, absl::Milliseconds(300));
  });
  EXPECT_EQ(abandoned.get().status().code(), StatusCode::kDeadlineExceeded);
  t.r0.reset();
  ASSERT_TRUE(t.publisher->Publish(2, Weights(2)).ok());
  absl::StatusOr<v1::WeightSyncStats> got = t.r1->Receive(2, d, absl::Seconds(10));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->version(), 2);
  // A receiver that comes back into slot 0 is served again.
  auto back = ReceiverAt(t.options, 0);
  NamedTensors d0 = Zeros();
  got = back->Receive(2, d0, absl::Seconds(10));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(torch::equal(d0[0].second, Weights(2)[0].second));
}

TEST_P(SocketTransportTest, TimedOutReceiveLeavesThePairUsable) {
  // A receive that timed out waiting leaves the pair usable; the next one
  // still gets the version.
  TransportOptions ep = FreshOptions();
  auto publisher = StartPublisher(ep);
  ASSERT_NE(publisher, nullptr);
  auto r = ReceiverAt(ep, 0);
  NamedTensors d = Zeros();
  EXPECT_EQ(r->Receive(1, d, absl::Milliseconds(100)).status().code(),
            StatusCode::kDeadlineExceeded);
  ASSERT_TRUE(publisher->Publish(1, Weights(1)).ok());
  absl::StatusOr<v1::WeightSyncStats> got = r->Receive(1, d, absl::Seconds(10));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_GT(got->transfer_seconds(), 0.0);
  EXPECT_GE(got->load_seconds(), 0.0);
  EXPECT_EQ(got->bytes(), (1000 + 21) * 4);
}

// Receivers each following every version they can: what each holds, and
// which have stopped.
struct Followers {
  explicit Followers(int n) : held(n, 0) {}

  absl::Mutex mu;
  std::vector<int64_t> held ABSL_GUARDED_BY(mu);
  // Receivers that stopped short of the last version.
  int stopped ABSL_GUARDED_BY(mu) = 0;

  // Receives until it holds `last`, each time asking for the version after
  // the one it holds; every receive must be one whole version.
  void Follow(Receiver& receiver, int k, int64_t last) {
    NamedTensors dst = Zeros();
    for (int64_t next = 1; next <= last;) {
      absl::StatusOr<v1::WeightSyncStats> got = receiver.Receive(next, dst, absl::Seconds(60));
      ASSERT_TRUE(got.ok()) << "receiver " << k << ", version >= " << next << ": " << got.status();
      const int64_t v = got->version();
      ASSERT_GE(v, next);
      const NamedTensors want = Weights(static_cast<float>(v));
      ASSERT_TRUE(torch::equal(dst[0].second, want[0].second) &&
                  torch::equal(dst[1].second, want[1].second))
          << "receiver " << k << " holds a mix, not version " << v;
      next = v + 1;
      absl::MutexLock lock(&mu);
      held[k] = v;
    }
  }

  // Waits until every receiver holds `version` or some receiver stopped;
  // true if all hold it.
  bool AwaitAll(int64_t version) {
    absl::MutexLock lock(&mu);
    auto all = [this, version]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
      if (stopped > 0) return true;
      for (int64_t h : held) {
        if (h < version) return false;
      }
      return true;
    };
    mu.AwaitWithTimeout(absl::Condition(&all), absl::Seconds(120));
    for (int64_t h : held) {
      if (h < version) return false;
    }
    return true;
  }
};

// Under CPU contention (more spinning threads than cores), a publisher and
// three receivers go through 600 versions in lockstep: each version is
// published while every receiver waits for it, so that it is streamed
// while packed and each receiver's next request races the end of Publish.
// The version after the one a receiver holds is never refused, and every
// receive is one whole version, whatever the interleaving.
TEST_P(SocketTransportTest, ReceiversFollowEveryVersionUnderCpuContention) {
  constexpr int kReceivers = 3;
  constexpr int64_t kVersions = 600;
  env::testing::CpuContention load;
  TransportOptions options = FreshOptions(kReceivers);
  options.bucket_bytes = 1024;  // "a" and "b" each in a bucket of their own.
  auto publisher = StartPublisher(options);
  ASSERT_NE(publisher, nullptr);
  Followers followers(kReceivers);
  std::vector<std::jthread> receivers;
  for (int k = 0; k < kReceivers; ++k) {
    receivers.emplace_back([&, k] {
      if (std::unique_ptr<Receiver> r = ReceiverAt(options, k)) {
        followers.Follow(*r, k, kVersions);
      }
      // Stopped short (a failed receive): AwaitAll gives up waiting.
      absl::MutexLock lock(&followers.mu);
      if (followers.held[k] < kVersions) ++followers.stopped;
    });
  }
  for (int64_t v = 1; v <= kVersions; ++v) {
    ASSERT_TRUE(publisher->Publish(v, Weights(static_cast<float>(v))).ok()) << v;
    ASSERT_TRUE(followers.AwaitAll(v)) << "a receiver stopped before version " << v;
  }
}

TEST_P(SocketTransportTest, BadOptionsAreInvalidArgument) {
  const TransportRegistry& r = Builtins();
  const std::string name = GetParam();
  TransportOptions options;
  options.port = 0;
  EXPECT_EQ(r.NewPublisher(name, options).status().code(), StatusCode::kInvalidArgument);
  options.port = 5000;
  options.num_receivers = 0;
  EXPECT_EQ(r.NewPublisher(name, options).status().code(), StatusCode::kInvalidArgument);
  options.num_receivers = 1;
  options.receiver_index = 1;
  EXPECT_EQ(r.NewReceiver(name, options).status().code(), StatusCode::kInvalidArgument);
  options.receiver_index = 0;
  options.connect_timeout = absl::ZeroDuration();
  EXPECT_EQ(r.NewReceiver(name, options).status().code(), StatusCode::kInvalidArgument);
}

// The tcp transport serves a data connection only when it presents the
// token its slot's generation set in the (secret-guarded) store: one that
// guesses is dropped unanswered, and the slot's real receiver is served.
TEST(TcpTransportTest, AConnectionWithoutTheStoresTokenIsDropped) {
  TransportOptions options = FreshOptions();
  options.secret = "job secret";
  absl::StatusOr<std::unique_ptr<Publisher>> publisher = NewTcpPublisher(options);
  ASSERT_TRUE(publisher.ok()) << publisher.status();
  ASSERT_TRUE((*publisher)->Publish(1, Weights(1)).ok());
  // Its data port, read as an admitted client would.
  absl::StatusOr<c10::intrusive_ptr<c10d::Store>> store = comm::ConnectStore(
      options.host, options.port, /*server=*/false, absl::Seconds(10), options.secret);
  ASSERT_TRUE(store.ok()) << store.status();
  const std::vector<uint8_t> port = (*store)->get("tcp/data_port");
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  absl::StatusOr<internal::Socket> intruder =
      internal::Connect(options.host, std::stoi(std::string(port.begin(), port.end())), deadline);
  ASSERT_TRUE(intruder.ok()) << intruder.status();
  ASSERT_TRUE(internal::Tune(*intruder).ok());
  const int64_t hello[4] = {0, 1, 12345, 67890};
  const int64_t request[2] = {1, 1000};
  ASSERT_TRUE(internal::SendAll(*intruder, hello, sizeof(hello), deadline, "hello").ok());
  ASSERT_TRUE(internal::SendAll(*intruder, request, sizeof(request), deadline, "request").ok());
  int64_t answer[2];
  const absl::Status refused =
      internal::RecvAll(*intruder, answer, sizeof(answer), deadline, "answer");
  EXPECT_EQ(refused.code(), StatusCode::kUnavailable) << refused;

  options.receiver_index = 0;
  absl::StatusOr<std::unique_ptr<Receiver>> receiver = NewTcpReceiver(options);
  ASSERT_TRUE(receiver.ok()) << receiver.status();
  NamedTensors dst = Zeros();
  absl::StatusOr<v1::WeightSyncStats> got = (*receiver)->Receive(1, dst, absl::Seconds(10));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(torch::equal(dst[0].second, Weights(1)[0].second));
}

}  // namespace
}  // namespace trellis::weightsync
