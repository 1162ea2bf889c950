#ifndef TRELLIS_TEXT_INTERNAL_UTF8_H_
#define TRELLIS_TEXT_INTERNAL_UTF8_H_

#include <cstddef>

#include "absl/strings/string_view.h"

namespace trellis::text::internal {

// Where the UTF-8 character after the one at byte `i` of `text` starts
// (past any continuation bytes; text.size() at the end).
inline size_t NextCharStart(absl::string_view text, size_t i) {
  do {
    ++i;
  } while (i < text.size() && (static_cast<unsigned char>(text[i]) & 0xC0) == 0x80);
  return i;
}

}  // namespace trellis::text::internal

#endif  // TRELLIS_TEXT_INTERNAL_UTF8_H_
