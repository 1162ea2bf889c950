// Routing replay end to end in one process: the engine records the experts
// every position it ran was routed to, and the learner's forward, replaying
// the record (model/routing_record.h), gives the actor's log-probs for every
// token, also where the actor's router breaks near-ties otherwise than the
// learner's.

#include <algorithm>
#include <cmath>
#include <iostream>
#include <string>
#include <vector>

#include "actor/internal/engine.h"
#include "gtest/gtest.h"
#include "model/routing_record.h"
#include "model/testing/small_model.h"
#include "model/token_batch.h"
#include "model/transformer.h"

namespace trellis::actor::internal {
namespace {

constexpr int32_t kPad = 0;

v1::ModelConfig MoeConfig() {
  v1::ModelConfig c = model::testing::SmallConfig();
  c.set_num_experts(4);
  c.set_experts_per_token(2);
  c.set_expert_d_ff(24);
  return c;
}

v1::GenerateRequest Request() {
  v1::GenerateRequest request;
  request.set_responses_per_prompt(4);
  request.set_seed(5);
  request.mutable_sampling()->set_temperature(1.0);
  request.mutable_sampling()->set_top_p(1.0f);
  request.mutable_sampling()->set_max_new_tokens(8);
  for (int p = 0; p < 6; ++p) {
    v1::Prompt* prompt = request.add_prompts();
    prompt->set_id(10 + p);
    for (int k = 0; k < 2 + (p * 5) % 6; ++k) prompt->add_token_ids(1 + (p * 7 + k * 3) % 20);
  }
  return request;
}

EngineResult Sample(model::TransformerImpl& model, const v1::GenerateRequest& request,
                 EngineOptions options) {
  torch::NoGradGuard no_grad;
  options.record_routing = true;
  EngineCallbacks callbacks;
  callbacks.is_eos = [](int32_t token) { return token % 5 == 0; };
  absl::StatusOr<EngineResult> result = RunEngine(model, request, kPad, options, callbacks);
  EXPECT_TRUE(result.ok()) << result.status();
  return result.ok() ? *std::move(result) : EngineResult();
}

// Each layer's router rows of `model` by layer.
std::vector<torch::Tensor> Routers(model::TransformerImpl& model) {
  std::vector<torch::Tensor> routers;
  for (const auto& p : model.named_parameters()) {
    if (p.key().find("mlp.gate.weight") != std::string::npos) routers.push_back(p.value());
  }
  return routers;
}

class RoutingReplayTest : public testing::Test {
 protected:
  void SetUp() override {
    torch::manual_seed(7);
    learner_ = model::Transformer(MoeConfig(), model::testing::kVocab);
    learner_->eval();
    // Experts 1 and 2 nearly tie in every router: their rows differ by a
    // hair, so their probabilities nearly agree while their weights differ.
    torch::NoGradGuard no_grad;
    for (torch::Tensor& w : Routers(*learner_)) w[2].copy_(w[1] + 2e-6 * w[3]);
    ASSERT_EQ(Routers(*learner_).size(), 2u);
  }

  // The learner's weights with router rows 1 and 2 swapped: an engine whose
  // numerics break the near-ties the other way.
  model::Transformer SwappedActor() {
    torch::manual_seed(7);
    model::Transformer actor(MoeConfig(), model::testing::kVocab);
    actor->eval();
    torch::NoGradGuard no_grad;
    EXPECT_TRUE(actor->LoadWeights(learner_->NamedWeights()).ok());
    for (torch::Tensor& w : Routers(*actor)) {
      const torch::Tensor row1 = w[1].clone();
      w[1].copy_(w[2]);
      w[2].copy_(row1);
    }
    return actor;
  }

  struct Scored {
    model::TokenBatch batch;
    std::vector<const EngineRow*> rows;
    torch::Tensor replay;  // [B, T, layers, k]
  };

  // The engine's rows as a teacher-forced batch and their records placed on it.
  Scored Score(const EngineResult& result, const v1::GenerateRequest& request) {
    Scored s;
    std::vector<model::SequencePair> pairs;
    std::vector<v1::ExpertRouting> records;
    const model::RoutingShape shape = model::RoutingShapeOf(MoeConfig());
    const int n = request.responses_per_prompt();
    for (size_t r = 0; r < result.rows.size(); ++r) {
      pairs.push_back({request.prompts(r / n).token_ids(), result.rows[r].tokens});
      s.rows.push_back(&result.rows[r]);
      records.push_back(model::MakeRouting(shape, result.rows[r].routing));
    }
    absl::StatusOr<model::TokenBatch> batch = model::MakeTokenBatch(pairs, kPad, 32);
    EXPECT_TRUE(batch.ok()) << batch.status();
    s.batch = *std::move(batch);
    const std::vector<int64_t> live = model::LiveLengths(s.batch);
    std::vector<const v1::ExpertRouting*> pointers;
    for (size_t r = 0; r < records.size(); ++r) {
      EXPECT_TRUE(model::CheckRouting(records[r], shape, live[r], "row").ok());
      pointers.push_back(&records[r]);
    }
    s.replay = model::PlaceRouting(pointers, s.batch, shape);
    return s;
  }

