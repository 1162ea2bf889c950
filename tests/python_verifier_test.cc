// A verifier written in Python with the SDK, run as its own process and
// reached as `verifier: {name: remote}`, trains a job exactly as the
// built-in verifier it mirrors: the same per-step rewards and held-out
// accuracy (examples/verifiers/python_numeric.py against `numeric`). The
// verifier is secured with a job secret that the run's channel sends.

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "gtest/gtest.h"
#include "plugin/process.h"
#include "roles/local_roles.h"
#include "rpc/auth.h"
#include "run/embedded_job.h"
#include "tests/tiny_job.h"
#include "verifier/verifier_service.h"

namespace trellis {
namespace {

namespace fs = std::filesystem;

v1::JobConfig Job() {
  v1::JobConfig job = testing_util::TinyJob();
  job.mutable_data()->mutable_arithmetic()->set_max_digits(1);
  job.mutable_data()->mutable_arithmetic()->set_num_problems(100);
  job.mutable_sft()->set_steps(30);
  job.mutable_grpo()->set_steps(8);
  return job;
}

double AccuracyAfter(const fs::path& dir) {
  std::ifstream in(dir / "summary.json");
  return nlohmann::json::parse(in)["eval"]["after"]["accuracy"].get<double>();
}

TEST(PythonVerifierTest, TrainsLikeTheBuiltinItMirrors) {
  ASSERT_NE(std::getenv("TRELLIS_PYTHON_STUBS"), nullptr) << "run through ctest";
  const fs::path root = fs::path(::testing::TempDir()) / "python_verifier_test";
  fs::remove_all(root);
  fs::create_directories(root);
  absl::StatusOr<rpc::JobSecret> secret = rpc::JobSecret::Generate();
  ASSERT_TRUE(secret.ok()) << secret.status();
  ASSERT_TRUE(rpc::WriteSecretFile((root / "secret").string(), *secret).ok());
  plugin::SpawnOptions options;
  options.argv = {TRELLIS_PYTHON3, TRELLIS_SOURCE_DIR "/examples/verifiers/python_numeric.py",
                  "--port",        "0",
                  "--secret-file", (root / "secret").string()};
  absl::StatusOr<std::unique_ptr<plugin::Child>> child = plugin::Child::Spawn(options);
  ASSERT_TRUE(child.ok()) << child.status();
  // "trellis_verifier: serving NAME@VERSION on HOST:PORT"
  absl::StatusOr<std::string> line = (*child)->ReadLine(absl::Now() + absl::Seconds(30), 4096);
  ASSERT_TRUE(line.ok()) << line.status();
  const size_t on = line->rfind(" on ");
  ASSERT_NE(on, std::string::npos) << *line;

  std::ostringstream log;
  v1::JobConfig builtin = Job();
  ASSERT_TRUE(run::RunEmbeddedJob(builtin, (root / "builtin").string(), log).ok())
      << log.str();
  roles::AddVerifierKinds(verifier::RegisterRemoteVerifier);
  // The remote verifier's channel sends the secret; without it every item
  // would be refused.
  rpc::SetProcessSecret(*secret);
  v1::JobConfig python = Job();
  python.mutable_verifier()->set_name("remote");
  python.mutable_verifier()->set_address(line->substr(on + 4));
  absl::Status run = run::RunEmbeddedJob(python, (root / "python").string(), log);
  ASSERT_TRUE(run.ok()) << run << "\n" << log.str();

  const std::map<int64_t, double> want = testing_util::StepRewards(root / "builtin");
  ASSERT_EQ(want.size(), 8u);
  EXPECT_EQ(testing_util::StepRewards(root / "python"), want);
  EXPECT_NEAR(AccuracyAfter(root / "python"), AccuracyAfter(root / "builtin"), 0.02);
}

}  // namespace
}  // namespace trellis
