#ifndef TRELLIS_TOOLS_TESTING_TEST_PLAN_H_
#define TRELLIS_TOOLS_TESTING_TEST_PLAN_H_

// The plan tests' fixed workload and machine (tools/plan_device_test.cc,
// tools/plan_ranks_test.cc): the job's lengths given rather than read from
// its data, and a machine whose rates make no line depend on timing.

#include "tools/planner.h"
#include "trellis/v1/job.pb.h"

namespace trellis::tools::testing {

inline PlanWorkload TestWorkload() {
  PlanWorkload w;
  w.vocab_size = 16;
  w.prompt_tokens = 12;
  w.answer_tokens = 4;
  w.eval_prompts = 64;
  w.source = "given by the test";
  return w;
}

inline Plan TestPlan(const v1::JobConfig& job) {
  return MakePlan(job, TestWorkload(), {1e9, {1e9, 1e9}, {1e9, 1e9}, {1e9, 1e9}, 0.01, 0.001});
}

}  // namespace trellis::tools::testing

#endif  // TRELLIS_TOOLS_TESTING_TEST_PLAN_H_
