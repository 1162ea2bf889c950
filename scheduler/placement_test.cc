#include "scheduler/placement.h"

#include "absl/strings/str_replace.h"
#include "config/job_config.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trellis::scheduler {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

v1::ClusterSpec Cluster(const std::string& yaml) {
  v1::ClusterSpec cluster;
  absl::Status s = config::ParseYamlInto(yaml, "<test>", &cluster);
  EXPECT_TRUE(s.ok()) << s;
  return cluster;
}

v1::JobConfig Job(const std::string& deployment_yaml) {
  absl::StatusOr<v1::JobConfig> job = config::ParseJobYaml(deployment_yaml);
  EXPECT_TRUE(job.ok()) << job.status();
  return *job;
}

constexpr char kTwoPools[] = R"yaml(
pools:
  - name: train
    nodes: [{name: t0, gpus: 2, cpus: 16}]
  - name: rollout
    nodes: [{name: r0, gpus: 2, cpus: 16}, {name: r1, gpus: 1, cpus: 16}]
)yaml";

TEST(PlacementTest, DisaggregatedRolesGetTheirPoolsAndDistinctGpus) {
  absl::StatusOr<std::vector<WorkerPlacement>> placed =
      Place(Job("deployment: {learner: {pool: train, gpus_per_worker: 2},"
                " reference: {pool: train}, verifier: {pool: train},"
                " actor: {pool: rollout, count: 3, gpus_per_worker: 1}}"),
            Cluster(kTwoPools));
  ASSERT_TRUE(placed.ok()) << placed.status();
  ASSERT_EQ(placed->size(), 6u);
  EXPECT_EQ((*placed)[0].id.ToString(), "learner-0");
  EXPECT_EQ((*placed)[0].node, "t0");
  EXPECT_THAT((*placed)[0].gpus, ElementsAre(0, 1));
  EXPECT_TRUE((*placed)[1].gpus.empty());  // reference, CPU only
  EXPECT_EQ((*placed)[3].id.ToString(), "actor-0");
  EXPECT_EQ((*placed)[3].node, "r0");
  EXPECT_THAT((*placed)[3].gpus, ElementsAre(0));
  EXPECT_THAT((*placed)[4].gpus, ElementsAre(1));
  EXPECT_EQ((*placed)[5].node, "r1");
  EXPECT_THAT((*placed)[5].gpus, ElementsAre(0));
}

TEST(PlacementTest, ShortfallNamesThePoolAndTheNumbers) {
  absl::StatusOr<std::vector<WorkerPlacement>> placed =
      Place(Job("deployment: {actor: {pool: rollout, count: 4, gpus_per_worker: 1},"
                " learner: {pool: train}, verifier: {pool: train}, reference: {pool: train}}"),
            Cluster(kTwoPools));
  EXPECT_EQ(placed.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(placed.status().message()),
              HasSubstr("pool 'rollout': the job needs 4 GPUs (actor 4: 4 workers x 1 GPU), the "
                        "pool has 3: short by 1"));
}

TEST(PlacementTest, AWorkerThatFitsNoSingleNodeIsNamed) {
  absl::StatusOr<std::vector<WorkerPlacement>> placed =
      Place(Job("deployment: {actor: {pool: rollout, count: 1, gpus_per_worker: 3},"
                " learner: {pool: train}, verifier: {pool: train}, reference: {pool: train}}"),
            Cluster(kTwoPools));
  EXPECT_EQ(placed.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(placed.status().message()),
              HasSubstr("actor-0 needs 3 GPUs on one node; free GPUs per node: r0 2, r1 1"));
}

TEST(PlacementTest, UnknownPoolAndBadSpecsAreNamed) {
  absl::StatusOr<std::vector<WorkerPlacement>> unknown =
      Place(Job("deployment: {actor: {pool: gpu}}"), LocalCluster(0, 2));
  EXPECT_THAT(std::string(unknown.status().message()),
              HasSubstr("deployment.actor.pool: no pool 'gpu' in the cluster (pools: local)"));
  EXPECT_EQ(Place(Job(""), Cluster("pools: []")).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(Place(Job(""), Cluster("pools: [{name: a, nodes: []}]"))
                              .status()
                              .message()),
              HasSubstr("pool 'a' has no nodes"));
}

TEST(PlacementTest, TheLocalHostHoldsTheDefaultDeploymentOnCpus) {
  absl::StatusOr<std::vector<WorkerPlacement>> placed =
      Place(Job("deployment: {actor: {count: 2}}"), LocalCluster(0, 2));
  ASSERT_TRUE(placed.ok()) << placed.status();
  EXPECT_EQ(placed->size(), 5u);
  for (const WorkerPlacement& p : *placed) EXPECT_EQ(p.node, "localhost");
}

