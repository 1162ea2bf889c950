#include "web/page.h"

namespace trellis::web {

std::string DashboardPage(std::string_view data_json) {
  constexpr std::string_view kMarker = "/*TRELLIS_DATA*/";
  std::string data;
  if (data_json.empty()) {
    data = "null";
  } else {
    data.reserve(data_json.size());
    // '<' occurs only inside JSON strings, where \u003c means the same.
    for (char c : data_json) {
      if (c == '<') {
        data += "\\u003c";
      } else {
        data.push_back(c);
      }
    }
  }
  std::string page = kDashboardTemplate;
  const size_t at = page.find(kMarker);
  page.replace(at, kMarker.size(), data);
  return page;
}

}  // namespace trellis::web
