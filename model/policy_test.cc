#include "model/policy.h"

#include <mutex>
#include <thread>
#include <vector>

#include <torch/torch.h>

#include "absl/status/statusor.h"
#include "gtest/gtest.h"
#include "model/safetensors.h"
#include "model/testing/small_model.h"
#include "model/transformer.h"
#include "trellis/v1/job.pb.h"

namespace trellis::model {
namespace {

using trellis::model::testing::kVocab;
constexpr uint64_t kSeed = 7;

bool SameWeights(const Transformer& a, const Transformer& b) {
  const NamedTensors wa = a->NamedWeights();
  const NamedTensors wb = b->NamedWeights();
  if (wa.size() != wb.size()) return false;
  for (size_t i = 0; i < wa.size(); ++i) {
    if (wa[i].first != wb[i].first || !torch::equal(wa[i].second, wb[i].second)) return false;
  }
  return true;
}

// The ranks of a learner group are threads of one process in tests and
// embedded runs: each must build the seed's policy, whatever else is being
// built beside it (a race on the global generator gave ranks different
// weights).
TEST(NewPolicyTest, BuildsTheSeedsWeightsWhileOtherThreadsBuildModels) {
  const v1::ModelConfig config = testing::SmallConfig();
  absl::StatusOr<Transformer> alone = NewPolicy(config, v1::LoraConfig(), kVocab, kSeed);
  ASSERT_TRUE(alone.ok()) << alone.status();
  for (int round = 0; round < 3; ++round) {
    constexpr int kThreads = 4;
    std::vector<absl::StatusOr<Transformer>> seeded(kThreads, Transformer{nullptr});
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        seeded[t] = NewPolicy(config, v1::LoraConfig(), kVocab, kSeed);
        const std::unique_lock<std::recursive_mutex> draws = LockInitialDraws();
        Transformer unseeded(config, kVocab);
      });
    }
    for (std::thread& t : threads) t.join();
    for (int t = 0; t < kThreads; ++t) {
      ASSERT_TRUE(seeded[t].ok()) << seeded[t].status();
      EXPECT_TRUE(SameWeights(*alone, *seeded[t])) << "round " << round << ", thread " << t;
    }
  }
}

}  // namespace
}  // namespace trellis::model
