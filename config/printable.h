#ifndef TRELLIS_CONFIG_PRINTABLE_H_
#define TRELLIS_CONFIG_PRINTABLE_H_

// A user's string (a job's name, a path, a line of a data file) as it is
// echoed in errors and output: every control character written as a C
// escape, so that what is printed shows what the string holds and cannot
// move a terminal's cursor, recolor it or hide text (ESC starts terminal
// codes), and a NUL cannot cut the message short.

#include <cstddef>
#include <string>

#include "absl/strings/string_view.h"

namespace trellis::config {

// `s` with every control character escaped: \n, \t,
// \r, \xHH for the other C0 codes and DEL, \u00HH for the C1 codes (U+0080
// to U+009F, the 8-bit forms of ESC's sequences). Other bytes are kept.
// With `max_bytes` > 0, at most that many bytes of `s` are shown, then
// "...". The characters of `keep` (e.g. "\n\t" for a message of several
// lines) are kept as they are.
std::string Printable(absl::string_view s, size_t max_bytes = 0, absl::string_view keep = "");

// The offset of the first control character of `s` (C0, DEL or C1, as
// Printable escapes them) other than those in `allowed` (e.g. "\t\n"), or
// npos when there is none.
size_t FirstControl(absl::string_view s, absl::string_view allowed = "");

}  // namespace trellis::config

#endif  // TRELLIS_CONFIG_PRINTABLE_H_
