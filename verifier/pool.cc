// The verifier pool (pool.h): cache, circuit breaker and stats around any
// verifier.

#include "verifier/pool.h"

#include <algorithm>
#include <atomic>
#include <exception>
#include <iostream>
#include <list>
#include <set>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "verifier/internal/breaker.h"
#include "verifier/internal/result.h"

namespace trellis::verifier {
namespace {

using internal::Failed;

// Length-prefixed fields: no two different items share a key.
std::string CacheKey(const v1::VerifyItem& item) {
  std::string key;
  for (const std::string* f :
       {&item.prompt(), &item.response(), &item.answer(), &item.metadata_json()}) {
    absl::StrAppend(&key, f->size(), ":", *f);
  }
  return key;
}

bool Cacheable(const v1::VerifyResult& r) {
  return r.verdict() == v1::CORRECT || r.verdict() == v1::WRONG ||
         r.verdict() == v1::UNPARSEABLE;
}

bool Bad(const v1::VerifyResult& r) {
  return r.verdict() == v1::ERROR || r.verdict() == v1::TIMEOUT;
}

// VerifierStats' key for why `r` is ERROR or TIMEOUT.
std::string Reason(const v1::VerifyResult& r) {
  if (r.failure() == v1::VerifyResult::FAILURE_UNSPECIFIED) return "verifier";
  return absl::AsciiStrToLower(v1::VerifyResult::Failure_Name(r.failure()));
}

// The value at quantile q (0..1) of `v`, nearest rank; 0 when empty.
double Quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t rank = static_cast<size_t>(q * static_cast<double>(v.size()) + 0.999999);
  rank = std::clamp<size_t>(rank, 1, v.size());
  return v[rank - 1];
}

// A bounded LRU map from key to result. Thread-safe.
class ResultCache {
 public:
  explicit ResultCache(size_t capacity) : capacity_(capacity) {}

  bool Get(const std::string& key, v1::VerifyResult* out) {
    absl::MutexLock lock(&mu_);
    auto it = index_.find(key);
    if (it == index_.end()) return false;
    order_.splice(order_.begin(), order_, it->second);
    *out = it->second->second;
    return true;
  }

  void Put(const std::string& key, const v1::VerifyResult& r) {
    if (capacity_ == 0) return;
    absl::MutexLock lock(&mu_);
    auto it = index_.find(key);
    if (it != index_.end()) {
      it->second->second = r;
      order_.splice(order_.begin(), order_, it->second);
      return;
    }
    order_.emplace_front(key, r);
    index_.emplace(key, order_.begin());
    while (order_.size() > capacity_) {
      index_.erase(order_.back().first);
      order_.pop_back();
    }
  }

 private:
  using Entry = std::pair<std::string, v1::VerifyResult>;
  const size_t capacity_;
  absl::Mutex mu_;
  std::list<Entry> order_ ABSL_GUARDED_BY(mu_);
  std::unordered_map<std::string, std::list<Entry>::iterator> index_ ABSL_GUARDED_BY(mu_);
};

class Pool : public Verifier {
 public:
  Pool(std::unique_ptr<Verifier> inner, const v1::VerifierConfig& config, PoolOptions options)
      : inner_(std::move(inner)),
        config_(config),
        label_(VerifierLabel(config)),
        env_(options.env != nullptr ? options.env : env::Env::Default()),
        breaker_(label_, config, env_,
                 options.log ? std::move(options.log)
                             : [](const std::string& line) { std::cerr << line << std::endl; }),
        cache_(static_cast<size_t>(std::max(0, config.cache_entries()))) {}

  v1::VerifyResult Verify(const v1::VerifyItem& item) const override {
    google::protobuf::RepeatedPtrField<v1::VerifyItem> one;
    *one.Add() = item;
    return std::move(VerifyBatchWithStats(one, nullptr)[0]);
  }

  std::vector<v1::VerifyResult> VerifyBatch(
      const google::protobuf::RepeatedPtrField<v1::VerifyItem>& items) const override {
    return VerifyBatchWithStats(items, nullptr);
  }

  bool PrefersBatches() const override { return inner_->PrefersBatches(); }
  int MaxConcurrency() const override { return inner_->MaxConcurrency(); }

  std::vector<v1::VerifyResult> VerifyBatchWithStats(
      const google::protobuf::RepeatedPtrField<v1::VerifyItem>& items,
      v1::VerifierStats* stats) const override;

