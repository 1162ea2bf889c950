#ifndef TRELLIS_TOOLS_VERIFY_COMMAND_H_
#define TRELLIS_TOOLS_VERIFY_COMMAND_H_

// `trellis verify`: scores JSONL samples with one verifier, no training.

#include <ostream>
#include <string>
#include <vector>

namespace trellis::tools {

// args: --verifier NAME [--config KEY=VALUE ...] [--items] DATA.jsonl.
// Each line of DATA.jsonl is {"prompt", "response", "answer", ...}; other
// fields go to the verifier as metadata. Prints counts per verdict and the
// mean reward (--items: one line per sample first). Returns the exit code:
// 0, 1 when the data cannot be read, 2 for a usage or config error.
// The verifier comes from roles::MakeVerifier: a built-in, or a kind added
// by roles::AddVerifierKinds.
int VerifyCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace trellis::tools

#endif  // TRELLIS_TOOLS_VERIFY_COMMAND_H_
