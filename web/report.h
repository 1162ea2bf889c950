#ifndef TRELLIS_WEB_REPORT_H_
#define TRELLIS_WEB_REPORT_H_

// `trellis report RUN_DIR`: the dashboard's views of a finished run as one
// static HTML file, RUN_DIR/report.html, with everything inlined (styles,
// script, data; no external reference): the step table, the stage
// timeline per role, memory by object over time, the ratios per step, the
// ledger's peak table (summary.json "memory"), evaluations, and the
// strategy comparison when the run directory has one (compare.json).
//
// Reads only the run directory: ledger.jsonl, summary.json, job.yaml,
// compare.json (optional).

#include <string>

#include "absl/status/statusor.h"

namespace trellis::web {

// Writes RUN_DIR/report.html (atomically) and returns its path.
// FailedPrecondition when RUN_DIR has no summary.json (the run has not
// finished), NotFound when ledger.jsonl or job.yaml is missing,
// InvalidArgument naming the file (and line) of malformed content.
[[nodiscard]] absl::StatusOr<std::string> WriteReport(const std::string& run_dir);

}  // namespace trellis::web

#endif  // TRELLIS_WEB_REPORT_H_
