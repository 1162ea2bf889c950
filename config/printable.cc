#include "config/printable.h"

#include "absl/strings/str_format.h"

namespace trellis::config {
namespace {

// 2 for the two bytes of a C1 control's UTF-8 form (C2 80 to C2 9F) at
// s[i], 1 for a C0 control or DEL, 0 otherwise.
size_t ControlLength(absl::string_view s, size_t i) {
  const auto c = static_cast<unsigned char>(s[i]);
  if (c < 0x20 || c == 0x7f) return 1;
  if (c == 0xc2 && i + 1 < s.size()) {
    const auto next = static_cast<unsigned char>(s[i + 1]);
    if (next >= 0x80 && next <= 0x9f) return 2;
  }
  return 0;
}

}  // namespace

std::string Printable(absl::string_view s, size_t max_bytes, absl::string_view keep) {
  const bool cut = max_bytes > 0 && s.size() > max_bytes;
  if (cut) s = s.substr(0, max_bytes);
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    switch (keep.find(s[i]) == absl::string_view::npos ? ControlLength(s, i) : 0) {
      case 2:
        out += absl::StrFormat("\\u%04x", static_cast<unsigned char>(s[++i]));
        continue;
      case 1:
        out += c == '\n' ? "\\n" : c == '\t' ? "\\t" : c == '\r' ? "\\r"
                                                                   : absl::StrFormat("\\x%02x", c);
        continue;
      default:
        out += static_cast<char>(c);
    }
  }
  if (cut) out += "...";
  return out;
}

size_t FirstControl(absl::string_view s, absl::string_view allowed) {
  for (size_t i = 0; i < s.size(); ++i) {
    const size_t n = ControlLength(s, i);
    if (n == 2 || (n == 1 && allowed.find(s[i]) == absl::string_view::npos)) return i;
  }
  return absl::string_view::npos;
}

}  // namespace trellis::config
