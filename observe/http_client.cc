#include "observe/http_client.h"

#include <httplib.h>

#include <utility>

#include "absl/strings/str_cat.h"

namespace trellis::observe {
namespace {

class HttplibClient final : public HttpClient {
 public:
  explicit HttplibClient(const config::HttpUri& uri) : client_(uri.ToString()) {
    client_.set_connection_timeout(2, 0);
    client_.set_read_timeout(10, 0);
    client_.set_write_timeout(10, 0);
  }

  absl::StatusOr<std::string> Get(const std::string& path,
                                  const std::map<std::string, std::string>& query) override {
    httplib::Params params(query.begin(), query.end());
    return Answer("GET", path, client_.Get(path, params, httplib::Headers{}));
  }

  absl::StatusOr<std::string> Post(const std::string& path, const std::string& body) override {
    return Answer("POST", path, client_.Post(path, body, "application/json"));
  }

 private:
  static absl::StatusOr<std::string> Answer(const char* method, const std::string& path,
                                            const httplib::Result& result) {
    if (!result) {
      return absl::UnavailableError(absl::StrCat(method, " ", path, ": no answer (",
                                                 httplib::to_string(result.error()), ")"));
    }
    if (result->status >= 200 && result->status < 300) return result->body;
    const std::string message = absl::StrCat(method, " ", path, ": HTTP ", result->status, ": ",
                                             result->body.substr(0, 200));
    if (result->status == 404) return absl::NotFoundError(message);
    return absl::InternalError(message);
  }

  httplib::Client client_;
};

}  // namespace

std::unique_ptr<HttpClient> NewHttpClient(const config::HttpUri& uri) {
  return std::make_unique<HttplibClient>(uri);
}

}  // namespace trellis::observe
