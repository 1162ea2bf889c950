// The job's rendezvous store: what a client with the secret may do, and
// that a client without it reads and writes nothing.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "comm/store_wire.h"
#include "comm/tcp_store.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trellis::comm {
namespace {

using ::absl::StatusCode;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kSecret[] = "0123456789abcdef0123456789abcdef-store-test";

std::vector<uint8_t> Bytes(const std::string& s) { return {s.begin(), s.end()}; }

class StoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<int> port = PickFreeTcpPort("127.0.0.1");
    ASSERT_TRUE(port.ok()) << port.status();
    port_ = *port;
    absl::StatusOr<c10::intrusive_ptr<c10d::Store>> host =
        ConnectStore("127.0.0.1", port_, /*server=*/true, absl::Seconds(10), kSecret);
    ASSERT_TRUE(host.ok()) << host.status();
    host_ = *host;
  }

  absl::StatusOr<c10::intrusive_ptr<c10d::Store>> Client(const std::string& secret) {
    return ConnectStore("127.0.0.1", port_, /*server=*/false, absl::Seconds(10), secret);
  }

  // A raw TCP connection to the store at `address`; -1 when refused.
  int Raw(const char* address) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port_));
    inet_pton(AF_INET, address, &a.sin_addr);
    if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
      close(fd);
      return -1;
    }
    return fd;
  }

  int port_ = 0;
  c10::intrusive_ptr<c10d::Store> host_;
};

TEST_F(StoreTest, AClientWithTheSecretUsesEveryOperation) {
  absl::StatusOr<c10::intrusive_ptr<c10d::Store>> client = Client(kSecret);
  ASSERT_TRUE(client.ok()) << client.status();
  c10d::Store& c = **client;
  host_->set("k", Bytes("v"));
  EXPECT_EQ(c.get("k"), Bytes("v"));
  EXPECT_EQ(c.add("n", 2), 2);
  EXPECT_EQ(host_->add("n", 3), 5);
  EXPECT_EQ(c.get("n"), Bytes("5"));  // As c10d keeps a counter: its text.
  EXPECT_TRUE(c.check({"k", "n"}));
  EXPECT_FALSE(c.check({"k", "missing"}));
  EXPECT_EQ(c.getNumKeys(), 2);
  // compareSet: set when it holds `expected`; a missing key only when
  // `expected` is empty.
  EXPECT_EQ(c.compareSet("k", Bytes("other"), Bytes("w")), Bytes("v"));
  EXPECT_EQ(c.compareSet("k", Bytes("v"), Bytes("w")), Bytes("w"));
  EXPECT_EQ(c.compareSet("new", Bytes("x"), Bytes("y")), Bytes("x"));
  EXPECT_FALSE(c.check({"new"}));
  EXPECT_EQ(c.compareSet("new", {}, Bytes("y")), Bytes("y"));
  EXPECT_TRUE(c.deleteKey("new"));
  EXPECT_FALSE(c.deleteKey("new"));
  // A counter's text that is not a number is refused.
  EXPECT_THROW(c.add("k", 1), c10::DistStoreError);
  // A clone reaches the same keys.
  EXPECT_EQ(c.clone()->get("k"), Bytes("w"));
}

TEST_F(StoreTest, GetAndWaitBlockUntilTheKeyIsSetOrTheirTimeout) {
  absl::StatusOr<c10::intrusive_ptr<c10d::Store>> client = Client(kSecret);
  ASSERT_TRUE(client.ok()) << client.status();
  std::thread setter([this] {
    absl::SleepFor(absl::Milliseconds(50));
    host_->set("late", Bytes("here"));
  });
  EXPECT_EQ((*client)->get("late"), Bytes("here"));
  setter.join();
  (*client)->wait({"late"}, std::chrono::milliseconds(10));
  try {
    (*client)->wait({"never"}, std::chrono::milliseconds(20));
    ADD_FAILURE() << "waited on a key nobody sets";
  } catch (const c10::DistStoreError& e) {
    EXPECT_THAT(e.what(), HasSubstr("Timed out"));
  }
  // The connection still serves after a timeout.
  EXPECT_EQ((*client)->get("late"), Bytes("here"));
}

