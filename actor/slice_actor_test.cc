// An actor under the resharding sync (weightsync/reshard_ends.h): a
// tensor-parallel actor of 2 ranks takes its slices from 2 learner ranks'
// shards in place and samples greedily as one whole model does; after a
// sync that fails it refuses to generate rather than use weights of no
// version.

#include <torch/torch.h>

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "actor/local_actor.h"
#include "actor/testing/arithmetic_prompts.h"
#include "comm/tcp_store.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/flat_layout.h"
#include "model/transformer.h"
#include "text/tokenizer.h"
#include "weightsync/inprocess_transport.h"
#include "weightsync/reshard_ends.h"

namespace trellis::actor {
namespace {

using ::testing::HasSubstr;

constexpr int kLearners = 2;

// Learner rank `rank`'s shard of every unit of `weights` (as FlatShards
// holds them: each unit's tensors back to back, padded).
std::vector<at::Tensor> ShardsOf(const model::NamedTensors& weights, int rank) {
  std::map<std::string, torch::Tensor> by_name(weights.begin(), weights.end());
  std::vector<at::Tensor> shards;
  for (const model::FlatUnit& u : model::FlatUnitsOf(weights, kLearners)) {
    torch::Tensor full = torch::zeros({u.ranks * u.shard_numel});
    for (const model::FlatEntry& e : u.entries) {
      full.narrow(0, e.offset, e.numel()).copy_(by_name.at(e.name).reshape(-1));
    }
    shards.push_back(full.narrow(0, rank * u.shard_numel, u.shard_numel).clone());
  }
  return shards;
}

v1::GenerateRequest Greedy(const text::Tokenizer& tokenizer) {
  v1::GenerateRequest request;
  request.set_responses_per_prompt(1);
  request.mutable_sampling()->set_greedy(true);
  request.mutable_sampling()->set_max_new_tokens(6);
  testing_util::AddArithmeticPrompts(tokenizer, request);
  return request;
}

TEST(SliceActorTest, TakesItsSlicesInPlaceAndRefusesToGenerateAfterAFailedSync) {
  v1::ModelConfig config;
  config.set_d_model(32);
  config.set_n_layers(2);
  config.set_n_heads(4);
  config.set_n_kv_heads(2);
  config.set_d_ff(64);
  config.set_max_seq_len(20);
  const std::unique_ptr<text::Tokenizer> tokenizer = text::NewCharTokenizer();
  torch::manual_seed(3);
  model::Transformer policy(config, tokenizer->vocab_size());
  const model::NamedTensors weights = policy->NamedWeights();

  weightsync::ReshardEndOptions options;
  options.transport.host = "127.0.0.1";
  options.transport.bucket_bytes = 4096;
  options.transport.secret = "slice-actor-secret";
  options.learner_ranks = kLearners;
  options.actor_ranks = 2;
  std::vector<std::pair<std::string, int>> directories;
  std::vector<std::unique_ptr<weightsync::ShardPublisher>> learners;
  for (int n = 0; n < kLearners; ++n) {
    weightsync::ReshardEndOptions o = options;
    o.transport.port = comm::PickFreeTcpPort("127.0.0.1").value();
    directories.emplace_back("127.0.0.1", o.transport.port);
    learners.push_back(std::make_unique<weightsync::ShardPublisher>(o, n));
    ASSERT_TRUE(learners.back()->Bind(model::FlatUnitsOf(weights, kLearners)).ok());
    ASSERT_TRUE(learners.back()->PublishShards(1, ShardsOf(weights, n)).ok());
  }
  weightsync::SliceReceiver receiver(options, directories);
  LocalActorOptions parallel;
  parallel.tensor_parallel = 2;
  parallel.sync_timeout = absl::Seconds(1);
  absl::StatusOr<std::unique_ptr<RolloutWorker>> actor =
      NewLocalActor(config, tokenizer.get(), &receiver, nullptr, parallel);
  ASSERT_TRUE(actor.ok()) << actor.status();
  ASSERT_TRUE((*actor)->SyncWeights(1).ok());

  // The same weights, whole, through the in-process transport.
  auto publisher = weightsync::NewInProcessPublisher();
  std::unique_ptr<weightsync::Receiver> whole_receiver = publisher->NewReceiver();
  ASSERT_TRUE(publisher->Publish(1, weights).ok());
  absl::StatusOr<std::unique_ptr<RolloutWorker>> whole =
      NewLocalActor(config, tokenizer.get(), whole_receiver.get(), nullptr, LocalActorOptions());
  ASSERT_TRUE(whole.ok()) << whole.status();
  ASSERT_TRUE((*whole)->SyncWeights(1).ok());
  absl::StatusOr<v1::GenerateResponse> split = (*actor)->Generate(Greedy(*tokenizer));
  absl::StatusOr<v1::GenerateResponse> one = (*whole)->Generate(Greedy(*tokenizer));
  ASSERT_TRUE(split.ok()) << split.status();
  ASSERT_TRUE(one.ok()) << one.status();
  ASSERT_EQ(split->samples_size(), one->samples_size());
  for (int i = 0; i < one->samples_size(); ++i) {
    const auto& want = one->samples(i).response_tokens();
    const auto& got = split->samples(i).response_tokens();
    EXPECT_EQ(std::vector<int32_t>(got.begin(), got.end()),
              std::vector<int32_t>(want.begin(), want.end()))
        << "sample " << i;
  }

  // Version 2 is never published: the sync fails, and the actor's weights
  // are no version until one succeeds.
  EXPECT_FALSE((*actor)->SyncWeights(2).ok());
  const absl::StatusOr<v1::GenerateResponse> refused = (*actor)->Generate(Greedy(*tokenizer));
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(refused.status().message(), HasSubstr("failed midway"));
}

}  // namespace
}  // namespace trellis::actor
