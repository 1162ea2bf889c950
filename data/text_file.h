#ifndef TRELLIS_DATA_TEXT_FILE_H_
#define TRELLIS_DATA_TEXT_FILE_H_

// Writing the small text files a run leaves behind (job.yaml, addresses,
// process tables, checkpoint state) so that a reader never sees half of one.

#include <string>

#include "absl/status/status.h"

namespace trellis::data {

// Writes `text` to path.tmp, fsyncs it, and renames it over `path`. The
// error names the file and the failed step.
[[nodiscard]] absl::Status WriteTextFileAtomically(const std::string& path,
                                                   const std::string& text);

}  // namespace trellis::data

#endif  // TRELLIS_DATA_TEXT_FILE_H_
