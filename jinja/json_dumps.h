#ifndef TRELLIS_JINJA_JSON_DUMPS_H_
#define TRELLIS_JINJA_JSON_DUMPS_H_

// Python's json.dumps, which transformers installs as the tojson filter
// (ensure_ascii=False by default, no HTML escaping): keys in their written
// order unless sort_keys, ", " and ": " between items without an indent,
// "," and a newline with one, floats as Python's repr.

#include <optional>
#include <string>

#include "jinja/value.h"

namespace trellis::jinja {

struct DumpsOptions {
  bool ensure_ascii = false;
  // Spaces per level; none writes everything on one line.
  std::optional<int> indent;
  // (item separator, key separator); none takes json.dumps' defaults.
  std::optional<std::pair<std::string, std::string>> separators;
  bool sort_keys = false;
};

std::string JsonDumps(const Json& j, const DumpsOptions& options);

}  // namespace trellis::jinja

#endif  // TRELLIS_JINJA_JSON_DUMPS_H_
