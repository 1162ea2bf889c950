#ifndef TRELLIS_TEXT_INTERNAL_UTF8_H_
#define TRELLIS_TEXT_INTERNAL_UTF8_H_

#include <cstddef>
#include <string>

#include "absl/strings/string_view.h"

namespace trellis::text::internal {

// U+FFFD REPLACEMENT CHARACTER.
inline constexpr char kUtf8Replacement[] = "\xEF\xBF\xBD";

// Where the UTF-8 character after the one at byte `i` of `text` starts
// (past any continuation bytes; text.size() at the end).
inline size_t NextCharStart(absl::string_view text, size_t i) {
  do {
    ++i;
  } while (i < text.size() && (static_cast<unsigned char>(text[i]) & 0xC0) == 0x80);
  return i;
}

// Appends `bytes` to *out as valid UTF-8: each maximal ill-formed subpart
// (Unicode 3.9, table 3-7: a lead byte and the continuation bytes that fit
// it, or one stray byte) becomes U+FFFD, as Rust's String::from_utf8_lossy
// (and so Hugging Face's byte-level decoder) does.
inline void AppendUtf8Lossy(absl::string_view bytes, std::string* out) {
  size_t i = 0;
  while (i < bytes.size()) {
    const unsigned char lead = static_cast<unsigned char>(bytes[i]);
    if (lead < 0x80) {
      out->push_back(static_cast<char>(lead));
      ++i;
      continue;
    }
    // The sequence's length and the range of its second byte.
    int length = 0;
    unsigned char low = 0x80, high = 0xBF;
    if (lead >= 0xC2 && lead <= 0xDF) {
      length = 2;
    } else if (lead >= 0xE0 && lead <= 0xEF) {
      length = 3;
      if (lead == 0xE0) low = 0xA0;
      if (lead == 0xED) high = 0x9F;
    } else if (lead >= 0xF0 && lead <= 0xF4) {
      length = 4;
      if (lead == 0xF0) low = 0x90;
      if (lead == 0xF4) high = 0x8F;
    }
    int fit = 1;  // bytes of a well-formed prefix
    while (length > 0 && fit < length && i + fit < bytes.size()) {
      const unsigned char c = static_cast<unsigned char>(bytes[i + fit]);
      const bool ok = fit == 1 ? (c >= low && c <= high) : (c >= 0x80 && c <= 0xBF);
      if (!ok) break;
      ++fit;
    }
    if (length > 0 && fit == length) {
      out->append(bytes.data() + i, length);
    } else {
      out->append(kUtf8Replacement);
    }
    i += fit;
  }
}

}  // namespace trellis::text::internal

#endif  // TRELLIS_TEXT_INTERNAL_UTF8_H_
