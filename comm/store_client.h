#ifndef TRELLIS_COMM_STORE_CLIENT_H_
#define TRELLIS_COMM_STORE_CLIENT_H_

// A client of a job's rendezvous store (store_server.h) as a c10d::Store,
// so that c10d's ProcessGroupGloo, the weight transports and the learner
// group use it as they used c10d's TCPStore. It presents the job's secret
// once, on connecting. Operations are serialized on one connection; a
// blocking get or wait gives up after the store's timeout (getTimeout) or
// the one it is given, throwing c10::DistStoreError; a lost connection
// throws c10::DistNetworkError, and so does every later operation.

#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace trellis::comm {

class StoreServer;

class StoreClient : public c10d::Store {
 public:
  // Where a client connects and what it presents.
  struct Address {
    std::string host;
    int port = 0;
    // Empty: an insecure job's store.
    std::string secret;
  };

  // Connects to the store at `address` (retrying a refused connection
  // until `timeout` has passed) and presents the secret. `server`, when
  // set, is the store this process hosts there: the client (and its
  // clones) keep it serving. Unavailable naming the
  // address when nothing answers; Unauthenticated when the store hangs up
  // on the secret.
  [[nodiscard]] static absl::StatusOr<c10::intrusive_ptr<StoreClient>> Connect(
      const Address& address, absl::Duration timeout, std::shared_ptr<StoreServer> server);

  // Takes a connected, authenticated socket `fd` (Connect makes one).
  StoreClient(Address address, int fd, std::chrono::milliseconds timeout,
              std::shared_ptr<StoreServer> server);
  ~StoreClient() override;

  c10::intrusive_ptr<c10d::Store> clone() override;
  void set(const std::string& key, const std::vector<uint8_t>& value) override;
  std::vector<uint8_t> compareSet(const std::string& key, const std::vector<uint8_t>& expected,
                                  const std::vector<uint8_t>& desired) override;
  std::vector<uint8_t> get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t value) override;
  bool deleteKey(const std::string& key) override;
  bool check(const std::vector<std::string>& keys) override;
  int64_t getNumKeys() override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override;

 private:
  // Sends `request` and returns the answer's fields after its Reply byte;
  // `waits` is how long the server may block on it. Throws as above.
  std::string Call(const std::string& request, std::chrono::milliseconds waits);

  const Address address_;
  std::shared_ptr<StoreServer> server_;
  std::mutex mu_;
  int fd_ = -1;
  bool broken_ = false;
};

}  // namespace trellis::comm

#endif  // TRELLIS_COMM_STORE_CLIENT_H_
