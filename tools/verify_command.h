#ifndef TRELLIS_TOOLS_VERIFY_COMMAND_H_
#define TRELLIS_TOOLS_VERIFY_COMMAND_H_

// `trellis verify`: scores JSONL samples with one verifier, no training.

#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "verifier/verifier.h"

namespace trellis::tools {

// args: --verifier NAME [--config KEY=VALUE ...] [--items] DATA.jsonl.
// Each line of DATA.jsonl is {"prompt", "response", "answer", ...}; other
// fields go to the verifier as metadata. Prints counts per verdict and the
// mean reward (--items: one line per sample first). Returns the exit code:
// 0, 1 when the data cannot be read, 2 for a usage or config error.
// `register_more`, when set, registers verifiers beyond the built-ins (e.g.
// RegisterRemoteVerifier from verifier_service.h, which needs gRPC).
int VerifyCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err,
                  const std::function<absl::Status(verifier::VerifierRegistry&)>& register_more = {});

}  // namespace trellis::tools

#endif  // TRELLIS_TOOLS_VERIFY_COMMAND_H_