  // Largest |actor - learner| log-prob over every response token.
  static double LargestGap(const Scored& s, const torch::Tensor& logp) {
    double gap = 0;
    for (size_t r = 0; r < s.rows.size(); ++r) {
      const std::vector<float> learner = model::RowResponseValues(logp, s.batch, r);
      for (size_t t = 0; t < learner.size(); ++t) {
        gap = std::max(gap, std::abs(static_cast<double>(learner[t] - s.rows[r]->logprobs[t])));
      }
    }
    return gap;
  }

  model::Transformer learner_{nullptr};
};

TEST_F(RoutingReplayTest, RecordsEveryPositionTheEngineRan) {
  const v1::GenerateRequest request = Request();
  const EngineResult shared = Sample(*learner_, request, {});
  EngineOptions plain;
  plain.share_prefix = false;
  plain.continuous_batching = false;
  const EngineResult unshared = Sample(*learner_, request, plain);
  ASSERT_EQ(shared.rows.size(), unshared.rows.size());
  const int64_t per_position = 2 * 2;  // layers x top-k
  for (size_t r = 0; r < shared.rows.size(); ++r) {
    const int64_t positions =
        request.prompts(r / 4).token_ids_size() + shared.rows[r].tokens.size() - 1;
    EXPECT_EQ(static_cast<int64_t>(shared.rows[r].routing.size()), positions * per_position)
        << "row " << r;
    EXPECT_EQ(shared.rows[r].tokens, unshared.rows[r].tokens) << "row " << r;
    EXPECT_EQ(shared.rows[r].routing, unshared.rows[r].routing) << "row " << r;
  }
}

TEST_F(RoutingReplayTest, ReplayGivesTheActorsLogProbsWhereOwnRoutingDoesNot) {
  const v1::GenerateRequest request = Request();
  model::Transformer actor = SwappedActor();
  const EngineResult result = Sample(*actor, request, {});
  Scored s = Score(result, request);
  torch::NoGradGuard no_grad;

  model::Transformer policy = learner_;
  model::ExpertRouting replayed;
  replayed.replay = s.replay;
  const torch::Tensor with_replay = model::TargetLogProbs(policy, s.batch, 1.0, nullptr, &replayed);
  model::ExpertRouting own;
  const torch::Tensor without = model::TargetLogProbs(policy, s.batch, 1.0, nullptr, &own);

  EXPECT_LT(LargestGap(s, with_replay), 1e-5);
  EXPECT_GT(LargestGap(s, without), 1e-2);
  const model::RoutingAgreement agreement = model::CompareRouting(own.chosen, s.replay, s.batch);
  EXPECT_GT(agreement.differing, agreement.compared / 10);
  std::cout << "largest |actor - learner| log-prob: replayed " << LargestGap(s, with_replay)
            << ", own routing " << LargestGap(s, without) << "; positions routed otherwise "
            << agreement.differing << " of " << agreement.compared << "\n";
}

TEST_F(RoutingReplayTest, ARecordThatDoesNotFitIsRefused) {
  const model::RoutingShape shape = model::RoutingShapeOf(MoeConfig());
  v1::ExpertRouting record = model::MakeRouting(shape, std::string(3 * 4, '\0'));
  EXPECT_TRUE(model::CheckRouting(record, shape, 3, "sample 0").ok());
  absl::Status wrong_length = model::CheckRouting(record, shape, 4, "sample 0");
  EXPECT_TRUE(absl::IsInvalidArgument(wrong_length));
  EXPECT_NE(wrong_length.message().find("sample 0: routing record of 12 bytes, expected 16"),
            std::string::npos)
      << wrong_length;
  record.mutable_experts()->back() = 4;
  absl::Status expert = model::CheckRouting(record, shape, 3, "sample 0");
  EXPECT_NE(expert.message().find("names expert 4 at byte 11; the model has 4"), std::string::npos)
      << expert;
  record.set_top_k(3);
  EXPECT_NE(model::CheckRouting(record, shape, 3, "x").message().find("layers x top-3"),
            std::string::npos);
}

}  // namespace
}  // namespace trellis::actor::internal
