#include "model/thread_probe.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <vector>

#include "model/threads.h"
#include "model/transformer.h"

namespace trellis::model {
namespace {

// The pass: about this many token positions, in rows of the model's length
// (at most kProbeLength), and this vocabulary when the job leaves it to the
// tokenizer (the head's share of the work is small either way).
constexpr int64_t kProbePositions = 256;
constexpr int64_t kProbeLength = 64;
constexpr int64_t kProbeVocab = 64;
// The pass runs one block (every block has the same operations) and a head
// of at most this many tokens, so probing a large model stays cheap.
constexpr int64_t kProbeMaxVocab = 4096;
// Rounds of timing; each round times every count once, so that a stretch
// of the machine being busy elsewhere falls on all counts alike.
constexpr int kProbeRounds = 5;
// The most arithmetic one timed pass may take (about 10 ms at this
// machine's peak).
constexpr double kProbeFlop = 1e9;

}  // namespace

int FewestThreadsWithin(const std::map<int, double>& seconds, double margin) {
  double fastest = seconds.begin()->second;
  for (const auto& [count, s] : seconds) fastest = std::min(fastest, s);
  for (const auto& [count, s] : seconds) {
    if (s <= fastest * (1 + margin)) return count;  // the map is ordered: fewest first
  }
  return seconds.begin()->first;
}

ThreadProbe ProbeIntraOpThreads(const v1::ModelConfig& config, int threads) {
  ThreadProbe probe;
  if (threads <= 1) return probe;
  // A generator of its own: probing never moves the run's random draws.
  at::Generator generator = at::make_generator<at::CPUGeneratorImpl>(1);
  const int64_t vocab = config.vocab_size() > 0
                            ? std::min<int64_t>(config.vocab_size(), kProbeMaxVocab)
                            : kProbeVocab;
  v1::ModelConfig shape = config;
  shape.set_n_layers(1);
  shape.set_vocab_size(vocab);
  Transformer model(shape, vocab, Head::kLanguageModel, v1::LoraConfig(),
                    InitialValues::kOverwritten);
  {
    torch::NoGradGuard no_grad;
    for (torch::Tensor& p : model->parameters()) p.normal_(0, 0.02, generator);
  }
  int64_t params = 0;
  for (const torch::Tensor& p : model->parameters()) params += p.numel();
  // Positions: kProbePositions, fewer for a block so large that the pass
  // would exceed kProbeFlop (a training pass is about 6 FLOP per parameter
  // and position).
  const int64_t length = std::min<int64_t>(shape.max_seq_len(), kProbeLength);
  const int64_t positions = std::clamp<int64_t>(static_cast<int64_t>(kProbeFlop / (6.0 * params)),
                                                length, kProbePositions);
  const int64_t rows = std::max<int64_t>(1, positions / length);
  const torch::Tensor tokens = torch::randint(vocab, {rows, length}, generator, torch::kLong);
  const torch::Tensor positions_ids = torch::arange(length, torch::kLong).expand({rows, length});
  const auto pass = [&] {
    model->zero_grad();
    model->forward(tokens, positions_ids).logsumexp(-1).mean().backward();
  };
  std::vector<int> counts;
  for (int count = threads; count >= 1; count /= 2) counts.push_back(count);
  for (int count : counts) {
    SetThreads(count);
    pass();  // warm-up: the pool's threads start, the allocator fills
  }
  for (int round = 0; round < kProbeRounds; ++round) {
    for (int count : counts) {
      SetThreads(count);
      const auto start = std::chrono::steady_clock::now();
      pass();
      const double seconds = std::max(
          1e-9, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
      auto [it, fresh] = probe.seconds.emplace(count, seconds);
      if (!fresh) it->second = std::min(it->second, seconds);
    }
  }
  probe.intra_op = FewestThreadsWithin(probe.seconds, kProbeMargin);
  SetThreads(probe.intra_op);
  return probe;
}

}  // namespace trellis::model
