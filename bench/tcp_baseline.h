#ifndef TRELLIS_BENCH_TCP_BASELINE_H_
#define TRELLIS_BENCH_TCP_BASELINE_H_

// The plain-TCP baseline the weight-sync benchmarks measure beside each
// repetition: loopback socket pairs moving buffers, no framing.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#include "bench/timing.h"

namespace trellis::bench {

// One loopback connection per entry of `src` (into `dst`, of the same
// sizes), all moving at once: the seconds from connecting to the last byte
// read.
inline double TcpStreamsSeconds(const std::vector<std::vector<char>>& src,
                                std::vector<std::vector<char>>& dst) {
  const size_t streams = src.size();
  std::vector<int> listeners(streams);
  std::vector<sockaddr_in> addrs(streams);
  for (size_t i = 0; i < streams; ++i) {
    listeners[i] = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in& addr = addrs[i];
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    if (bind(listeners[i], reinterpret_cast<sockaddr*>(&addr), len) != 0 ||
        listen(listeners[i], 1) != 0 ||
        getsockname(listeners[i], reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      std::perror("tcp baseline");
      std::exit(1);
    }
  }
  const Clock::time_point start = Clock::now();
  {
    std::vector<std::jthread> threads;
    for (size_t i = 0; i < streams; ++i) {
      threads.emplace_back([&, i] {
        const int fd = accept(listeners[i], nullptr, nullptr);
        for (size_t got = 0; got < dst[i].size();) {
          const ssize_t r = read(fd, dst[i].data() + got, dst[i].size() - got);
          if (r <= 0) break;
          got += static_cast<size_t>(r);
        }
        close(fd);
      });
      threads.emplace_back([&, i] {
        const int fd = socket(AF_INET, SOCK_STREAM, 0);
        if (connect(fd, reinterpret_cast<sockaddr*>(&addrs[i]), sizeof(addrs[i])) != 0) {
          std::perror("tcp baseline connect");
          std::exit(1);
        }
        for (size_t sent = 0; sent < src[i].size();) {
          const ssize_t w = write(fd, src[i].data() + sent, src[i].size() - sent);
          if (w <= 0) break;
          sent += static_cast<size_t>(w);
        }
        close(fd);
      });
    }
  }
  const double seconds = Since(start);
  for (int fd : listeners) close(fd);
  return seconds;
}

}  // namespace trellis::bench

#endif  // TRELLIS_BENCH_TCP_BASELINE_H_
