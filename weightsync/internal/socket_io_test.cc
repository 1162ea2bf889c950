#include "weightsync/internal/socket_io.h"

#include <sys/socket.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace trellis::weightsync::internal {
namespace {

struct Pair {
  Socket client;
  Socket server;
};

Pair Connected() {
  absl::StatusOr<Listening> listening = Listen("127.0.0.1");
  EXPECT_TRUE(listening.ok()) << listening.status();
  if (!listening.ok()) return {};
  absl::StatusOr<Socket> client =
      Connect("127.0.0.1", listening->port, absl::Now() + absl::Seconds(30));
  EXPECT_TRUE(client.ok()) << client.status();
  if (!client.ok()) return {};
  for (;;) {
    absl::StatusOr<Socket> server = Accept(listening->socket);
    EXPECT_TRUE(server.ok()) << server.status();
    if (!server.ok()) return {};
    if (server->valid()) return Pair{*std::move(client), *std::move(server)};
  }
}

int Mark(const Socket& socket) {
  int mark = -1;
  socklen_t len = sizeof(mark);
  EXPECT_EQ(getsockopt(socket.fd(), SOL_SOCKET, SO_RCVLOWAT, &mark, &len), 0);
  return mark;
}

TEST(ReceiveLowWaterTest, MarksAPieceOnlyWhileTwiceItIsStillToCome) {
  Pair pair = Connected();
  ASSERT_TRUE(pair.server.valid());
  {
    ReceiveLowWater water(pair.server, 1000 + 1000 + 600 + 8);
    ASSERT_TRUE(water.Next(1000).ok());
    EXPECT_EQ(Mark(pair.server), 1000);  // 2608 to come.
    ASSERT_TRUE(water.Next(1000).ok());
    EXPECT_EQ(Mark(pair.server), 1);  // 1608: the tail.
    ASSERT_TRUE(water.Next(600).ok());
    EXPECT_EQ(Mark(pair.server), 1);
    ASSERT_TRUE(water.Next(8).ok());
    EXPECT_EQ(Mark(pair.server), 1);
  }
  {
    ReceiveLowWater water(pair.server, 1 << 20);
    ASSERT_TRUE(water.Next(4096).ok());
    EXPECT_EQ(Mark(pair.server), 4096);
  }
  // Gone (here midway, as after a failed read): the socket wakes its
  // reader at every byte again.
  EXPECT_EQ(Mark(pair.server), 1);
}

TEST(ReceiveLowWaterTest, AStreamSentInSmallWritesArrivesWhole) {
  Pair pair = Connected();
  ASSERT_TRUE(pair.server.valid());
  const std::vector<int64_t> pieces = {65536, 65536, 65536, 12345, 8};
  const int64_t total = std::accumulate(pieces.begin(), pieces.end(), int64_t{0});
  std::vector<uint8_t> sent(static_cast<size_t>(total));
  for (size_t i = 0; i < sent.size(); ++i) sent[i] = static_cast<uint8_t>(i * 7 + i / 251);
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  absl::Status sending;
  {
    std::jthread sender([&] {
      for (size_t at = 0; at < sent.size() && sending.ok(); at += 1000) {
        sending = SendAll(pair.client, sent.data() + at, std::min<size_t>(1000, sent.size() - at),
                          deadline, "test");
      }
    });
    std::vector<uint8_t> got(sent.size());
    ReceiveLowWater water(pair.server, total);
    int64_t at = 0;
    for (int64_t n : pieces) {
      ASSERT_TRUE(water.Next(n).ok());
      ASSERT_TRUE(
          RecvAll(pair.server, got.data() + at, static_cast<size_t>(n), deadline, "test").ok());
      at += n;
    }
    EXPECT_EQ(got, sent);
  }
  EXPECT_TRUE(sending.ok()) << sending;
}

}  // namespace
}  // namespace trellis::weightsync::internal
