#ifndef TRELLIS_TOOLS_ANSWER_COMMANDS_H_
#define TRELLIS_TOOLS_ANSWER_COMMANDS_H_

// What a model reads and what it said:
//
//   trellis tokenize JOB_OR_MODEL_DIR TEXT [--pieces]
//       The token ids of TEXT (text::Tokenizer::Encode: no BOS or EOS
//       added), on one line; --pieces: one line per token, its id and its
//       decoded text (special tokens decode to "").
//   trellis chat JOB_OR_MODEL_DIR CONVERSATION.json [--generation-prompt]
//       The conversation rendered with the chat template
//       (chat::ChatTemplate::Render), as transformers' apply_chat_template
//       renders it, with the generation prompt when asked. The file holds a
//       list of messages, or an object with "messages" (and "tools").
//
// JOB_OR_MODEL_DIR is a job's YAML, a run directory (its job.yaml) or a
// Hugging Face model directory; a job without model.path has the built-in
// character tokenizer and no chat template. Output is escaped as
// config/printable.h escapes it (newlines and tabs kept).
//
// And `trellis report`'s look at the last evaluation's answers
// (loop/eval_answers.h).

#include <iostream>
#include <ostream>
#include <string>
#include <vector>

namespace trellis::tools {

// `command` ("tokenize" or "chat") with its arguments. Returns the exit
// code: 0, 1 when the model, the text or the conversation cannot be used,
// 2 for a usage error.
int TextCommand(const std::string& command, const std::vector<std::string>& args,
                std::ostream& out = std::cout, std::ostream& err = std::cerr);

// Up to `items` items of RUN_DIR's last evaluation (RUN_DIR/eval/, the
// newest label), each with its prompt (its end), response and answer cut
// to a few lines' length and escaped, its verdict and reward, unscored
// items marked; "" when the run wrote no answers. A file that cannot be
// read or parsed is named with the reason instead.
std::string EvalSample(const std::string& run_dir, int items = 3);

}  // namespace trellis::tools

#endif  // TRELLIS_TOOLS_ANSWER_COMMANDS_H_
