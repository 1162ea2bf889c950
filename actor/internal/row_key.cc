#include "actor/internal/row_key.h"

#include <map>

namespace trellis::actor::internal {
namespace {

// splitmix64's finalizer: a bijection of 64-bit words that mixes every bit.
uint64_t Mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

}  // namespace

double RowUniform(const RowKey& key, int64_t position) {
  uint64_t h = Mix(key.seed);
  for (uint64_t word :
       {key.prompt_id, key.occurrence, key.index, static_cast<uint64_t>(position)}) {
    h = Mix(h ^ word);
  }
  // The top 53 bits: every double in [0, 1) on a 2^-53 grid.
  return static_cast<double>(h >> 11) * 0x1.0p-53;
}

std::vector<uint64_t> Occurrences(const google::protobuf::RepeatedPtrField<v1::Prompt>& prompts) {
  std::map<uint64_t, uint64_t> seen;
  std::vector<uint64_t> out;
  out.reserve(prompts.size());
  for (const v1::Prompt& p : prompts) out.push_back(seen[p.id()]++);
  return out;
}

}  // namespace trellis::actor::internal