TEST(PlacementTest, TableHasOneLinePerWorkerWithItsNodeAndGpus) {
  absl::StatusOr<std::vector<WorkerPlacement>> placed =
      Place(Job("grpo: {kl_coef: 0}\n"
                "deployment: {learner: {pool: train, gpus_per_worker: 2},"
                " verifier: {pool: train}, actor: {pool: rollout, count: 2}}"),
            Cluster(kTwoPools));
  ASSERT_TRUE(placed.ok()) << placed.status();
  EXPECT_EQ(PlacementTable(*placed),
            "id\trole\tindex\tpool\tnode\thost\tgpus\ttp_rank\n"
            "learner-0\tlearner\t0\ttrain\tt0\t127.0.0.1\t0,1\t-\n"
            "verifier-0\tverifier\t0\ttrain\tt0\t127.0.0.1\t-\t-\n"
            "actor-0\tactor\t0\trollout\tr0\t127.0.0.1\t-\t-\n"
            "actor-1\tactor\t1\trollout\tr0\t127.0.0.1\t-\t-\n");
}

constexpr char kOneGpuNode[] = R"yaml(
pools:
  - name: gpu
    nodes: [{name: g0, gpus: 2, cpus: 16}]
)yaml";

constexpr char kColocated[] =
    "runtime: {device: cuda}\n"
    "deployment: {placement: colocated, learner: {pool: gpu, gpus_per_worker: 1},"
    " reference: {pool: gpu, gpus_per_worker: 1}, verifier: {pool: gpu},"
    " actor: {pool: gpu, count: 2, gpus_per_worker: 1}}";

TEST(PlacementTest, ColocatedActorLearnerAndReferenceShareTheirGpus) {
  absl::StatusOr<std::vector<WorkerPlacement>> placed =
      Place(Job(kColocated), Cluster(kOneGpuNode));
  ASSERT_TRUE(placed.ok()) << placed.status();
  EXPECT_EQ(PlacementTable(*placed),
            "id\trole\tindex\tpool\tnode\thost\tgpus\ttp_rank\n"
            "learner-0\tlearner\t0\tgpu\tg0\t127.0.0.1\t0\t-\n"
            "reference-0\treference\t0\tgpu\tg0\t127.0.0.1\t0\t-\n"
            "verifier-0\tverifier\t0\tgpu\tg0\t127.0.0.1\t-\t-\n"
            "actor-0\tactor\t0\tgpu\tg0\t127.0.0.1\t0\t-\n"
            "actor-1\tactor\t1\tgpu\tg0\t127.0.0.1\t1\t-\n");
  // This host's one GPU holds the three roles colocated.
  std::string one = kColocated;
  one.replace(one.find("count: 2"), 8, "count: 1");
  absl::StatusOr<std::vector<WorkerPlacement>> local =
      Place(Job(absl::StrReplaceAll(one, {{"pool: gpu", "pool: local"}})), LocalCluster(1, 4));
  ASSERT_TRUE(local.ok()) << local.status();
  for (const WorkerPlacement& p : *local) {
    if (p.id.role() != v1::VERIFIER) EXPECT_THAT(p.gpus, ElementsAre(0)) << p.id.ToString();
  }
}

TEST(PlacementTest, DisaggregatedRolesNeverShareAGpu) {
  const std::string job = absl::StrReplaceAll(kColocated, {{"colocated", "disaggregated"}});
  absl::StatusOr<std::vector<WorkerPlacement>> placed = Place(Job(job), Cluster(kOneGpuNode));
  EXPECT_EQ(placed.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(placed.status().message()),
              HasSubstr("pool 'gpu': the job needs 4 GPUs (learner 1: 1 rank x 1 GPU; "
                        "reference 1: 1 worker x 1 GPU; actor 2: 2 workers x 1 GPU), the pool "
                        "has 2: short by 2"));
}

TEST(PlacementTest, LaunchedCudaRolesNeedGpusAndColocatedRolesTheSameOnes) {
  absl::StatusOr<std::vector<WorkerPlacement>> no_gpu =
      Place(Job("runtime: {device: cuda}\ndeployment: {learner: {gpus_per_worker: 1},"
                " reference: {gpus_per_worker: 1}}"),
            LocalCluster(2, 4));
  EXPECT_EQ(no_gpu.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(no_gpu.status().message()),
              HasSubstr("deployment.actor.gpus_per_worker: must be >= 1 with runtime.device cuda"));
  absl::StatusOr<std::vector<WorkerPlacement>> apart =
      Place(Job(absl::StrReplaceAll(kColocated, {{"learner: {pool: gpu, gpus_per_worker: 1}",
                                                  "learner: {pool: gpu, gpus_per_worker: 2}"}})),
            Cluster(kOneGpuNode));
  EXPECT_EQ(apart.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(
      std::string(apart.status().message()),
      HasSubstr("deployment.reference.gpus_per_worker: must be "
                "deployment.learner.gpus_per_worker (2) with placement colocated, found 1"));
}

TEST(PlacementTest, AWorkerSeesOnlyItsGpus) {
  WorkerPlacement p{config::WorkerId(v1::ACTOR, 0), "gpu", "g0", "", {2, 3}};
  EXPECT_EQ(CudaVisibleDevices({p}, p), "2,3");
  p.gpus.clear();
  EXPECT_EQ(CudaVisibleDevices({p}, p), "");
}

constexpr char kTensorParallel[] = R"yaml(
pools:
  - name: train
    nodes: [{name: t0, gpus: 2, cpus: 16}]
  - name: rollout
    nodes: [{name: r0, gpus: 2, cpus: 16}, {name: r1, gpus: 3, cpus: 16}]
)yaml";

