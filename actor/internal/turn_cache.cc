#include "actor/internal/turn_cache.h"

#include <algorithm>
#include <utility>

namespace trellis::actor::internal {
namespace {

// hashes[k]: the FNV-1a hash of tokens[0, k), for k in [0, tokens.size()].
template <typename Tokens>
std::vector<uint64_t> PrefixHashes(const Tokens& tokens) {
  std::vector<uint64_t> hashes{0xcbf29ce484222325ULL};
  hashes.reserve(tokens.size() + 1);
  for (const int32_t token : tokens) {
    hashes.push_back((hashes.back() ^ static_cast<uint32_t>(token)) * 0x100000001b3ULL);
  }
  return hashes;
}

// What the last `length` positions of one row of `source` take, alone.
int64_t EntryBytes(const model::KVCache& source, int64_t length) {
  int64_t bytes = 0;
  for (const auto* tensors : {&source.keys, &source.values}) {
    for (const torch::Tensor& t : *tensors) {
      bytes += length * t.size(1) * t.size(3) * static_cast<int64_t>(t.element_size());
    }
  }
  return bytes;
}

}  // namespace

std::optional<TurnCache::Entry> TurnCache::Take(
    const google::protobuf::RepeatedField<int32_t>& prompt) {
  if (entries_.empty()) return std::nullopt;
  const std::vector<uint64_t> hashes = PrefixHashes(prompt);
  for (int64_t k = prompt.size() - 1; k >= 1; --k) {
    auto found = by_hash_.find(hashes[k]);
    if (found == by_hash_.end()) continue;
    const std::vector<int32_t>& tokens = found->second->entry.tokens;
    if (static_cast<int64_t>(tokens.size()) != k ||
        !std::equal(tokens.begin(), tokens.end(), prompt.begin())) {
      continue;  // a hash collision
    }
    if (--found->second->uses > 0) return found->second->entry;
    return Remove(found->second);
  }
  return std::nullopt;
}

void TurnCache::Put(std::vector<int32_t> tokens, const model::KVCache& source, int64_t row) {
  const int64_t length = static_cast<int64_t>(tokens.size());
  const int64_t bytes = EntryBytes(source, length);
  const uint64_t hash = PrefixHashes(tokens).back();
  if (auto same = by_hash_.find(hash); same != by_hash_.end()) {
    if (same->second->entry.tokens == tokens) {
      ++same->second->uses;
      entries_.splice(entries_.begin(), entries_, same->second);
      return;
    }
    Remove(same->second);  // a hash collision: the newer entry stays
  }
  if (bytes > budget_bytes_) return;
  while (bytes_ + bytes > budget_bytes_) Remove(std::prev(entries_.end()));
  Entry entry{std::move(tokens), {}};
  entry.kv.length = length;
  entry.kv.capacity = length;
  for (const torch::Tensor& k : source.keys) {
    entry.kv.keys.push_back(k.narrow(0, row, 1).narrow(2, source.length - length, length).clone());
  }
  for (const torch::Tensor& v : source.values) {
    entry.kv.values.push_back(
        v.narrow(0, row, 1).narrow(2, source.length - length, length).clone());
  }
  bytes_ += bytes;
  entries_.push_front({hash, std::move(entry), 1});
  by_hash_[hash] = entries_.begin();
}

void TurnCache::Clear() {
  entries_.clear();
  by_hash_.clear();
  bytes_ = 0;
}

TurnCache::Entry TurnCache::Remove(Entries::iterator it) {
  bytes_ -= it->entry.kv.bytes();
  by_hash_.erase(it->hash);
  Entry entry = std::move(it->entry);
  entries_.erase(it);
  return entry;
}

}  // namespace trellis::actor::internal
