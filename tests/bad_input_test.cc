// `trellis resolve`, `plan` and `run` end every kind of oversized or
// malformed input with the same clear error and exit code: no abort, no
// allocation of the input's expanded size, no hang. The job files (10,000
// duplicate LoRA targets, a YAML alias bomb, a NUL in a path, terminal
// codes in a name, an unknown verifier, a remote verifier without an
// address, a vocabulary smaller than the tokenizer's, Parquet columns
// that name one column twice) are refused by all three, through the
// shared loop::PrepareJob; the data and chat template inputs (a data line
// past its bound, a chat message past its bound, Parquet shards without
// the prompt column, a template with a huge loop or a huge output) by
// `plan` and `run`, the two that read data. Every input is generated here
// but the Parquet shards, tests/fixtures/parquet's.

#include <sys/wait.h>

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "data/dataset.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/tiny_job.h"

namespace trellis {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;
using testing_util::Slurp;
using testing_util::StartTrellis;
using testing_util::Wait;
using testing_util::WriteText;

const std::vector<std::string> kPrepared = {"resolve", "plan", "run"};
const std::vector<std::string> kWithData = {"plan", "run"};

struct BadInput {
  const char* name;
  // Writes what the job needs under `dir`; returns the job's YAML.
  std::function<std::string(const fs::path& dir)> job;
  const char* error;
  int exit_code;
  std::vector<std::string> commands;
};

std::string Repeated(const std::string& item, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) absl::StrAppend(&out, i == 0 ? "" : ", ", item);
  return out;
}

// A job on data files DIR/train.jsonl (whose second line is `line`) and
// DIR/eval.jsonl.
std::string DataJob(const fs::path& dir, const std::string& line) {
  const std::string good = R"({"prompt": "1+1=", "answer": "2"})" "\n";
  WriteText(dir / "train.jsonl", good + line + "\n");
  WriteText(dir / "eval.jsonl", good);
  return absl::StrCat("data: {train_path: ", (dir / "train.jsonl").string(),
                      ", eval_path: ", (dir / "eval.jsonl").string(), "}\n");
}

// A job on examples/models/qwen2_arith's files with `chat_template` as its
// template, on the example chat data.
std::string TemplateJob(const fs::path& dir, const std::string& chat_template) {
  const fs::path examples = fs::path(TRELLIS_SOURCE_DIR) / "examples";
  const fs::path model = dir / "model";
  fs::create_directories(model);
  for (const char* file : {"config.json", "generation_config.json", "model.safetensors",
                           "tokenizer.json", "tokenizer_config.json"}) {
    fs::copy_file(examples / "models/qwen2_arith" / file, model / file,
                  fs::copy_options::overwrite_existing);
  }
  WriteText(model / "chat_template.jinja", chat_template);
  return absl::StrCat("model: {path: ", model.string(), ", max_seq_len: 32}\n",
                      "data: {train_path: ", (examples / "data/chat_arith_train.jsonl").string(),
                      ", eval_path: ", (examples / "data/chat_arith_eval.jsonl").string(), "}\n");
}

