#include "text/internal/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <cstddef>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "text/internal/utf8.h"

namespace trellis::text::internal {

struct Regex::Code {
  pcre2_code* code = nullptr;
  ~Code() { pcre2_code_free(code); }
};

namespace {

std::string ErrorMessage(int code) {
  PCRE2_UCHAR buffer[256];
  const int n = pcre2_get_error_message(code, buffer, sizeof(buffer));
  return n < 0 ? absl::StrCat("PCRE2 error ", code)
               : std::string(reinterpret_cast<const char*>(buffer), static_cast<size_t>(n));
}

struct MatchData {
  explicit MatchData(const pcre2_code* code)
      : data(pcre2_match_data_create_from_pattern(code, nullptr)) {}
  ~MatchData() { pcre2_match_data_free(data); }
  pcre2_match_data* data;
};

}  // namespace

absl::StatusOr<Regex> Regex::Compile(absl::string_view pattern) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   PCRE2_UTF | PCRE2_UCP, &error, &offset, nullptr);
  if (code == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("regex at offset ", offset, ": ", ErrorMessage(error)));
  }
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // where JIT is missing PCRE2 interprets
  auto owned = std::make_shared<Code>();
  owned->code = code;
  return Regex(std::move(owned));
}

absl::Status Regex::Split(absl::string_view text, std::vector<absl::string_view>* pieces) const {
  MatchData match(code_->code);
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t start = 0;    // where the next search begins
  size_t emitted = 0;  // text before this is in `pieces`
  uint32_t options = 0;
  while (start <= text.size()) {
    const int rc =
        pcre2_match(code_->code, subject, text.size(), start, options, match.data, nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      // Bad UTF-8 is reported where it is; other failures where the search began.
      const bool bad_utf8 = rc <= PCRE2_ERROR_UTF8_ERR1 && rc >= PCRE2_ERROR_UTF8_ERR21;
      return absl::InvalidArgumentError(
          absl::StrCat("text at byte ", bad_utf8 ? pcre2_get_startchar(match.data) : start, ": ",
                       ErrorMessage(rc)));
    }
    options = PCRE2_NO_UTF_CHECK;  // the whole subject was checked on the first call
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match.data);
    const size_t begin = ovector[0];
    const size_t end = ovector[1];
    if (end == begin) {  // an empty match: move on by one character
      if (begin >= text.size()) break;
      start = NextCharStart(text, begin);
      continue;
    }
    if (begin > emitted) pieces->push_back(text.substr(emitted, begin - emitted));
    pieces->push_back(text.substr(begin, end - begin));
    emitted = end;
    start = end;
  }
  if (emitted < text.size()) pieces->push_back(text.substr(emitted));
  return absl::OkStatus();
}

}  // namespace trellis::text::internal
