// `trellis plan` from given rates and lengths (nothing is measured): the
// step time's arithmetic (each pass's seconds outside the layers plus L x
// one layer's), and for a CUDA job the plan's objects on GPUs in both
// placements, each GPU's peak, and whether it fits the assumed device
// memory.

#include "tools/plan_device.h"

#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "gtest/gtest.h"
#include "config/flops.h"
#include "config/job_size.h"
#include "run/embedded_job.h"
#include "tools/planner.h"
#include "tools/testing/test_plan.h"

namespace trellis::tools {
namespace {

constexpr int64_t kGib = int64_t{1} << 30;

v1::JobConfig CudaJob(v1::DeploymentConfig::Placement placement) {
  absl::StatusOr<v1::JobConfig> job = run::DefaultJob();
  EXPECT_TRUE(job.ok()) << job.status();
  job->mutable_runtime()->set_device(v1::RuntimeConfig::CUDA);
  job->mutable_deployment()->set_placement(placement);
  job->mutable_grpo()->set_kl_coef(0.05);  // A reference to place.
  return *job;
}

// Each pass's FLOP per token, split by depth, adds up to config/flops.h's
// count; checkpointing adds each layer's forward once more.
TEST(PlanStepTimeTest, DepthFlopsAddUpToTheModelsFlops) {
  const v1::ModelConfig model = run::DefaultJob()->model();
  const config::ModelShape s = config::ShapeOf(model, 16);
  const int64_t seq = 20;
  const DepthFlops forward = ForwardDepthFlops(model, 16, seq);
  EXPECT_DOUBLE_EQ(forward.outside, 2.0 * s.V * s.d);
  EXPECT_DOUBLE_EQ(forward.outside + s.L * forward.per_layer,
                   config::ForwardFlopsPerToken(model, 16, seq));
  const DepthFlops train = TrainDepthFlops(model, 16, seq, false);
  EXPECT_DOUBLE_EQ(train.outside, 6.0 * s.V * s.d);
  EXPECT_DOUBLE_EQ(train.outside + s.L * train.per_layer,
                   config::TrainFlopsPerToken(model, 16, seq));
  const DepthFlops checkpointed = TrainDepthFlops(model, 16, seq, true);
  EXPECT_DOUBLE_EQ(checkpointed.outside, train.outside);
  EXPECT_DOUBLE_EQ(checkpointed.per_layer, train.per_layer + forward.per_layer);
}

// Every stage: tokens x (outside FLOP / outside rate + L x layer FLOP /
// layer rate) at its pass's rates; the update adds one optimizer step of
// outside + L x per-layer seconds; the step is the stages' sum.
TEST(PlanStepTimeTest, StagesAreTheirPassesAtBothRatesPlusTheOptimizerStep) {
  v1::JobConfig job = *run::DefaultJob();
  job.mutable_grpo()->set_kl_coef(0.05);  // A reference stage.
  const PlanWorkload w = testing::TestWorkload();
  MachineRates rates;
  rates.matmul_flops_per_second = 5e10;
  rates.train = {4e9, 1e9};
  rates.forward = {8e9, 2e9};
  rates.decode = {2e9, 0.5e9};
  rates.optimizer_outside_seconds = 0.02;
  rates.optimizer_per_layer_seconds = 0.003;
  rates.calibration_layers = 4;
  const Plan plan = MakePlan(job, w, rates);
  std::ostringstream printed;
  PrintPlan(plan, printed);
  const int64_t L = job.model().n_layers();
  const int64_t P = w.prompt_tokens, max_new = job.sampling().max_new_tokens();
  const int64_t seq = P + max_new - 1;
  const double prompts = job.grpo().prompts_per_step();
  const double samples = prompts * job.grpo().responses_per_prompt();
  const auto seconds = [&](const PassRate& r, const DepthFlops& f, double tokens) {
    return tokens * (f.outside / r.outside_flops_per_second +
                     L * f.per_layer / r.layer_flops_per_second);
  };
  std::map<std::string, double> stage;
  for (const PlanTime& t : plan.step_time) stage[t.stage] = t.seconds;
  ASSERT_EQ(stage.size(), 3u) << printed.str();
  EXPECT_DOUBLE_EQ(stage.at("rollout"),
                   seconds(rates.forward, ForwardDepthFlops(job.model(), 16, P), prompts * P) +
                       seconds(rates.decode,
                               ForwardDepthFlops(job.model(), 16, P + max_new / 2),
                               samples * max_new))
      << printed.str();
  EXPECT_DOUBLE_EQ(stage.at("reference"),
                   seconds(rates.forward, ForwardDepthFlops(job.model(), 16, seq), samples * seq));
  EXPECT_DOUBLE_EQ(stage.at("update"),
                   seconds(rates.train, TrainDepthFlops(job.model(), 16, seq, false),
                           samples * seq) +
                       0.02 + L * 0.003);
  EXPECT_DOUBLE_EQ(plan.step_seconds,
                   stage.at("rollout") + stage.at("reference") + stage.at("update"));
  // Twice the layer rates take away half of the layers' share, no more.
  MachineRates faster = rates;
  for (PassRate* r : {&faster.train, &faster.forward, &faster.decode}) {
    r->layer_flops_per_second *= 2;
  }
  const Plan fast = MakePlan(job, w, faster);
  const DepthFlops train = TrainDepthFlops(job.model(), 16, seq, false);
  EXPECT_NEAR(plan.step_time.back().seconds - fast.step_time.back().seconds,
              samples * seq * L * train.per_layer / (2 * 4e9), 1e-12);
  EXPECT_NE(printed.str().find("timed at 1 and 4 layers"), std::string::npos) << printed.str();
  EXPECT_NE(printed.str().find("train 4.00 / 1.00, forward 8.00 / 2.00, decode 2.00 / 0.50"),
            std::string::npos)
      << printed.str();
  EXPECT_EQ(PlanJson(plan)["rates"]["decode"]["outside_flops_per_second"], 0.5e9);
}

int64_t Sum(const std::vector<PlanLine>& lines) {
  int64_t bytes = 0;
  for (const PlanLine& l : lines) bytes += l.bytes;
  return bytes;
}

// Bytes of the plan's lines of `role` (residents, or one stage's
// transients).
int64_t Resident(const Plan& plan, const std::string& role, const std::string& object = "") {
  int64_t bytes = 0;
  for (const PlanLine& l : plan.resident) {
    if (l.role == role && (object.empty() || l.object == object)) bytes += l.bytes;
  }
  return bytes;
}
int64_t Transient(const Plan& plan, const std::string& stage, const std::string& role) {
  for (const PlanStage& st : plan.stages) {
    if (st.stage != stage) continue;
    int64_t bytes = 0;
    for (const PlanLine& l : st.transient) bytes += l.role == role ? l.bytes : 0;
    return bytes;
  }
  return 0;
}

TEST(PlanDeviceTest, DisaggregatedGivesEachRoleItsOwnGpu) {
  v1::JobConfig job = CudaJob(v1::DeploymentConfig::DISAGGREGATED);
  job.mutable_deployment()->mutable_actor()->set_count(2);
  job.mutable_deployment()->mutable_actor()->set_gpus_per_worker(1);
  const Plan plan = testing::TestPlan(job);
  const DevicePlan device = PlanDevices(plan, job, 140 * kGib, "the test");
  std::ostringstream printed;
  PrintDevicePlan(device, printed);
  ASSERT_EQ(device.gpus.size(), 3u) << printed.str();
  std::map<std::string, GpuPlan> gpu;
  for (const GpuPlan& g : device.gpus) gpu[g.name] = g;

  const GpuPlan& actor = gpu.at("actor-0");
  EXPECT_EQ(actor.workers, 2);
  EXPECT_EQ(actor.resident_bytes, Resident(plan, "actor-0"));
  // The actor's largest stage: rollout or eval, its KV cache and workspace.
  EXPECT_EQ(actor.peak_bytes, actor.resident_bytes + std::max(Transient(plan, "rollout", "actor-0"),
                                                              Transient(plan, "eval", "actor-0")))
      << printed.str();

  const GpuPlan& learner = gpu.at("learner-0");
  EXPECT_EQ(learner.resident_bytes, Resident(plan, "learner-0"));
  EXPECT_EQ(learner.peak_stage, "update") << printed.str();
  EXPECT_EQ(learner.peak_bytes, learner.resident_bytes + Transient(plan, "update", "learner-0"));

  const GpuPlan& reference = gpu.at("reference-0");
  EXPECT_EQ(reference.peak_bytes,
            Resident(plan, "reference-0") + Transient(plan, "reference", "reference-0"));
  EXPECT_TRUE(device.fits);
  // No GPU holds another role's objects.
  for (const GpuPlan& g : device.gpus) {
    for (const PlanLine& l : g.resident) EXPECT_EQ(l.role, g.name);
  }
  EXPECT_NE(printed.str().find("deployment.placement disaggregated"), std::string::npos);
  EXPECT_NE(printed.str().find("GPU of learner-0 (1 worker, 1 GPU each): peak"), std::string::npos)
      << printed.str();
}

// Colocated: one GPU; the learner's objects stay, the actor's weights come
// for rollout, eval and weight sync, the reference's for its stage; the
// peak is the highest stage of that device.
TEST(PlanDeviceTest, ColocatedTimeSharesOneGpuAndPricesItsHighestStage) {
  const v1::JobConfig job = CudaJob(v1::DeploymentConfig::COLOCATED);
  const Plan plan = testing::TestPlan(job);
  const DevicePlan device = PlanDevices(plan, job, 140 * kGib, "the test");
  std::ostringstream printed;
  PrintDevicePlan(device, printed);
  ASSERT_EQ(device.gpus.size(), 1u) << printed.str();
  const GpuPlan& gpu = device.gpus[0];
  EXPECT_EQ(gpu.name, "actor-0 + learner-0 + reference-0");
  EXPECT_EQ(gpu.resident_bytes, Resident(plan, "learner-0")) << printed.str();
  std::map<std::string, int64_t> stage;
  for (const GpuStage& st : gpu.stages) stage[st.stage] = st.bytes;
  const int64_t learner = Resident(plan, "learner-0");
  const int64_t actor = Resident(plan, "actor-0");
  EXPECT_EQ(stage.at("rollout"), learner + actor + Transient(plan, "rollout", "actor-0"));
  EXPECT_EQ(stage.at("reference"),
            learner + Resident(plan, "reference-0") + Transient(plan, "reference", "reference-0"));
  EXPECT_EQ(stage.at("update"), learner + Transient(plan, "update", "learner-0"));
  EXPECT_EQ(stage.at("weight_sync"), learner + actor + Transient(plan, "weight_sync", "learner-0"));
  int64_t highest = 0;
  for (const auto& [name, bytes] : stage) highest = std::max(highest, bytes);
  EXPECT_EQ(gpu.peak_bytes, highest);
  EXPECT_TRUE(gpu.fits);

  // The same job on a device too small for its peak does not fit.
  const DevicePlan small = PlanDevices(plan, job, gpu.peak_bytes - 1, "the test");
  EXPECT_FALSE(small.fits);
  std::ostringstream small_printed;
  PrintDevicePlan(small, small_printed);
  EXPECT_NE(small_printed.str().find("DOES NOT FIT"), std::string::npos) << small_printed.str();

  const nlohmann::json j = DevicePlanJson(device);
  EXPECT_EQ(j["placement"], "colocated");
  EXPECT_EQ(j["device_bytes"], 140 * kGib);
  EXPECT_EQ(j["gpus"][0]["peak_bytes"], gpu.peak_bytes);
  EXPECT_EQ(j["gpus"][0]["fits"], true);
}

// Offloaded optimizer state is on the GPU only in the stages that train.
TEST(PlanDeviceTest, OffloadedOptimizerStateCountsOnlyWhereTheLearnerTrains) {
  v1::JobConfig job = CudaJob(v1::DeploymentConfig::DISAGGREGATED);
  job.mutable_memory()->set_offload_optimizer_state(true);
  const Plan plan = testing::TestPlan(job);
  const DevicePlan device = PlanDevices(plan, job, 140 * kGib, "the test");
  const int64_t optimizer = Resident(plan, "learner-0", "optimizer_state");
  ASSERT_GT(optimizer, 0);
  for (const GpuPlan& g : device.gpus) {
    if (g.name != "learner-0") continue;
    EXPECT_EQ(g.resident_bytes, Resident(plan, "learner-0") - optimizer);
    for (const GpuStage& st : g.stages) {
      const bool trains = st.stage == "update" || st.stage == "sft";
      EXPECT_EQ(st.bytes - g.resident_bytes - Sum(st.lines), 0);
      int64_t state = 0;
      for (const PlanLine& l : st.lines) state += l.object == "optimizer_state" ? l.bytes : 0;
      EXPECT_EQ(state, trains ? optimizer : 0) << st.stage;
    }
  }
}

}  // namespace
}  // namespace trellis::tools
