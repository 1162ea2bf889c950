// The verifier pool (pool.h): cache, circuit breaker and stats around any
// verifier.

#include "verifier/pool.h"

#include <algorithm>
#include <atomic>
#include <deque>
#include <exception>
#include <iostream>
#include <list>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "verifier/internal/result.h"

namespace trellis::verifier {
namespace {

using internal::Result;

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
        log_(options.log ? std::move(options.log)
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

  // The breaker's answer for an item about to be verified: "" to go ahead,
  // else the detail of its ERROR.
  std::string Admit() const ABSL_LOCKS_EXCLUDED(mu_);
  // Feeds one answer from the verifier to the breaker; returns whether it
  // opened it.
  bool Observe(bool bad) const ABSL_LOCKS_EXCLUDED(mu_);
  void Open(int64_t bad, int64_t of) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Verifies items[positions[k]] into results[positions[k]].
  void Dispatch(const google::protobuf::RepeatedPtrField<v1::VerifyItem>& items,
                const std::vector<int>& positions, std::vector<v1::VerifyResult>& results,
                Tally& tally) const;
  void DispatchBatch(const google::protobuf::RepeatedPtrField<v1::VerifyItem>& items,
                     const std::vector<int>& positions, std::vector<v1::VerifyResult>& results,
                     Tally& tally) const;

  v1::VerifyResult Rejected(const std::string& detail) const {
    return Result(v1::ERROR, config_.reward_wrong(), detail);
  }

  const std::unique_ptr<Verifier> inner_;
  const v1::VerifierConfig config_;
  const std::string label_;
  env::Env* const env_;
  const std::function<void(const std::string&)> log_;
  mutable ResultCache cache_;

  enum class State { kClosed, kOpen, kHalfOpen };
  mutable absl::Mutex mu_;
  mutable State state_ ABSL_GUARDED_BY(mu_) = State::kClosed;
  mutable std::deque<bool> window_ ABSL_GUARDED_BY(mu_);  // true: ERROR or TIMEOUT
  mutable int64_t window_bad_ ABSL_GUARDED_BY(mu_) = 0;
  mutable absl::Time open_until_ ABSL_GUARDED_BY(mu_);
  mutable std::string open_detail_ ABSL_GUARDED_BY(mu_);
};

std::string Pool::Admit() const {
  if (config_.breaker_window() <= 0) return "";
  absl::MutexLock lock(&mu_);
  if (state_ != State::kOpen) return "";
  if (env_->Now() < open_until_) return open_detail_;
  state_ = State::kHalfOpen;  // the pause is over: this item is the trial
  return "";
}

void Pool::Open(int64_t bad, int64_t of) const {
  state_ = State::kOpen;
  open_until_ = env_->Now() + absl::Milliseconds(config_.breaker_pause_ms());
  open_detail_ = absl::StrCat("circuit open: ", label_, " failed ", bad, " of the last ", of,
                              " items; paused until ",
                              absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", open_until_,
                                               absl::UTCTimeZone()));
  window_.clear();
  window_bad_ = 0;
}

bool Pool::Observe(bool bad) const {
  const int window = config_.breaker_window();
  if (window <= 0) return false;
  std::string line;
  {
    absl::MutexLock lock(&mu_);
    if (state_ == State::kOpen) return false;  // an item admitted before it opened
    if (state_ == State::kHalfOpen) {
      if (!bad) {
        state_ = State::kClosed;
        window_.clear();
        window_bad_ = 0;
        return false;
      }
      Open(1, 1);
      line = absl::StrCat("verifier ", label_, ": trial item failed after the pause; ",
                          open_detail_);
    } else {
      window_.push_back(bad);
      window_bad_ += bad;
      if (static_cast<int>(window_.size()) > window) {
        window_bad_ -= window_.front();
        window_.pop_front();
      }
      if (static_cast<int>(window_.size()) < window ||
          static_cast<double>(window_bad_) <=
              static_cast<double>(config_.breaker_error_rate()) * window) {
        return false;
      }
      Open(window_bad_, window);
      line = absl::StrCat("verifier ", label_, ": ", open_detail_);
    }
  }
  log_(line);
  return true;
}

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
      const std::string refused = Admit();
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
        r = Result(v1::ERROR, config_.reward_wrong(), absl::StrCat("verifier threw: ", e.what()));
      }
      const double seconds = absl::ToDoubleSeconds(env_->Now() - start);
      const bool opened = Observe(Bad(r));
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
  const std::string refused = Admit();
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
  for (size_t k = 0; k < positions.size(); ++k) {
    v1::VerifyResult& r = results[positions[k]];
    r = failure.empty() ? std::move(got[k]) : Result(v1::ERROR, config_.reward_wrong(), failure);
    tally.openings += Observe(Bad(r));
    tally.latencies.push_back(seconds);
  }
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
  for (int i : todo) {
    const v1::VerifyResult& r = results[i];
    timeouts += r.verdict() == v1::TIMEOUT;
    errors += r.verdict() == v1::ERROR;
    retries += r.retries();
  }
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
