// HostOffload on the CPU: the tracked CPU allocator (the ledger's view of a
// CPU role's memory) loses exactly the bytes moved out and gets them back
// on the way in; the tensors stay the same objects with the same bits, so
// an optimizer that holds them steps as if nothing had moved.
#include "model/offload.h"

#include <torch/torch.h>

#include <vector>

#include "gtest/gtest.h"
#include "ledger/memory_tracker.h"

namespace trellis::model {
namespace {

TEST(HostOffloadTest, MoveOutFreesTrackedBytesAndMoveInRestoresTheSameTensors) {
  ledger::MemoryTracker::Install();
  ledger::MemoryTracker& tracker = ledger::MemoryTracker::Get();
  torch::manual_seed(3);
  const torch::Tensor a = torch::randn({64, 32});
  const torch::Tensor b = torch::randn({100}, torch::kFloat64);
  const torch::Tensor empty = torch::empty({0});
  const torch::Tensor a_before = a.clone(), b_before = b.clone();
  const void* a_impl = a.unsafeGetTensorImpl();
  const int64_t bytes = a.nbytes() + b.nbytes();

  HostOffload offload;
  const int64_t live = tracker.live_bytes();
  // A repeat, an alias and an empty tensor move nothing more.
  const torch::Tensor alias = a;
  const MoveResult out = offload.MoveOut({a, b, a, alias, empty, torch::Tensor()});
  EXPECT_EQ(out.tensors, 2);
  EXPECT_EQ(out.bytes, bytes);
  EXPECT_GE(out.seconds, 0);
  EXPECT_TRUE(offload.out());
  EXPECT_EQ(offload.host_bytes(), bytes);
  EXPECT_EQ(live - tracker.live_bytes(), bytes);
  // Readable while out, bit for bit.
  EXPECT_TRUE(torch::equal(a, a_before));
  EXPECT_TRUE(torch::equal(b, b_before));
  EXPECT_EQ(offload.MoveOut({a}).tensors, 0);

  const MoveResult in = offload.MoveIn();
  EXPECT_EQ(in.tensors, 2);
  EXPECT_EQ(in.bytes, bytes);
  EXPECT_FALSE(offload.out());
  EXPECT_EQ(offload.host_bytes(), 0);
  EXPECT_EQ(tracker.live_bytes(), live);
  EXPECT_EQ(a.unsafeGetTensorImpl(), a_impl);
  EXPECT_TRUE(torch::equal(a, a_before));
  EXPECT_TRUE(torch::equal(b, b_before));
  EXPECT_EQ(offload.MoveIn().tensors, 0);
}

// Two identical AdamW runs, one with its state and weights moved out and
// back between every step: the same bits at the end.
TEST(HostOffloadTest, OptimizerStepsAfterMovesAreBitIdentical) {
  torch::manual_seed(5);
  const torch::Tensor init = torch::randn({16, 8});
  const torch::Tensor target = torch::randn({16, 8});
  std::vector<torch::Tensor> finals;
  for (const bool offloaded : {false, true}) {
    torch::Tensor w = init.clone().requires_grad_(true);
    torch::optim::AdamW optimizer({w}, torch::optim::AdamWOptions(0.1));
    HostOffload offload;
    for (int step = 0; step < 4; ++step) {
      offload.MoveIn();
      optimizer.zero_grad();
      (w - target).pow(2).sum().backward();
      optimizer.step();
      if (!offloaded) continue;
      std::vector<torch::Tensor> state{w};
      for (const auto& [key, s] : optimizer.state()) {
        auto& adam = static_cast<torch::optim::AdamWParamState&>(*s);
        state.push_back(adam.exp_avg());
        state.push_back(adam.exp_avg_sq());
      }
      EXPECT_EQ(offload.MoveOut(state).bytes, 3 * w.nbytes());
    }
    offload.MoveIn();
    finals.push_back(w.detach().clone());
  }
  EXPECT_TRUE(torch::equal(finals[0], finals[1]));
}

}  // namespace
}  // namespace trellis::model
