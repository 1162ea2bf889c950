#include "comm/store_client.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <torch/csrc/distributed/c10d/exception.h>
#include <unistd.h>

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "comm/dial.h"
#include "comm/store_server.h"
#include "comm/store_wire.h"

namespace trellis::comm {
namespace {

using store_wire::Op;
using store_wire::Reader;
using store_wire::Reply;
using store_wire::Writer;

std::string Where(const StoreClient::Address& a) {
  return absl::StrCat("the rendezvous store at ", a.host, ":", a.port);
}

std::string AsString(const std::vector<uint8_t>& v) { return {v.begin(), v.end()}; }
std::vector<uint8_t> AsBytes(const std::string& s) { return {s.begin(), s.end()}; }

// A connected socket to the address, retrying refusals until `deadline`.
absl::StatusOr<int> Dial(const StoreClient::Address& address, absl::Time deadline) {
  absl::StatusOr<int> fd = DialTcp(address.host, address.port, deadline);
  if (!fd.ok()) {
    return absl::UnavailableError(
        absl::StrCat("comm: reaching ", Where(address), ": ", fd.status().message()));
  }
  const int one = 1;
  setsockopt(*fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return fd;
}

}  // namespace

absl::StatusOr<c10::intrusive_ptr<StoreClient>> StoreClient::Connect(
    const Address& address, absl::Duration timeout, std::shared_ptr<StoreServer> server) {
  const absl::Time deadline = absl::Now() + timeout;
  absl::StatusOr<int> fd = Dial(address, deadline);
  if (!fd.ok()) return fd.status();
  // The server answers a handshake within moments; allow a short timeout
  // that long.
  const absl::Time answer_by = std::max(deadline, absl::Now() + absl::Seconds(2));
  absl::Status sent =
      store_wire::SendFrame(*fd, store_wire::HandshakeBody(address.secret), answer_by);
  absl::StatusOr<std::string> answer =
      sent.ok() ? store_wire::ReceiveFrame(*fd, store_wire::kMaxHandshakeBytes, answer_by)
                : absl::StatusOr<std::string>(sent);
  if (!answer.ok() || *answer != store_wire::kHandshakeOk) {
    close(*fd);
    if (answer.status().code() == absl::StatusCode::kDeadlineExceeded) {
      return absl::UnavailableError(
          absl::StrCat("comm: ", Where(address), " did not answer the handshake"));
    }
    return absl::UnauthenticatedError(absl::StrCat(
        "comm: ", Where(address),
        " refused this process (it does not hold the job's secret, or the port is not a "
        "Trellis store)"));
  }
  const auto ms =
      std::chrono::milliseconds(std::max<int64_t>(1, absl::ToInt64Milliseconds(timeout)));
  return c10::make_intrusive<StoreClient>(address, *fd, ms, std::move(server));
}

StoreClient::StoreClient(Address address, int fd, std::chrono::milliseconds timeout,
                         std::shared_ptr<StoreServer> server)
    : c10d::Store(timeout), address_(std::move(address)), server_(std::move(server)), fd_(fd) {}

StoreClient::~StoreClient() {
  if (fd_ >= 0) close(fd_);
}

std::string StoreClient::Call(const std::string& request, std::chrono::milliseconds waits) {
  std::lock_guard<std::mutex> lock(mu_);
  if (broken_) {
    C10_THROW_ERROR(DistNetworkError,
                    absl::StrCat("comm: the connection to ", Where(address_), " was lost"));
  }
  const absl::Time deadline = absl::Now() + absl::FromChrono(waits) + absl::FromChrono(timeout_);
  absl::Status sent = store_wire::SendFrame(fd_, request, deadline);
  absl::StatusOr<std::string> answer =
      sent.ok() ? store_wire::ReceiveFrame(fd_, store_wire::kMaxFrameBytes, deadline)
                : absl::StatusOr<std::string>(sent);
  uint8_t code = 0;
  if (!answer.ok() || !Reader(*answer).Byte(&code)) {
    // A late answer would be taken for the next request's: never reuse.
    broken_ = true;
    C10_THROW_ERROR(DistNetworkError,
                    absl::StrCat("comm: ", Where(address_), ": ",
                                 answer.ok() ? "empty answer" : answer.status().message()));
  }
  if (code == static_cast<uint8_t>(Reply::kTimedOut)) {
    C10_THROW_ERROR(DistStoreError, absl::StrCat("Timed out after ", waits.count(),
                                                 " ms waiting on ", Where(address_)));
  }
  if (code != static_cast<uint8_t>(Reply::kOk)) {
    C10_THROW_ERROR(DistStoreError, absl::StrCat(Where(address_), " refused the request"));
  }
  return answer->substr(1);
}

c10::intrusive_ptr<c10d::Store> StoreClient::clone() {
  absl::StatusOr<c10::intrusive_ptr<StoreClient>> c =
      Connect(address_, absl::FromChrono(timeout_), server_);
  if (!c.ok()) C10_THROW_ERROR(DistNetworkError, std::string(c.status().message()));
  return *std::move(c);
}

void StoreClient::set(const std::string& key, const std::vector<uint8_t>& value) {
  Call(Writer().Byte(static_cast<uint8_t>(Op::kSet)).Bytes(key).Bytes(AsString(value)).body(),
       std::chrono::milliseconds(0));
}

namespace {

std::vector<uint8_t> BytesOf(const std::string& fields) {
  std::string value;
  Reader(fields).Bytes(&value);
  return AsBytes(value);
}

int64_t IntOf(const std::string& fields) {
  int64_t v = 0;
  Reader(fields).Int(&v);
  return v;
}

}  // namespace

std::vector<uint8_t> StoreClient::compareSet(const std::string& key,
                                             const std::vector<uint8_t>& expected,
                                             const std::vector<uint8_t>& desired) {
  return BytesOf(Call(Writer()
                          .Byte(static_cast<uint8_t>(Op::kCompareSet))
                          .Bytes(key)
                          .Bytes(AsString(expected))
                          .Bytes(AsString(desired))
                          .body(),
                      std::chrono::milliseconds(0)));
}

std::vector<uint8_t> StoreClient::get(const std::string& key) {
  const std::chrono::milliseconds waits = timeout_;
  return BytesOf(Call(
      Writer().Byte(static_cast<uint8_t>(Op::kGet)).Bytes(key).Int(waits.count()).body(), waits));
}

int64_t StoreClient::add(const std::string& key, int64_t value) {
  return IntOf(Call(Writer().Byte(static_cast<uint8_t>(Op::kAdd)).Bytes(key).Int(value).body(),
                    std::chrono::milliseconds(0)));
}

bool StoreClient::deleteKey(const std::string& key) {
  return IntOf(Call(Writer().Byte(static_cast<uint8_t>(Op::kDelete)).Bytes(key).body(),
                    std::chrono::milliseconds(0))) != 0;
}

bool StoreClient::check(const std::vector<std::string>& keys) {
  return IntOf(Call(Writer().Byte(static_cast<uint8_t>(Op::kCheck)).Strings(keys).body(),
                    std::chrono::milliseconds(0))) != 0;
}

int64_t StoreClient::getNumKeys() {
  return IntOf(
      Call(Writer().Byte(static_cast<uint8_t>(Op::kNumKeys)).body(), std::chrono::milliseconds(0)));
}

void StoreClient::wait(const std::vector<std::string>& keys) { wait(keys, timeout_); }

void StoreClient::wait(const std::vector<std::string>& keys,
                       const std::chrono::milliseconds& timeout) {
  Call(Writer().Byte(static_cast<uint8_t>(Op::kWait)).Strings(keys).Int(timeout.count()).body(),
       timeout);
}

}  // namespace trellis::comm