constexpr char kTwoLearnersTwoPairs[] =
    "grpo: {kl_coef: 0}\n"
    "deployment: {learner: {pool: train, count: 2, gpus_per_worker: 1}, verifier: {pool: train},"
    " actor: {pool: rollout, count: 2, gpus_per_worker: 1, tensor_parallel: 2}}";

TEST(PlacementTest, LearnerRanksAndTensorParallelGroupsGetAGpuEachWithinTheirPool) {
  absl::StatusOr<std::vector<WorkerPlacement>> placed =
      Place(Job(kTwoLearnersTwoPairs), Cluster(kTensorParallel));
  ASSERT_TRUE(placed.ok()) << placed.status();
  // Each pair on one node: actor-0 fills r0, actor-1 goes whole to r1.
  EXPECT_EQ(PlacementTable(*placed),
            "id\trole\tindex\tpool\tnode\thost\tgpus\ttp_rank\n"
            "learner-0\tlearner\t0\ttrain\tt0\t127.0.0.1\t0\t-\n"
            "learner-1\tlearner\t1\ttrain\tt0\t127.0.0.1\t1\t-\n"
            "verifier-0\tverifier\t0\ttrain\tt0\t127.0.0.1\t-\t-\n"
            "actor-0\tactor\t0\trollout\tr0\t127.0.0.1\t0\t0/2\n"
            "actor-0\tactor\t0\trollout\tr0\t127.0.0.1\t1\t1/2\n"
            "actor-1\tactor\t1\trollout\tr1\t127.0.0.1\t0\t0/2\n"
            "actor-1\tactor\t1\trollout\tr1\t127.0.0.1\t1\t1/2\n");
  // Each pair's one process (rank 0's) sees both ranks' GPUs, its own first.
  EXPECT_EQ(CudaVisibleDevices(*placed, (*placed)[3]), "0,1");
  EXPECT_EQ(CudaVisibleDevices(*placed, (*placed)[5]), "0,1");
  EXPECT_EQ(CudaVisibleDevices(*placed, (*placed)[0]), "0");
  EXPECT_EQ(CudaVisibleDevices(*placed, (*placed)[1]), "1");
}

TEST(PlacementTest, AGroupNoNodeHoldsWholeSpreadsOverItsPool) {
  const std::string job =
      absl::StrReplaceAll(kTwoLearnersTwoPairs, {{"actor: {pool: rollout, count: 2",
                                                  "actor: {pool: rollout, count: 1"}});
  const std::string cluster = absl::StrReplaceAll(
      kTensorParallel, {{"{name: r0, gpus: 2", "{name: r0, gpus: 1"},
                        {"{name: r1, gpus: 3", "{name: r1, gpus: 1"}});
  absl::StatusOr<std::vector<WorkerPlacement>> placed = Place(Job(job), Cluster(cluster));
  ASSERT_TRUE(placed.ok()) << placed.status();
  ASSERT_EQ(placed->size(), 5u);  // 2 learners, the verifier, one pair
  EXPECT_EQ((*placed)[3].node, "r0");
  EXPECT_EQ((*placed)[3].tp_rank, 0);
  EXPECT_EQ((*placed)[4].node, "r1");
  EXPECT_EQ((*placed)[4].tp_rank, 1);
  EXPECT_EQ((*placed)[4].tp_size, 2);
  EXPECT_EQ((*placed)[4].pool, "rollout");
  // Split over nodes, the replica's process sees only rank 0's GPU.
  EXPECT_EQ(CudaVisibleDevices(*placed, (*placed)[3]), "0");
}

TEST(PlacementTest, APoolTooSmallForTheGroupsSaysWhichRoleNeedsHowMany) {
  const std::string cluster =
      absl::StrReplaceAll(kTensorParallel, {{"{name: r1, gpus: 3", "{name: r1, gpus: 1"}});
  absl::StatusOr<std::vector<WorkerPlacement>> placed =
      Place(Job(kTwoLearnersTwoPairs), Cluster(cluster));
  EXPECT_EQ(placed.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(placed.status().message()),
              HasSubstr("pool 'rollout': the job needs 4 GPUs (actor 4: 2 replicas x "
                        "tensor_parallel 2 x 1 GPU), the pool has 3: short by 1"));
  const std::string three = absl::StrReplaceAll(
      kTwoLearnersTwoPairs, {{"pool: train, count: 2", "pool: train, count: 3"}});
  absl::StatusOr<std::vector<WorkerPlacement>> learners =
      Place(Job(three), Cluster(kTensorParallel));
  EXPECT_THAT(std::string(learners.status().message()),
              HasSubstr("pool 'train': the job needs 3 GPUs (learner 3: 3 ranks x 1 GPU), the "
                        "pool has 2: short by 1"));
}

}  // namespace
}  // namespace trellis::scheduler
