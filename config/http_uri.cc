#include "config/http_uri.h"

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace trellis::config {

std::string HttpUri::ToString() const { return absl::StrCat(scheme, "://", host, ":", port); }

absl::StatusOr<HttpUri> ParseHttpUri(absl::string_view uri) {
  const auto bad = [uri] {
    return absl::InvalidArgumentError(
        absl::StrCat("expected http://host:port or https://host:port, found \"", uri, "\""));
  };
  HttpUri parsed;
  absl::string_view rest = uri;
  if (absl::ConsumePrefix(&rest, "http://")) {
    parsed.scheme = "http";
  } else if (absl::ConsumePrefix(&rest, "https://")) {
    parsed.scheme = "https";
  } else {
    return bad();
  }
  absl::ConsumeSuffix(&rest, "/");
  const size_t colon = rest.rfind(':');
  if (colon == absl::string_view::npos || colon == 0) return bad();
  parsed.host = std::string(rest.substr(0, colon));
  for (const char c : parsed.host) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '.' && c != '_') {
      return bad();
    }
  }
  const absl::string_view port = rest.substr(colon + 1);
  if (port.empty() || port.size() > 5) return bad();
  for (const char c : port) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) return bad();
  }
  if (!absl::SimpleAtoi(port, &parsed.port) || parsed.port < 1 || parsed.port > 65535) {
    return bad();
  }
  return parsed;
}

}  // namespace trellis::config
