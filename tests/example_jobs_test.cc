// Every job file of examples/jobs/ passes `trellis resolve`'s checks
// (loop::PrepareJob) and resolves to itself when resolved again, its data
// loads (run::LoadJobData), and every SFT warm-up pair fits
// model.max_seq_len. The multi-turn demos
// (docs/environment-demos.md) keep what they rely on: a warm-up target
// takes at most environment.max_turns turns; tool_arithmetic's worked
// solutions carry the product in their last \boxed{}, which the python_tool's
// answer verifier ("math") takes as the ground truth; guess_number's games
// are games the environment could have played. Jobs on a model made on
// demand (model.path under models/, scripts/real_model.sh) are checked
// where it has been made, and left out where not.

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <iterator>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "config/job_config.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "loop/prompt_format.h"
#include "loop/recipe.h"
#include "tests/made_model.h"
#include "run/job_runner.h"
#include "verifier/verifier.h"

namespace trellis {
namespace {

namespace fs = std::filesystem;

// Job files name their data relative to the repository root.
class ExampleJobsTest : public testing::Test {
 protected:
  void SetUp() override { fs::current_path(TRELLIS_SOURCE_DIR); }

  static std::vector<std::string> JobFiles() {
    std::vector<std::string> files;
    for (const auto& entry : fs::directory_iterator("examples/jobs")) {
      if (entry.path().extension() == ".yaml" && !NotMade(entry.path().string())) {
        files.push_back(entry.path().string());
      }
    }
    std::sort(files.begin(), files.end());
    return files;
  }

  // Whether the job names a model made on demand that is absent.
  static bool NotMade(const std::string& path) {
    absl::StatusOr<v1::JobConfig> job = config::LoadJobFile(path);
    return job.ok() && testing_util::ModelNotMade(*job);  // Load reports a bad file
  }

  // The job file, prepared as `trellis resolve` prepares it.
  static v1::JobConfig Load(const std::string& path) {
    absl::StatusOr<v1::JobConfig> job = config::LoadJobFile(path);
    EXPECT_TRUE(job.ok()) << job.status();
    if (!job.ok()) return v1::JobConfig();
    absl::Status prepared = loop::PrepareJob(&*job);
    EXPECT_TRUE(prepared.ok()) << path << ": " << prepared;
    return *job;
  }

