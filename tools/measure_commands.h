#ifndef TRELLIS_TOOLS_MEASURE_COMMANDS_H_
#define TRELLIS_TOOLS_MEASURE_COMMANDS_H_

// The measuring commands of `trellis` (README "Where the memory and time
// went"):
//   trellis plan [JOB.yaml] [--json FILE]
//   trellis probe [JOB.yaml] --vary KEY=V1,V2,... [--steps N] [--role ROLE] [--out DIR]
//   trellis compare RUN_A RUN_B [...] [--tolerance X] [--budget X]

#include <map>
#include <ostream>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace trellis::tools {

// The flags `command` (plan, probe or compare) takes.
std::set<std::string> MeasureFlags(const std::string& command);

// Runs `command` with its parsed flags and positional arguments, printing
// to `out`. InvalidArgument names a bad flag value or argument.
[[nodiscard]] absl::Status RunMeasureCommand(const std::string& command,
                                             const std::map<std::string, std::string>& flags,
                                             const std::vector<std::string>& positional,
                                             std::ostream& out);

}  // namespace trellis::tools

#endif  // TRELLIS_TOOLS_MEASURE_COMMANDS_H_
