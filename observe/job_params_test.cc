#include "observe/job_params.h"

#include <map>
#include <set>
#include <string>

#include "gtest/gtest.h"
#include "trellis/v1/job.pb.h"

namespace trellis::observe {
namespace {

TEST(JobParamsTest, EveryFieldByItsPathDefaultsFilledIn) {
  v1::JobConfig job;
  job.mutable_grpo()->set_steps(3);
  job.mutable_environment()->add_command("python3");
  job.mutable_environment()->add_command("env.py");
  job.set_name(std::string(kMaxParamValue + 10, 'x'));
  std::map<std::string, std::string> params;
  std::set<std::string> keys;
  for (const auto& [key, value] : JobParams(job)) {
    EXPECT_TRUE(keys.insert(key).second) << "twice: " << key;
    params[key] = value;
  }
  EXPECT_EQ(params.at("grpo.steps"), "3");
  EXPECT_EQ(params.at("algorithm"), "grpo");
  EXPECT_EQ(params.at("environment.command"), "python3,env.py");
  EXPECT_EQ(params.at("observe.mlflow.experiment"), "trellis");
  EXPECT_EQ(params.at("runtime.device"), "cpu");
  EXPECT_EQ(params.at("name").size(), kMaxParamValue);
}

}  // namespace
}  // namespace trellis::observe