  static data::Split Data(const v1::JobConfig& job, const std::string& path) {
    absl::StatusOr<data::Split> split = run::LoadJobData(job);
    EXPECT_TRUE(split.ok()) << path << ": " << split.status();
    return split.ok() ? *std::move(split) : data::Split();
  }
};

TEST_F(ExampleJobsTest, EveryJobPreparesAndItsWarmUpFits) {
  const std::vector<std::string> files = JobFiles();
  ASSERT_GE(files.size(), 3u);
  for (const std::string& path : files) {
    SCOPED_TRACE(path);
    const v1::JobConfig job = Load(path);
    const data::Split split = Data(job, path);
    if (job.data().train_path().empty()) continue;  // generated: the generator's tests
    EXPECT_FALSE(split.train.empty());
    EXPECT_FALSE(split.eval.empty());
    absl::StatusOr<std::unique_ptr<loop::PromptFormat>> format = loop::PromptFormat::ForJob(job);
    ASSERT_TRUE(format.ok()) << format.status();
    for (const data::Example& ex : split.train) {
      absl::StatusOr<v1::SftBatch::Pair> pair = (*format)->MakeSftPair(ex);
      ASSERT_TRUE(pair.ok()) << pair.status();
      ASSERT_LE(pair->prompt_tokens_size() + pair->target_tokens_size(), job.model().max_seq_len())
          << "training example " << ex.id << ": " << ex.prompt;
    }
  }
}

// Resolving is idempotent: a job prepared, written as `trellis resolve` and
// `trellis launch` write it (every field present) and prepared again is
// the same job, so the scheduler and every worker of a launch, each
// preparing the job it is given, agree with the command that resolved it.
TEST_F(ExampleJobsTest, EveryResolvedJobResolvesToItself) {
  for (const std::string& path : JobFiles()) {
    SCOPED_TRACE(path);
    const v1::JobConfig once = Load(path);
    const std::string yaml = config::ResolvedJobYaml(once);
    absl::StatusOr<v1::JobConfig> twice = config::ParseJobYaml(yaml, path);
    ASSERT_TRUE(twice.ok()) << twice.status();
    const absl::Status prepared = loop::PrepareJob(&*twice);
    ASSERT_TRUE(prepared.ok()) << prepared;
    EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equivalent(once, *twice))
        << once.ShortDebugString() << "\nresolved again:\n"
        << twice->ShortDebugString();
    EXPECT_EQ(config::ResolvedJobYaml(*twice), yaml);
  }
}

TEST_F(ExampleJobsTest, MultiTurnWarmUpsTakeAtMostMaxTurns) {
  int multi_turn = 0;
  for (const std::string& path : JobFiles()) {
    SCOPED_TRACE(path);
    const v1::JobConfig job = Load(path);
    const v1::EnvironmentConfig& env = job.environment();
    if (env.name().empty()) continue;
    ++multi_turn;
    for (const data::Example& ex : Data(job, path).train) {
      const int64_t turns =
          std::vector<std::string>(absl::StrSplit(ex.answer, env.turn_stop())).size() - 1;
      ASSERT_GE(turns, 1) << "training example " << ex.id << ": " << ex.answer;
      ASSERT_LE(turns, env.max_turns()) << "training example " << ex.id << ": " << ex.answer;
    }
  }
  EXPECT_GE(multi_turn, 2);
}

// The product of a prompt "a*b=".
int64_t ProductOf(const std::string& prompt) {
  std::vector<std::string> parts = absl::StrSplit(prompt, absl::ByAnyChar("*="));
  int64_t a = 0, b = 0;
  EXPECT_TRUE(parts.size() == 3 && absl::SimpleAtoi(parts[0], &a) && absl::SimpleAtoi(parts[1], &b))
      << prompt;
  return a * b;
}

TEST_F(ExampleJobsTest, ToolArithmeticSolutionsCarryTheirProductAsGroundTruth) {
  const v1::JobConfig job = Load("examples/jobs/tool_arithmetic.yaml");
  const v1::JobConfig baseline = Load("examples/jobs/tool_arithmetic_baseline.yaml");
  const data::Split split = Data(job, "tool_arithmetic");
  const data::Split direct = Data(baseline, "tool_arithmetic_baseline");
  ASSERT_EQ(split.train.size(), direct.train.size());
  EXPECT_EQ(split.eval.size(), direct.eval.size());

  verifier::VerifierRegistry registry;
  ASSERT_TRUE(verifier::RegisterBuiltinVerifiers(registry).ok());
  v1::VerifierConfig config;
  config.set_name(nlohmann::json::parse(job.environment().options_json())["answer_verifier"]
                      .get<std::string>());
  EXPECT_EQ(config.name(), baseline.verifier().name());
  absl::StatusOr<std::unique_ptr<verifier::Verifier>> judge = registry.Create(config);
  ASSERT_TRUE(judge.ok()) << judge.status();
  auto verdict = [&](const std::string& response, const std::string& answer) {
    v1::VerifyItem item;
    item.set_response(response);
    item.set_answer(answer);
    return (*judge)->Verify(item).verdict();
  };

  const std::string& stop = job.environment().turn_stop();
  size_t tool_calls = 0;
  for (size_t i = 0; i < split.train.size(); ++i) {
    const data::Example& ex = split.train[i];
    SCOPED_TRACE(ex.answer);
    ASSERT_EQ(ex.prompt, direct.train[i].prompt);
    EXPECT_FALSE(absl::StrContains(direct.train[i].answer, "<py>"));
    const int64_t product = ProductOf(ex.prompt);
    if (absl::StartsWith(ex.answer, "<py>")) {
      ++tool_calls;
      EXPECT_TRUE(absl::StrContains(ex.answer, absl::StrCat("</py>", stop, product, "\\boxed{")));
    }
    const std::string answer_turn = absl::StrCat("\\boxed{", product, "}", stop);
    EXPECT_TRUE(absl::EndsWith(ex.answer, answer_turn));
    EXPECT_EQ(verdict(answer_turn, ex.answer), v1::CORRECT);
    EXPECT_EQ(verdict(absl::StrCat("\\boxed{", product + 1, "}", stop), ex.answer), v1::WRONG);
    EXPECT_EQ(verdict(answer_turn, direct.train[i].answer), v1::CORRECT);
  }
  // 30% of the solutions call the tool (examples/data/make_environment_data.py).
  EXPECT_NEAR(static_cast<double>(tool_calls) / split.train.size(), 0.3, 0.05);
  for (const data::Example& ex : split.eval) {
    EXPECT_EQ(verdict(absl::StrCat("\\boxed{", ProductOf(ex.prompt), "}", stop), ex.answer),
              v1::CORRECT)
        << ex.prompt;
  }
}

TEST_F(ExampleJobsTest, GuessNumberGamesAreGamesTheEnvironmentPlays) {
  const v1::JobConfig job = Load("examples/jobs/guess_number.yaml");
  const v1::EnvironmentConfig& env = job.environment();
  const nlohmann::json options = nlohmann::json::parse(env.options_json());
  const int64_t low = options["low"].get<int64_t>();
  const int64_t high = options["high"].get<int64_t>();
  const std::string opening = absl::StrCat(low, "-", high, "?");
  size_t found = 0;
  const data::Split split = Data(job, "guess_number");
  for (const data::Example& ex : split.train) {
    SCOPED_TRACE(ex.answer);
    ASSERT_TRUE(absl::StartsWith(ex.answer, opening));
    // Secrets every answer so far allows.
    std::set<int64_t> secrets;
    for (int64_t s = low; s <= high; ++s) secrets.insert(s);
    std::string rest = ex.answer.substr(opening.size());
    while (!rest.empty()) {
      const size_t stop = rest.find(env.turn_stop());
      ASSERT_NE(stop, std::string::npos);
      ASSERT_LT(stop + env.turn_stop().size(), rest.size()) << "a guess without an answer";
      int64_t guess = 0;
      ASSERT_TRUE(absl::SimpleAtoi(rest.substr(0, stop), &guess));
      const char answer = rest[stop + env.turn_stop().size()];
      ASSERT_TRUE(answer == '<' || answer == '>' || answer == '=') << answer;
      for (auto it = secrets.begin(); it != secrets.end();) {
        const int64_t s = *it;
        const bool allowed = answer == '=' ? s == guess : answer == '>' ? s > guess : s < guess;
        it = allowed ? std::next(it) : secrets.erase(it);
      }
      ASSERT_FALSE(secrets.empty()) << "answers no secret allows";
      rest = rest.substr(stop + env.turn_stop().size() + 1);
      if (answer == '=') {
        ++found;
        EXPECT_TRUE(rest.empty()) << "a guess after the secret was found";
      }
    }
  }
  // Blind games, 4 distinct guesses of 10 numbers: 40% find the secret.
  EXPECT_NEAR(static_cast<double>(found) / split.train.size(), 0.4, 0.06);
}

}  // namespace
}  // namespace trellis