TEST_F(StoreTest, AClientWithoutTheSecretIsRefusedAndChangesNothing) {
  host_->set("pair/0/generation", Bytes("1"));
  for (const std::string& secret : {std::string(), std::string(kSecret) + "x",
                                    std::string("0123456789abcdef0123456789abcdeX-store-test")}) {
    absl::StatusOr<c10::intrusive_ptr<c10d::Store>> client = Client(secret);
    EXPECT_EQ(client.status().code(), StatusCode::kUnauthenticated) << client.status();
    EXPECT_THAT(std::string(client.status().message()), Not(HasSubstr(kSecret)));
  }
  // A raw client that skips the handshake and asks to write a key is
  // hung up on, told nothing.
  const int fd = Raw("127.0.0.1");
  ASSERT_GE(fd, 0);
  const std::string set = store_wire::Writer()
                              .Byte(static_cast<uint8_t>(store_wire::Op::kSet))
                              .Bytes("pair/0/generation")
                              .Bytes("99")
                              .body();
  ASSERT_TRUE(store_wire::SendFrame(fd, set, absl::Now() + absl::Seconds(10)).ok());
  absl::StatusOr<std::string> answer =
      store_wire::ReceiveFrame(fd, store_wire::kMaxFrameBytes, absl::Now() + absl::Seconds(30));
  EXPECT_EQ(answer.status().code(), StatusCode::kUnavailable) << answer.status();
  close(fd);
  EXPECT_EQ(host_->get("pair/0/generation"), Bytes("1"));
  EXPECT_EQ(host_->getNumKeys(), 1);
}

TEST_F(StoreTest, ASilentClientDoesNotHoldUpOthers) {
  const int silent = Raw("127.0.0.1");
  ASSERT_GE(silent, 0);
  absl::StatusOr<c10::intrusive_ptr<c10d::Store>> client = Client(kSecret);
  ASSERT_TRUE(client.ok()) << client.status();
  (*client)->set("k", Bytes("v"));
  EXPECT_EQ(host_->get("k"), Bytes("v"));
  close(silent);
}

TEST_F(StoreTest, ListensOnlyOnTheAddressItIsGiven) {
  // 127.0.0.2 is this machine too, but not the address the store was given.
  EXPECT_EQ(Raw("127.0.0.2"), -1);
  const int fd = Raw("127.0.0.1");
  EXPECT_GE(fd, 0);
  close(fd);
}

TEST_F(StoreTest, AnInsecureStoreServesEveryClient) {
  absl::StatusOr<int> port = PickFreeTcpPort("127.0.0.1");
  ASSERT_TRUE(port.ok()) << port.status();
  auto host = ConnectStore("127.0.0.1", *port, /*server=*/true, absl::Seconds(10), "");
  ASSERT_TRUE(host.ok()) << host.status();
  auto client = ConnectStore("127.0.0.1", *port, /*server=*/false, absl::Seconds(10), "any");
  ASSERT_TRUE(client.ok()) << client.status();
  (*client)->set("k", Bytes("v"));
  EXPECT_EQ((*host)->get("k"), Bytes("v"));
}

TEST_F(StoreTest, ClientsFailOnceTheHostIsGone) {
  absl::StatusOr<c10::intrusive_ptr<c10d::Store>> client = Client(kSecret);
  ASSERT_TRUE(client.ok()) << client.status();
  std::thread closer([this] {
    absl::SleepFor(absl::Milliseconds(50));
    host_.reset();
  });
  // Blocked on a key nobody sets: released when the host goes.
  EXPECT_THROW((*client)->wait({"never"}, std::chrono::milliseconds(60000)), c10::DistError);
  closer.join();
  EXPECT_THROW((*client)->add("n", 1), c10::DistNetworkError);
}

}  // namespace
}  // namespace trellis::comm
