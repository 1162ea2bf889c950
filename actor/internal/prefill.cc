#include "actor/internal/prefill.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "model/routing_record.h"

namespace trellis::actor::internal {
namespace {

// Moves each row's valid positions of `prefill` (where key_valid is true)
// to the right end of a cache of `columns` positions, in order.
void Compact(int64_t columns, Prefill* prefill) {
  const int64_t count = prefill->key_valid.size(0);
  torch::Tensor index = torch::zeros({count, columns}, torch::kInt64);
  torch::Tensor valid = torch::zeros({count, columns}, torch::kBool);
  auto at = index.accessor<int64_t, 2>();
  auto out = valid.accessor<bool, 2>();
  auto in = prefill->key_valid.accessor<bool, 2>();
  for (int64_t s = 0; s < count; ++s) {
    std::vector<int64_t> slots;
    for (int64_t c = 0; c < prefill->key_valid.size(1); ++c) {
      if (in[s][c]) slots.push_back(c);
    }
    const int64_t pad = columns - static_cast<int64_t>(slots.size());
    for (size_t k = 0; k < slots.size(); ++k) {
      at[s][pad + k] = slots[k];
      out[s][pad + k] = true;
    }
  }
  model::KVCache& cache = prefill->cache;
  for (auto* tensors : {&cache.keys, &cache.values}) {
    for (torch::Tensor& t : *tensors) {
      const torch::Tensor gather = index.to(t.device())
                                       .view({count, 1, columns, 1})
                                       .expand({count, t.size(1), columns, t.size(3)});
      t = t.gather(2, gather);
    }
  }
  cache.length = columns;
  cache.capacity = columns;
  prefill->key_valid = valid;
}

}  // namespace

Prefill RunPrefill(model::Decoder& model,
                   const std::vector<const google::protobuf::RepeatedField<int32_t>*>& sequences,
                   int32_t pad_id, TurnCache* turns, bool record_routing,
                   EngineResult* result) {
  const int64_t count = static_cast<int64_t>(sequences.size());
  // Per sequence: the entry of its cached prefix, and that prefix's length.
  std::vector<std::optional<TurnCache::Entry>> cached(count);
  std::vector<int64_t> reused(count, 0);
  int64_t past = 0, columns = 1, longest = 0;
  for (int64_t s = 0; s < count; ++s) {
    if (turns != nullptr) cached[s] = turns->Take(*sequences[s]);
    if (cached[s]) reused[s] = cached[s]->kv.length;
    past = std::max(past, reused[s]);
    columns = std::max<int64_t>(columns, sequences[s]->size() - reused[s]);
    longest = std::max<int64_t>(longest, sequences[s]->size());
  }
  // The cached prefixes right-aligned in [0, past), then the remaining
  // tokens left-padded in [past, past + columns).
  torch::Tensor tokens = torch::full({count, columns}, pad_id, torch::kInt64);
  torch::Tensor positions = torch::zeros({count, columns}, torch::kInt64);
  torch::Tensor key_valid = torch::zeros({count, past + columns}, torch::kBool);
  auto tok = tokens.accessor<int64_t, 2>();
  auto pos = positions.accessor<int64_t, 2>();
  auto valid = key_valid.accessor<bool, 2>();
  for (int64_t s = 0; s < count; ++s) {
    const auto& ids = *sequences[s];
    const int64_t fresh = ids.size() - reused[s];
    const int64_t pad = columns - fresh;
    for (int64_t k = 0; k < reused[s]; ++k) valid[s][past - reused[s] + k] = true;
    for (int64_t k = 0; k < fresh; ++k) {
      tok[s][pad + k] = ids[reused[s] + k];
      pos[s][pad + k] = reused[s] + k;
      valid[s][past + pad + k] = true;
    }
    result->prefill_tokens += fresh;
    result->reused_tokens += reused[s];
  }
  result->prefill.positions += count * columns;
  result->prefill.attention_pairs += count * columns * (past + columns);
  ++result->prefill.forwards;
  Prefill prefill{model.NewCache(count, past + columns), key_valid, {}};
  for (int64_t s = 0; s < count; ++s) {
    if (!cached[s]) continue;
    for (size_t l = 0; l < prefill.cache.keys.size(); ++l) {
      prefill.cache.keys[l][s]
          .narrow(1, past - reused[s], reused[s])
          .copy_(cached[s]->kv.keys[l][0]);
      prefill.cache.values[l][s]
          .narrow(1, past - reused[s], reused[s])
          .copy_(cached[s]->kv.values[l][0]);
    }
    cached[s].reset();
  }
  prefill.cache.length = past;
  model::ExpertRouting routing;
  torch::Tensor last = model
                           .Hidden(tokens, positions, key_valid, &prefill.cache,
                                   record_routing ? &routing : nullptr)
                           .narrow(1, columns - 1, 1);
  prefill.logits = model.ApplyHead(last).select(1, 0);
  if (record_routing) {
    // Each sequence's tokens are the last of the left-padded columns.
    for (int64_t s = 0; s < count; ++s) {
      const int64_t fresh = sequences[s]->size();
      model::AppendRouting(routing.chosen[s].narrow(0, columns - fresh, fresh),
                           &prefill.routing.emplace_back());
    }
  }
  if (past > 0) Compact(longest, &prefill);
  return prefill;
}

}  // namespace trellis::actor::internal
