#ifndef TRELLIS_OBSERVE_HTTP_CLIENT_H_
#define TRELLIS_OBSERVE_HTTP_CLIENT_H_

// JSON over HTTP to one server, for the MLflow sink (mlflow_sink.h); tests
// put a fake in its place.

#include <map>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "config/http_uri.h"

namespace trellis::observe {

class HttpClient {
 public:
  virtual ~HttpClient() = default;
  // GET `path` with `query` (encoded here), or POST `body` (JSON) to it.
  // The response's body for a 2xx status; NotFound for 404, Unavailable
  // when the server did not answer, Internal for another status, each
  // naming the path and quoting the start of the response.
  [[nodiscard]] virtual absl::StatusOr<std::string> Get(
      const std::string& path, const std::map<std::string, std::string>& query) = 0;
  [[nodiscard]] virtual absl::StatusOr<std::string> Post(const std::string& path,
                                                         const std::string& body) = 0;
};

// cpp-httplib's client for `uri`: connecting gives up after 2 s, a request
// after 10 s.
std::unique_ptr<HttpClient> NewHttpClient(const config::HttpUri& uri);

}  // namespace trellis::observe

#endif  // TRELLIS_OBSERVE_HTTP_CLIENT_H_