const std::vector<BadInput>& BadInputs() {
  static const auto* inputs = new std::vector<BadInput>{
      {"duplicates_10000",
       [](const fs::path&) {
         return absl::StrCat("memory: {lora: {rank: 4, target_modules: [",
                             Repeated("q_proj", 10'000), "]}}\n");
       },
       "memory.lora.target_modules[1]: must name each entry once, found q_proj again (first at "
       "[0]; 9999 entries repeat an earlier one)",
       2, kPrepared},
      {"alias_bomb",
       [](const fs::path&) {
         return absl::StrCat("name: &big \"", std::string(1 << 20, 'a'), "\"\n",
                             "verifier: {command: [", Repeated("*big", 1000), "]}\n");
       },
       "the document expands past its bounds", 2, kPrepared},
      {"nul_in_path",
       [](const fs::path&) {
         return std::string("data: {train_path: \"train\\0.jsonl\", eval_path: e.jsonl}\n");
       },
       "data.train_path: must be free of control characters (a name, path or address), found "
       "\"train\\x00.jsonl\"",
       2, kPrepared},
      {"escape_codes_in_name",
       [](const fs::path&) { return std::string("name: \"\\e[2J\\e[31mjob\"\n"); },
       "name: must be free of control characters (a name, path or address), found "
       "\"\\x1b[2J\\x1b[31mjob\"",
       2, kPrepared},
      {"unknown_verifier",
       [](const fs::path&) { return std::string("verifier: {name: nosuch}\n"); },
       "verifier.name: unknown verifier \"nosuch\"; registered verifiers: ", 2, kPrepared},
      {"remote_verifier_without_address",
       [](const fs::path&) { return std::string("verifier: {name: remote}\n"); },
       "verifier.address: required by the remote verifier", 2, kPrepared},
      {"vocabulary_below_the_tokenizers",
       [](const fs::path&) { return std::string("model: {vocab_size: 8}\n"); },
       "model.vocab_size: must be >= the size of the tokenizer's vocabulary", 2, kPrepared},
      {"data_line_past_its_bound",
       [](const fs::path& dir) {
         return DataJob(dir, absl::StrCat(R"({"prompt": ")",
                                          std::string(data::kMaxLineBytes + 1, 'x'), "\"}"));
       },
       "train.jsonl:2: longer than 8388608 bytes, the most a line holds", 2, kWithData},
      {"chat_message_past_its_bound",
       [](const fs::path& dir) {
         return DataJob(dir, absl::StrCat(R"({"messages": [{"role": "user", "content": ")",
                                          std::string(2 * data::kMaxMessageBytes, 'x'),
                                          R"("}], "answer": "1"})"));
       },
       "bytes of JSON; a message holds at most 1048576", 2, kWithData},
      {"template_with_a_huge_loop",
       [](const fs::path& dir) {
         return TemplateJob(dir, "{% for i in range(100000) %}{% for j in range(100000) %}"
                                 "{{ j }}{% endfor %}{% endfor %}");
       },
       "the rendering takes more than 5000000 steps", 2, kWithData},
      {"template_with_a_huge_output",
       [](const fs::path& dir) {
         return TemplateJob(dir, "{% for i in range(100000) %}{{ 'x' * 100000 }}{% endfor %}");
       },
       "the rendering makes text of", 2, kWithData},
      {"data_columns_naming_one_column_twice",
       [](const fs::path&) { return std::string("data: {columns: {answer: prompt}}\n"); },
       "data.columns.answer: must be a column other than data.columns.prompt and messages, "
       "found \"prompt\"",
       2, kPrepared},
      {"parquet_column_missing",
       [](const fs::path&) {
         const fs::path shards = fs::path(TRELLIS_SOURCE_DIR) / "tests/fixtures/parquet/plain/data";
         return absl::StrCat("data: {train_path: \"", (shards / "train-*.parquet").string(),
                             "\", eval_path: ", (shards / "test-00000-of-00001.parquet").string(),
                             "}\n");
       },
       "train-00000-of-00002.parquet: no column \"prompt\" (data.columns.prompt) nor column "
       "\"messages\" (data.columns.messages); the file's columns: \"question\", \"answer\", "
       "\"source\"",
       2, kWithData},
  };
  return *inputs;
}

// What `trellis COMMAND` said last on a line of its own: the error, less
// the command's name and the status code's ("INVALID_ARGUMENT: ").
std::string LastError(const std::string& output, const std::string& command) {
  const std::string prefix = absl::StrCat("trellis ", command, ": ");
  const size_t at = output.rfind(prefix);
  if (at == std::string::npos) return "";
  std::string error = output.substr(at + prefix.size());
  error = error.substr(0, error.find('\n'));
  const size_t code = error.find(": ");
  if (code != std::string::npos &&
      error.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZ_") == code) {
    error = error.substr(code + 2);
  }
  return error;
}

class BadInputTest : public ::testing::TestWithParam<size_t> {};

TEST_P(BadInputTest, EveryCommandRefusesItWithTheSameError) {
  const BadInput& bad = BadInputs()[GetParam()];
  const fs::path root = fs::path(::testing::TempDir()) / "bad_input_test" / bad.name;
  fs::remove_all(root);
  fs::create_directories(root);
  const fs::path job = root / "job.yaml";
  WriteText(job, bad.job(root));
  std::string first_error;
  for (const std::string& command : bad.commands) {
    std::vector<std::string> args = {command, job.string()};
    if (command == "run") args.insert(args.end(), {"--out", (root / "out").string()});
    const fs::path log = root / (command + ".log");
    const int status = Wait(StartTrellis(args, log));
    const std::string what = absl::StrCat(bad.name, ": trellis ", command);
    const std::string output = Slurp(log);
    ASSERT_TRUE(WIFEXITED(status)) << what << ": killed by signal " << WTERMSIG(status);
    EXPECT_EQ(WEXITSTATUS(status), bad.exit_code) << what << "\n" << output.substr(0, 4000);
    EXPECT_THAT(output, HasSubstr(bad.error)) << what << "\n" << output.substr(0, 4000);
    EXPECT_THAT(output, Not(HasSubstr("terminate called"))) << what;
    EXPECT_THAT(output, Not(HasSubstr("\x1b"))) << what << ": a raw escape code was printed";
    EXPECT_LT(output.size(), 100'000u) << what << ": one message, not one per entry";
    // A job is refused by the one preparation all three share, word for
    // word; data and templates by each command's reading of the examples,
    // which may meet a bad one in another order ("prompt 0", "example 9").
    const std::string error = LastError(output, command);
    if (first_error.empty()) first_error = error;
    if (bad.commands == kPrepared) {
      EXPECT_EQ(error, first_error) << what << ": not the message of trellis " << bad.commands[0];
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Inputs, BadInputTest, ::testing::Range<size_t>(0, BadInputs().size()),
                         [](const ::testing::TestParamInfo<size_t>& info) {
                           return std::string(BadInputs()[info.param].name);
                         });

}  // namespace
}  // namespace trellis
