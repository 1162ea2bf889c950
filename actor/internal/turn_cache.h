#ifndef TRELLIS_ACTOR_INTERNAL_TURN_CACHE_H_
#define TRELLIS_ACTOR_INTERNAL_TURN_CACHE_H_

// Keys and values kept from one GenerateRequest to the next, for sequences
// that a later request goes on with: a multi-turn episode's next turn has
// as its prompt the sequence so far (docs/multi-turn.md), so the positions
// computed for the earlier turns need not be computed again. An entry holds
// a row's sequence (its prompt and every response token but the last, which
// was sampled and never fed) with that sequence's keys and values; a prompt
// that extends an entry's tokens by at least one token prefills only the
// rest (actor/internal/prefill.h). An entry serves one prompt per time it
// was put (a sequence only grows: it is removed when taken as often; rows
// with equal sequences share one entry); the entries put least recently are
// dropped once the budget would be exceeded, and the owner clears the cache
// when the weights change.

#include <cstdint>
#include <list>
#include <optional>
#include <unordered_map>
#include <vector>

#include "google/protobuf/repeated_field.h"
#include "model/transformer.h"

namespace trellis::actor::internal {

class TurnCache {
 public:
  struct Entry {
    std::vector<int32_t> tokens;
    // One row, tokens.size() positions (length == capacity).
    model::KVCache kv;
  };

  // REQUIRES: budget_bytes >= 0 (0: nothing is kept).
  explicit TurnCache(int64_t budget_bytes) : budget_bytes_(budget_bytes) {}

  // Takes (once) and returns the entry with the longest tokens that are a
  // proper prefix of `prompt`; nullopt when none is.
  std::optional<Entry> Take(const google::protobuf::RepeatedField<int32_t>& prompt);

  // Keeps `tokens` with the keys and values of row `row` of `source`, where
  // they are the last tokens.size() filled positions (rows right-aligned at
  // source.length, as the engine's caches are). Putting the tokens of an
  // entry again counts one more use of it and makes it the most recently
  // put. Else drops the entries put least recently until the cache fits
  // its budget; keeps nothing when this entry alone would exceed it.
  // REQUIRES: under torch::NoGradGuard; 0 < tokens.size() <= source.length.
  void Put(std::vector<int32_t> tokens, const model::KVCache& source, int64_t row);

  // Drops every entry (the weights changed).
  void Clear();

  int64_t bytes() const { return bytes_; }
  int64_t budget_bytes() const { return budget_bytes_; }
  size_t size() const { return entries_.size(); }

 private:
  struct Node {
    uint64_t hash;  // of entry.tokens
    Entry entry;
    int64_t uses;  // Takes left
  };
  using Entries = std::list<Node>;  // the most recently put first

  // Removes the entry at `it` and returns it.
  Entry Remove(Entries::iterator it);

  const int64_t budget_bytes_;
  int64_t bytes_ = 0;
  Entries entries_;
  // The hash of an entry's tokens to the entry.
  std::unordered_map<uint64_t, Entries::iterator> by_hash_;
};

}  // namespace trellis::actor::internal

#endif  // TRELLIS_ACTOR_INTERNAL_TURN_CACHE_H_
