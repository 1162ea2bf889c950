#ifndef TRELLIS_COMM_STORE_SERVER_H_
#define TRELLIS_COMM_STORE_SERVER_H_

// The server of a job's rendezvous store: keys and values in memory,
// served over TCP on the one address it is given (store_wire.h is the
// wire). A client must first present the job's secret (compared in
// constant time); one that does not within kHandshakeTimeout, or presents
// another, is disconnected before any key is read or written, and is told
// nothing. With an empty secret (an insecure job) every client is served.
// store_client.h is the client; tcp_store.h ConnectStore makes both.

#include <atomic>
#include <list>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace trellis::comm {

class StoreServer {
 public:
  static constexpr absl::Duration kHandshakeTimeout = absl::Seconds(5);

  // Listens on host:port (host as given, never every interface) and serves
  // until destroyed. Unavailable, naming the address, when it cannot bind.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<StoreServer>> Start(const std::string& host,
                                                                          int port,
                                                                          std::string secret);

  // Disconnects every client (their blocked calls fail) and stops.
  ~StoreServer();

  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;

 private:
  struct Connection {
    int fd = -1;
    std::thread thread;
    std::atomic<bool> done{false};
  };

  StoreServer(int listen_fd, std::string secret);

  void Accept();
  void Serve(Connection* c);
  // Answers one request; false when the connection must close.
  bool Answer(int fd, const std::string& request);
  // Blocks until every key in `keys` is set, the deadline passes or the
  // server stops; whether they are all set.
  bool AwaitKeys(const std::vector<std::string>& keys, absl::Time deadline)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int listen_fd_;
  const std::string secret_;
  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  absl::flat_hash_map<std::string, std::vector<uint8_t>> keys_ ABSL_GUARDED_BY(mu_);
  std::list<std::unique_ptr<Connection>> connections_ ABSL_GUARDED_BY(mu_);
  std::thread acceptor_;
};

}  // namespace trellis::comm

#endif  // TRELLIS_COMM_STORE_SERVER_H_
