// The learner's data-parallel group over NCCL (nccl_group.h): two ranks as
// threads of one process, rank r on CUDA device r, each collective's
// results against the same collectives over Gloo on the CPU
// (data_parallel.h). Skips, saying why, under 2 visible CUDA devices.
#include <torch/cuda.h>
#include <torch/torch.h>

#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "comm/tcp_store.h"
#include "gtest/gtest.h"
#include "learner/internal/data_parallel.h"

namespace trellis::learner::internal {
namespace {

std::string WhyNot() {
  const int count = static_cast<int>(torch::cuda::device_count());
  if (count >= 2) return "";
  return "needs 2 CUDA devices (one per NCCL rank), found " + std::to_string(count);
}

// What one rank's collectives gave, on the CPU.
struct Results {
  std::vector<torch::Tensor> tensors;
  std::vector<double> scalars;
  int64_t bytes = 0;
  int64_t buffer_bytes = 0;
};

// Every collective of the group once, on inputs that depend on the rank
// only, made on `device`.
Results Exercise(DataParallelGroup& g, const torch::Device& device) {
  const int64_t r = g.rank();
  const auto on = [&device](const torch::Tensor& t) { return t.to(device); };
  std::vector<torch::Tensor> sums = {
      on(torch::arange(12, torch::kFloat32).reshape({3, 4}) * (r + 1)),
      on(torch::full({40}, 0.5f * (r + 1))), on(torch::arange(6, torch::kInt64) * (r + 3)),
      on(torch::linspace(0, 1, 5, torch::kFloat64) * (r + 2))};
  EXPECT_TRUE(g.AllReduceSum(sums).ok());
  std::vector<torch::Tensor> params = {on(torch::full({3}, static_cast<float>(r))),
                                       on(torch::full({2, 2}, 10.0f + r)),
                                       on(torch::full({5}, 20.0f + r, torch::kBFloat16))};
  EXPECT_TRUE(g.Broadcast(params, {1, 0, 1}).ok());
  const torch::Tensor shard = on(torch::arange(7, torch::kFloat32) + 100 * r);
  const torch::Tensor full = on(torch::zeros({14}));
  absl::StatusOr<std::function<absl::Status()>> gather = g.StartAllGather(full, shard);
  EXPECT_TRUE(gather.ok() && (*gather)().ok());
  const torch::Tensor mine = on(torch::zeros({7}));
  EXPECT_TRUE(g.ReduceScatterSum(mine, on(torch::arange(14, torch::kFloat32) * (r + 1))).ok());
  Results out;
  out.scalars = {1.5 + r, 1e-12, -2.0 * r};
  EXPECT_TRUE(g.AllReduceSum(out.scalars).ok());
  for (const std::vector<torch::Tensor>* ts : {&sums, &params}) {
    for (const torch::Tensor& t : *ts) {
      EXPECT_EQ(t.device(), device);
      out.tensors.push_back(t.cpu());
    }
  }
  out.tensors.push_back(full.cpu());
  out.tensors.push_back(mine.cpu());
  const Traffic traffic = g.TakeTraffic();
  EXPECT_GT(traffic.seconds, 0);
  out.bytes = traffic.bytes;
  out.buffer_bytes = g.buffer_bytes();
  return out;
}

// Two ranks, threads of this process, rank r's tensors on device(r), each
// running body on its group; their results by rank.
std::vector<Results> OnTwoRanks(const std::function<torch::Device(int)>& device,
                                const std::function<Results(DataParallelGroup&)>& body) {
  std::vector<Results> results(2);
  absl::StatusOr<int> port = comm::PickFreeTcpPort("127.0.0.1");
  EXPECT_TRUE(port.ok()) << port.status();
  if (!port.ok()) return results;
  std::vector<std::jthread> ranks;
  for (int r = 0; r < 2; ++r) {
    ranks.emplace_back([&, r] {
      GroupOptions o;
      o.member = {r, 2, "127.0.0.1", *port, ""};
      o.timeout = absl::Seconds(60);
      o.bucket_bytes = 64;  // several buckets per call
      o.worker_id = "learner-" + std::to_string(r);
      o.device = device(r);
      absl::StatusOr<std::unique_ptr<DataParallelGroup>> g = DataParallelGroup::Join(o);
      EXPECT_TRUE(g.ok()) << g.status();
      if (g.ok()) results[r] = body(**g);
    });
  }
  return results;  // after the ranks' threads have joined
}

TEST(NcclGroupGpuTest, EveryCollectiveGivesWhatGlooGives) {
  if (std::string why = WhyNot(); !why.empty()) GTEST_SKIP() << why;
  const std::vector<Results> gloo =
      OnTwoRanks([](int) { return torch::Device(torch::kCPU); },
                 [](DataParallelGroup& g) { return Exercise(g, torch::kCPU); });
  const auto cuda = [](int r) { return torch::Device(torch::kCUDA, static_cast<int8_t>(r)); };
  const std::vector<Results> nccl =
      OnTwoRanks(cuda, [&cuda](DataParallelGroup& g) { return Exercise(g, cuda(g.rank())); });
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(nccl[r].tensors.size(), gloo[r].tensors.size()) << "rank " << r;
    for (size_t i = 0; i < gloo[r].tensors.size(); ++i) {
      EXPECT_TRUE(nccl[r].tensors[i].equal(gloo[r].tensors[i]))
          << "rank " << r << ", tensor " << i << ": " << nccl[r].tensors[i] << " vs "
          << gloo[r].tensors[i];
    }
    EXPECT_EQ(nccl[r].scalars, gloo[r].scalars) << "rank " << r;
    EXPECT_EQ(nccl[r].bytes, gloo[r].bytes) << "rank " << r;
    EXPECT_EQ(nccl[r].buffer_bytes, gloo[r].buffer_bytes) << "rank " << r;
  }
  // Spot checks that the Gloo side is the sum and the owners' copies.
  EXPECT_TRUE(gloo[0].tensors[1].equal(torch::full({40}, 1.5f)));
  EXPECT_TRUE(gloo[1].tensors[4].equal(torch::full({3}, 1.0f)));
  EXPECT_EQ(gloo[0].scalars[0], 4.0);
}

TEST(NcclGroupGpuTest, RefusesTensorsOffItsDevice) {
  if (std::string why = WhyNot(); !why.empty()) GTEST_SKIP() << why;
  OnTwoRanks([](int r) { return torch::Device(torch::kCUDA, static_cast<int8_t>(r)); },
             [](DataParallelGroup& g) {
               std::vector<torch::Tensor> host = {torch::ones({4})};
               const absl::Status s = g.AllReduceSum(host);
               EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
               EXPECT_NE(s.message().find("expected one contiguous on the group's cuda:"),
                         std::string::npos)
                   << s;
               return Results{};
             });
}

}  // namespace
}  // namespace trellis::learner::internal
