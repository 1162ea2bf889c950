// PromptStream: reshuffles at each pass from (seed, pass) alone, so any
// position can be resumed without replaying the passes before it.

#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <random>

#include "data/dataset.h"
#include "data/internal/random.h"

namespace trellis::data {

PromptStream::PromptStream(std::vector<Example> examples, uint64_t seed)
    : examples_(std::move(examples)), seed_(seed) {
  Shuffle();
}

void PromptStream::Shuffle() {
  order_.resize(examples_.size());
  std::iota(order_.begin(), order_.end(), size_t{0});
  std::mt19937_64 rng(internal::Mix(seed_ ^ internal::Mix(epoch_)));
  internal::Shuffle(order_, rng);
}

void PromptStream::Seek(uint64_t position) { position_ = position; }

const Example& PromptStream::At(uint64_t position) {
  const uint64_t now = position_;
  position_ = position;
  const Example& example = Next();
  position_ = now;
  return example;
}

const Example& PromptStream::Next() {
  if (examples_.empty()) {
    std::fprintf(stderr, "trellis::data::PromptStream::Next on an empty dataset\n");
    std::abort();
  }
  const uint64_t epoch = position_ / examples_.size();
  if (epoch != epoch_) {
    epoch_ = epoch;
    Shuffle();
  }
  return examples_[order_[position_++ % examples_.size()]];
}

}  // namespace trellis::data
