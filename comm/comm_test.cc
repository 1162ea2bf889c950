#include <torch/torch.h>

#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "comm/gloo_pair.h"
#include "comm/tcp_store.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trellis::comm {
namespace {

using ::absl::StatusCode;
using ::testing::HasSubstr;

TEST(TcpStoreTest, NothingListeningIsDeadlineExceededNamingTheAddress) {
  absl::StatusOr<int> port = PickFreeTcpPort("127.0.0.1");
  ASSERT_TRUE(port.ok()) << port.status();
  absl::Status s = WaitForListener("127.0.0.1", *port, absl::Now() + absl::Milliseconds(50));
  EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded);
  EXPECT_THAT(std::string(s.message()), HasSubstr("127.0.0.1:" + std::to_string(*port)));
}

// Picked ports lie below the kernel's ephemeral range, where outgoing
// connections (other processes') cannot take them before they are bound.
TEST(TcpStoreTest, PickedPortsLieBelowTheEphemeralRange) {
  std::ifstream range("/proc/sys/net/ipv4/ip_local_port_range");
  int low = 0;
  if (!(range >> low)) GTEST_SKIP() << "no /proc/sys/net/ipv4/ip_local_port_range";
  for (int i = 0; i < 20; ++i) {
    absl::StatusOr<int> port = PickFreeTcpPort("127.0.0.1");
    ASSERT_TRUE(port.ok()) << port.status();
    EXPECT_GE(*port, kLowestPickedPort);
    EXPECT_LT(*port, low);
  }
}

TEST(TcpStoreTest, ClientsReachTheHostedStore) {
  absl::StatusOr<int> port = PickFreeTcpPort("127.0.0.1");
  ASSERT_TRUE(port.ok()) << port.status();
  auto host = ConnectStore("127.0.0.1", *port, /*server=*/true, absl::Seconds(10), "");
  ASSERT_TRUE(host.ok()) << host.status();
  ASSERT_TRUE(WaitForListener("127.0.0.1", *port, absl::Now() + absl::Seconds(10)).ok());
  auto client = ConnectStore("127.0.0.1", *port, /*server=*/false, absl::Seconds(10), "");
  ASSERT_TRUE(client.ok()) << client.status();
  (*host)->set("k", std::vector<uint8_t>{7});
  EXPECT_EQ((*client)->get("k"), std::vector<uint8_t>{7});
  // The port is taken now.
  EXPECT_EQ(ConnectStore("127.0.0.1", *port, /*server=*/true, absl::Seconds(1), "").status().code(),
            StatusCode::kUnavailable);
}

TEST(GlooPairTest, TwoRanksExchangeAndAMissingPeerTimesOut) {
  absl::StatusOr<int> port = PickFreeTcpPort("127.0.0.1");
  ASSERT_TRUE(port.ok()) << port.status();
  // Each rank its own store client, as in two processes; rank 0 hosts.
  auto host = ConnectStore("127.0.0.1", *port, /*server=*/true, absl::Seconds(10), "");
  ASSERT_TRUE(host.ok()) << host.status();
  auto client = ConnectStore("127.0.0.1", *port, /*server=*/false, absl::Seconds(10), "");
  ASSERT_TRUE(client.ok()) << client.status();
  const std::vector<c10::intrusive_ptr<c10d::Store>> stores{*host, *client};
  std::vector<c10::intrusive_ptr<GlooGroup>> groups(2);
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < 2; ++rank) {
    ranks.emplace_back([&, rank] {
      absl::StatusOr<std::shared_ptr<GlooDevice>> device = NewGlooDevice("127.0.0.1", "");
      ASSERT_TRUE(device.ok()) << device.status();
      auto group = JoinGlooGroup(stores[rank], "test", rank, 2, *device, absl::Seconds(10));
      ASSERT_TRUE(group.ok()) << group.status();
      groups[rank] = *group;
    });
  }
  for (std::thread& t : ranks) t.join();
  ASSERT_TRUE(groups[0] && groups[1]);
  std::vector<at::Tensor> sent{torch::arange(4, torch::kLong)};
  std::vector<at::Tensor> got{torch::zeros({4}, torch::kLong)};
  auto recv = groups[1]->recv(got, 0, 1);
  ASSERT_TRUE(WaitWork(groups[0]->send(sent, 1, 1), absl::Seconds(10), "send").ok());
  ASSERT_TRUE(WaitWork(recv, absl::Seconds(10), "recv").ok());
  EXPECT_TRUE(torch::equal(got[0], sent[0]));
  // Nobody sends on tag 2.
  std::vector<at::Tensor> never{torch::zeros({1}, torch::kLong)};
  absl::Status s = WaitWork(groups[1]->recv(never, 0, 2), absl::Milliseconds(100), "answer");
  EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded);
  EXPECT_THAT(std::string(s.message()), HasSubstr("answer"));
}

}  // namespace
}  // namespace trellis::comm
