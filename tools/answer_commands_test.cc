// `trellis tokenize` and `trellis chat` against what `tokenizers` and
// transformers' apply_chat_template give (tests/fixtures/commands/
// expected.json, scripts/make_command_fixtures.sh), and `trellis report`'s
// sample of the eval answers: of a short embedded run, and of an
// incomplete evaluation.

#include "tools/answer_commands.h"

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "loop/eval_answers.h"
#include "nlohmann/json.hpp"
#include "tests/tiny_job.h"

namespace trellis::tools {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

const std::string kSource = TRELLIS_SOURCE_DIR;

struct Output {
  int code = 0;
  std::string out;
  std::string err;
};

Output Cmd(const std::string& command, const std::vector<std::string>& args) {
  std::ostringstream out, err;
  const int code = TextCommand(command, args, out, err);
  return {code, out.str(), err.str()};
}

// Ordered: a conversation is written back with its keys in their order,
// which a template's tojson keeps.
nlohmann::ordered_json Expected() {
  std::ifstream in(kSource + "/tests/fixtures/commands/expected.json");
  return nlohmann::ordered_json::parse(in);
}

fs::path Fresh(const std::string& name) {
  const fs::path dir = fs::path(::testing::TempDir()) / ("answer_commands_test." + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

TEST(TokenizeTest, GivesTheIdsTokenizersGives) {
  const nlohmann::ordered_json expected = Expected();
  const auto& texts = expected["texts"];
  ASSERT_FALSE(expected["tokenize"].empty());
  for (const auto& [dir, ids] : expected["tokenize"].items()) {
    ASSERT_EQ(ids.size(), texts.size()) << dir;
    for (size_t i = 0; i < texts.size(); ++i) {
      const Output got = Cmd("tokenize", {kSource + "/" + dir, texts[i].get<std::string>()});
      EXPECT_EQ(got.code, 0) << got.err;
      EXPECT_EQ(got.out, absl::StrJoin(ids[i].get<std::vector<int>>(), " ") + "\n")
          << dir << ", text " << i;
    }
  }
}

TEST(TokenizeTest, PiecesAreEachTokensTextEscaped) {
  const Output got =
      Cmd("tokenize", {kSource + "/examples/models/qwen2_arith", "1+2\n", "--pieces"});
  ASSERT_EQ(got.code, 0) << got.err;
  EXPECT_EQ(got.out, "19\t\"1\"\n13\t\"+\"\n20\t\"2\"\n201\t\"\\n\"\n");
}

// A job names its model by model.path, read from the job's YAML or a run
// directory's job.yaml; without model.path, the built-in character
// tokenizer and no chat template.
TEST(TokenizeTest, AJobOrARunDirectoryNamesItsModel) {
  const fs::path dir = Fresh("job");
  const std::string model = kSource + "/examples/models/qwen2_arith";
  testing_util::WriteText(dir / "job.yaml", "model:\n  path: " + model + "\n");
  const Output direct = Cmd("tokenize", {model, "12+34=46"});
  EXPECT_EQ(Cmd("tokenize", {(dir / "job.yaml").string(), "12+34=46"}).out, direct.out);
  EXPECT_EQ(Cmd("tokenize", {dir.string(), "12+34=46"}).out, direct.out);

  testing_util::WriteText(dir / "builtin.yaml", "name: builtin\n");
  const Output builtin = Cmd("tokenize", {(dir / "builtin.yaml").string(), "1+1"});
  EXPECT_EQ(builtin.code, 0) << builtin.err;
  EXPECT_EQ(builtin.out, "20 14 20\n");  // three specials, then printable ASCII from ' '
  testing_util::WriteText(dir / "chat.json", R"([{"role": "user", "content": "hi"}])");
  const Output chat = Cmd("chat", {(dir / "builtin.yaml").string(), (dir / "chat.json").string()});
  EXPECT_EQ(chat.code, 1);
  EXPECT_THAT(chat.err, HasSubstr("no chat template"));
}

TEST(ChatTest, RendersAsApplyChatTemplateDoes) {
  const nlohmann::ordered_json expected = Expected();
  const fs::path dir = Fresh("chat");
  ASSERT_FALSE(expected["chat"].empty());
  for (const auto& [model, renders] : expected["chat"].items()) {
    for (const auto& [name, want] : renders.items()) {
      const fs::path file = dir / (name + ".json");
      testing_util::WriteText(file, expected["conversations"][name].dump());
      const Output full = Cmd("chat", {kSource + "/" + model, file.string()});
      EXPECT_EQ(full.code, 0) << full.err;
      EXPECT_EQ(full.out, want["full"].get<std::string>()) << model << " " << name;
      const Output prompt =
          Cmd("chat", {kSource + "/" + model, file.string(), "--generation-prompt"});
      EXPECT_EQ(prompt.out, want["prompt"].get<std::string>()) << model << " " << name;
    }
  }
}

TEST(ChatTest, TakesAListOfMessagesAndEscapesControlCharacters) {
  const fs::path dir = Fresh("escape");
  testing_util::WriteText(dir / "chat.json",
                          R"([{"role": "user", "content": "red \u001b[31m\ttab"}])");
  const Output got =
      Cmd("chat", {kSource + "/examples/models/qwen2_arith", (dir / "chat.json").string()});
  ASSERT_EQ(got.code, 0) << got.err;
  EXPECT_EQ(got.out, "<|im_start|>user\nred \\x1b[31m\ttab<|im_end|>\n");
}

TEST(ChatTest, BadInputIsNamed) {
  const fs::path dir = Fresh("bad");
  const std::string model = kSource + "/examples/models/qwen2_arith";
  testing_util::WriteText(dir / "bad.json", R"({"messages": [{"content": "no role"}]})");
  const Output bad = Cmd("chat", {model, (dir / "bad.json").string()});
  EXPECT_EQ(bad.code, 1);
  EXPECT_THAT(bad.err, HasSubstr("bad.json: messages[0].role"));
  testing_util::WriteText(dir / "text.json", "not json");
  EXPECT_THAT(Cmd("chat", {model, (dir / "text.json").string()}).err, HasSubstr("not JSON"));
  EXPECT_EQ(Cmd("chat", {model}).code, 2);
  EXPECT_EQ(Cmd("tokenize", {model, "x", "--generation-prompt"}).code, 2);
  const Output missing = Cmd("tokenize", {(dir / "none").string(), "x"});
  EXPECT_EQ(missing.code, 1);
  EXPECT_THAT(missing.err, HasSubstr("none"));
}

// A short embedded run writes eval/before.jsonl and eval/after.jsonl; the
// report's sample shows the last.
TEST(EvalSampleTest, ShowsTheLastEvaluationOfARun) {
  const testing_util::JobRun run =
      testing_util::RunTinyJob("answer_commands_run", testing_util::TinyJob());
  EXPECT_TRUE(fs::exists(run.dir / "eval" / "before.jsonl"));
  std::ifstream in(run.dir / "eval" / "after.jsonl");
  std::string line;
  int64_t lines = 0;
  while (std::getline(in, line)) {
    const nlohmann::json item = nlohmann::json::parse(line);
    EXPECT_EQ(item["eval"], "after");
    EXPECT_EQ(item["index"], lines++);
    EXPECT_TRUE(item["prompt"].is_string() && item["response"].is_string());
    EXPECT_EQ(item["scored"], true);
  }
  EXPECT_EQ(lines, run.summary["eval"]["after"]["prompts"].get<int64_t>());
  const std::string sample = EvalSample(run.dir.string());
  EXPECT_THAT(sample,
              HasSubstr("evaluation after: " + std::to_string(lines) + " items, 0 not scored"));
  EXPECT_THAT(sample, HasSubstr("#0  prompt "));
  EXPECT_THAT(sample, HasSubstr("#2  prompt "));
  EXPECT_THAT(sample, Not(HasSubstr("#3  prompt ")));
  EXPECT_THAT(sample, HasSubstr("      response: \""));
}

TEST(EvalSampleTest, MarksUnscoredItemsAndCutsLongTexts) {
  const fs::path dir = Fresh("sample");
  EXPECT_EQ(EvalSample(dir.string()), "");
  loop::EvalAnswer scored{7, std::string(300, 'p') + "\x1b[2Jend", "42", "42", {}};
  scored.result.set_verdict(v1::CORRECT);
  scored.result.set_reward(1);
  loop::EvalAnswer failed{8, "q", std::string(500, 'r'), "1", {}};
  failed.result.set_verdict(v1::TIMEOUT);
  failed.result.set_failure(v1::VerifyResult::DEADLINE);
  ASSERT_TRUE(loop::WriteEvalAnswers(env::Env::Default(), dir.string(), "before", {scored}).ok());
  ASSERT_TRUE(
      loop::WriteEvalAnswers(env::Env::Default(), dir.string(), "step_4", {scored, failed}).ok());
  const std::string sample = EvalSample(dir.string(), 2);
  EXPECT_THAT(sample, HasSubstr("evaluation step_4: 2 items, 1 not scored"));
  EXPECT_THAT(sample, HasSubstr("#0  prompt 7  correct  reward 1.0\n"));
  EXPECT_THAT(sample, HasSubstr("#1  prompt 8  timeout  reward 0.0  NOT SCORED (deadline)\n"));
  EXPECT_THAT(sample, HasSubstr("prompt:   \"..." + std::string(153, 'p') + "\\x1b[2Jend\"\n"));
  EXPECT_THAT(sample, HasSubstr("response: \"" + std::string(160, 'r') + "...\"\n"));
  EXPECT_THAT(sample, Not(HasSubstr(std::string(161, 'r'))));

  // A damaged line is named, never thrown over.
  testing_util::WriteText(dir / "eval" / "after.jsonl",
                          "{\"scored\": \"yes\", \"reward\": \"x\"}\n[1]\n");
  EXPECT_THAT(EvalSample(dir.string()), HasSubstr("after.jsonl line 2: not a JSON object"));
  testing_util::WriteText(dir / "eval" / "after.jsonl", "{\"scored\": \"yes\", \"index\": []}\n");
  EXPECT_THAT(EvalSample(dir.string()), HasSubstr("1 items, 1 not scored"));
}

}  // namespace
}  // namespace trellis::tools