 private:
  // What one request gathered.
  struct Tally {
    int64_t cache_hits = 0;
    int64_t openings = 0;
    int64_t rejected = 0;
    int64_t calls = 0;
    std::vector<double> latencies;  // one per item verified by a call
  };

  // Verifies items[positions[k]] into results[positions[k]].
  void Dispatch(const google::protobuf::RepeatedPtrField<v1::VerifyItem>& items,
                const std::vector<int>& positions, std::vector<v1::VerifyResult>& results,
                Tally& tally) const;
  void DispatchBatch(const google::protobuf::RepeatedPtrField<v1::VerifyItem>& items,
                     const std::vector<int>& positions, std::vector<v1::VerifyResult>& results,
                     Tally& tally) const;

  v1::VerifyResult Rejected(const std::string& detail) const {
    return Failed(v1::ERROR, config_.reward_wrong(), detail, v1::VerifyResult::CIRCUIT_OPEN);
  }

  const std::unique_ptr<Verifier> inner_;
  const v1::VerifierConfig config_;
  const std::string label_;
  env::Env* const env_;
  mutable internal::Breaker breaker_;
  mutable ResultCache cache_;
};

void Pool::Dispatch(const google::protobuf::RepeatedPtrField<v1::VerifyItem>& items,
                    const std::vector<int>& positions, std::vector<v1::VerifyResult>& results,
                    Tally& tally) const {
  if (positions.empty()) return;
  if (inner_->PrefersBatches()) {
    DispatchBatch(items, positions, results, tally);
    return;
  }
  absl::Mutex mu;
  std::atomic<size_t> next{0};
  auto run = [&] {
    for (size_t k = next++; k < positions.size(); k = next++) {
      v1::VerifyResult& r = results[positions[k]];
      const std::string refused = breaker_.Admit();
      if (!refused.empty()) {
        r = Rejected(refused);
        absl::MutexLock lock(&mu);
        ++tally.rejected;
        continue;
      }
      const absl::Time start = env_->Now();
      try {
        r = inner_->Verify(items[positions[k]]);
      } catch (const std::exception& e) {
        r = Failed(v1::ERROR, config_.reward_wrong(), absl::StrCat("verifier threw: ", e.what()),
                   v1::VerifyResult::CALL_FAILED);
      }
      const double seconds = absl::ToDoubleSeconds(env_->Now() - start);
      const bool opened = breaker_.Observe(Bad(r), r.detail());
      absl::MutexLock lock(&mu);
      ++tally.calls;
      tally.openings += opened;
      tally.latencies.push_back(seconds);
    }
  };
  const int threads =
      std::clamp<int>(inner_->MaxConcurrency(), 1, static_cast<int>(positions.size()));
  std::vector<std::thread> helpers;
  for (int t = 1; t < threads; ++t) helpers.emplace_back(run);
  run();
  for (std::thread& t : helpers) t.join();
}

void Pool::DispatchBatch(const google::protobuf::RepeatedPtrField<v1::VerifyItem>& items,
                         const std::vector<int>& positions,
                         std::vector<v1::VerifyResult>& results, Tally& tally) const {
  const std::string refused = breaker_.Admit();
  if (!refused.empty()) {
    for (int p : positions) results[p] = Rejected(refused);
    tally.rejected += static_cast<int64_t>(positions.size());
    return;
  }
  google::protobuf::RepeatedPtrField<v1::VerifyItem> batch;
  batch.Reserve(static_cast<int>(positions.size()));
  for (int p : positions) *batch.Add() = items[p];
  const absl::Time start = env_->Now();
  std::vector<v1::VerifyResult> got;
  std::string failure;
  try {
    got = inner_->VerifyBatch(batch);
  } catch (const std::exception& e) {
    failure = absl::StrCat("verifier threw: ", e.what());
  }
  if (failure.empty() && got.size() != positions.size()) {
    failure = absl::StrCat("verifier returned ", got.size(), " results for ", positions.size(),
                           " items");
  }
  const double seconds = absl::ToDoubleSeconds(env_->Now() - start);
  ++tally.calls;
  // The call failed when no item got an answer.
  const v1::VerifyResult* first_bad = nullptr;
  bool all_bad = true;
  for (size_t k = 0; k < positions.size(); ++k) {
    v1::VerifyResult& r = results[positions[k]];
    r = failure.empty()
            ? std::move(got[k])
            : Failed(v1::ERROR, config_.reward_wrong(), failure, v1::VerifyResult::CALL_FAILED);
    all_bad = all_bad && Bad(r);
    if (Bad(r) && first_bad == nullptr) first_bad = &r;
    tally.latencies.push_back(seconds);
  }
  tally.openings += breaker_.Observe(all_bad, first_bad != nullptr ? first_bad->detail() : "");
}

std::vector<v1::VerifyResult> Pool::VerifyBatchWithStats(
    const google::protobuf::RepeatedPtrField<v1::VerifyItem>& items,
    v1::VerifierStats* stats) const {
  const absl::Time start = env_->Now();
  const int n = items.size();
  std::vector<v1::VerifyResult> results(n);
  Tally tally;
  // Items to verify (the first of each distinct key when caching), and for
  // each item the one whose result it copies (-1: its own or the cache's).
  std::vector<int> todo;
  std::vector<int> copy_of(n, -1);
  std::vector<std::string> keys;
  const bool caching = config_.cache_entries() > 0;
  if (caching) {
    keys.resize(n);
    std::unordered_map<std::string, int> first;
    for (int i = 0; i < n; ++i) {
      keys[i] = CacheKey(items[i]);
      if (cache_.Get(keys[i], &results[i])) {
        ++tally.cache_hits;
        continue;
      }
      auto [it, fresh] = first.emplace(keys[i], i);
      if (fresh) {
        todo.push_back(i);
      } else {
        copy_of[i] = it->second;
        ++tally.cache_hits;
      }
    }
  } else {
    todo.resize(n);
    for (int i = 0; i < n; ++i) todo[i] = i;
  }

  Dispatch(items, todo, results, tally);

  if (caching) {
    for (int i : todo) {
      if (Cacheable(results[i])) cache_.Put(keys[i], results[i]);
    }
    for (int i = 0; i < n; ++i) {
      if (copy_of[i] >= 0) results[i] = results[copy_of[i]];
    }
  }
  if (stats == nullptr) return results;

  stats->set_verifier(label_);
  stats->set_items(stats->items() + n);
  stats->set_cache_hits(stats->cache_hits() + tally.cache_hits);
  int64_t timeouts = 0, errors = 0, retries = 0;
  std::set<std::string> reported;
  for (int i : todo) {
    const v1::VerifyResult& r = results[i];
    timeouts += r.verdict() == v1::TIMEOUT;
    errors += r.verdict() == v1::ERROR;
    retries += r.retries();
    if (!r.verifier().empty()) reported.insert(r.verifier());
    if (r.verdict() == v1::TIMEOUT) ++(*stats->mutable_timeouts_by_reason())[Reason(r)];
    if (r.verdict() == v1::ERROR && r.failure() != v1::VerifyResult::CIRCUIT_OPEN) {
      ++(*stats->mutable_errors_by_reason())[Reason(r)];
    }
  }
  for (const std::string& name : stats->reported()) reported.insert(name);
  stats->clear_reported();
  for (const std::string& name : reported) stats->add_reported(name);
  errors -= tally.rejected;  // counted on their own
  stats->set_timeouts(stats->timeouts() + timeouts);
  stats->set_errors(stats->errors() + errors);
  stats->set_retries(stats->retries() + retries);
  stats->set_breaker_openings(stats->breaker_openings() + tally.openings);
  stats->set_breaker_rejected(stats->breaker_rejected() + tally.rejected);
  stats->set_calls(stats->calls() + tally.calls);
  stats->set_wait_seconds(stats->wait_seconds() + absl::ToDoubleSeconds(env_->Now() - start));
  stats->set_latency_p50_seconds(Quantile(tally.latencies, 0.50));
  stats->set_latency_p99_seconds(Quantile(tally.latencies, 0.99));
  return results;
}

}  // namespace

std::string VerifierLabel(const v1::VerifierConfig& config) {
  return config.version().empty() ? config.name()
                                  : absl::StrCat(config.name(), "@", config.version());
}

std::unique_ptr<Verifier> NewVerifierPool(std::unique_ptr<Verifier> inner,
                                          const v1::VerifierConfig& config, PoolOptions options) {
  return std::make_unique<Pool>(std::move(inner), config, std::move(options));
}

}  // namespace trellis::verifier
