#ifndef TRELLIS_JINJA_STATUS_MACROS_H_
#define TRELLIS_JINJA_STATUS_MACROS_H_

// Early returns for the parser and interpreter, whose every step can fail.

#include <utility>

#include "absl/status/status.h"

#define JINJA_RETURN_IF_ERROR(expr)    \
  do {                                 \
    absl::Status jinja_status_ = (expr); \
    if (!jinja_status_.ok()) return jinja_status_; \
  } while (0)

#define JINJA_CONCAT_INNER(a, b) a##b
#define JINJA_CONCAT(a, b) JINJA_CONCAT_INNER(a, b)
#define JINJA_ASSIGN_OR_RETURN(lhs, expr) \
  JINJA_ASSIGN_OR_RETURN_IMPL(JINJA_CONCAT(jinja_statusor_, __LINE__), lhs, expr)
#define JINJA_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                \
  if (!tmp.ok()) return tmp.status();               \
  lhs = std::move(*tmp)

#endif  // TRELLIS_JINJA_STATUS_MACROS_H_
