#ifndef TRELLIS_TEXT_INTERNAL_REGEX_H_
#define TRELLIS_TEXT_INTERNAL_REGEX_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace trellis::text::internal {

// A compiled PCRE2 pattern in UTF mode with Unicode properties for \s, \w
// and \d (PCRE2_UCP), the dialect of tokenizer.json's split patterns.
// Immutable and thread-safe.
class Regex {
 public:
  // Fails with InvalidArgument naming the offset and PCRE2's reason.
  static absl::StatusOr<Regex> Compile(absl::string_view pattern);

  // Appends to `pieces` the parts of `text` in order: every match and every
  // stretch between matches (the "Isolated" behaviour of a Split
  // pre-tokenizer), none empty. Fails on text that is not UTF-8.
  [[nodiscard]] absl::Status Split(absl::string_view text,
                                   std::vector<absl::string_view>* pieces) const;

 private:
  struct Code;
  explicit Regex(std::shared_ptr<const Code> code) : code_(std::move(code)) {}
  std::shared_ptr<const Code> code_;
};

}  // namespace trellis::text::internal

#endif  // TRELLIS_TEXT_INTERNAL_REGEX_H_
