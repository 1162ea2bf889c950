// The subprocess verifier: a pool of long-lived plugin processes speaking
// JSON lines (docs/verifier-plugins.md). Each sample has a deadline; a
// worker that misses it is killed with its whole process group and
// restarted, and the sample gets verdict TIMEOUT with timeout_reward.

#include <atomic>
#include <cmath>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "nlohmann/json.hpp"
#include "plugin/line_worker.h"
#include "verifier/internal/register.h"
#include "verifier/internal/result.h"

namespace trellis::verifier::internal {
namespace {

using plugin::LineWorker;

constexpr size_t kMaxLineBytes = 1 << 20;

std::string TypeName(const nlohmann::json& j) { return j.type_name(); }

class Subprocess : public Verifier {
 public:
  explicit Subprocess(const v1::VerifierConfig& c) : config_(c) {
    if (c.command_size() == 1) {
      argv_ = {"/bin/sh", "-c", c.command(0)};
    } else {
      argv_.assign(c.command().begin(), c.command().end());
    }
    for (int i = 0; i < c.workers(); ++i) {
      workers_.emplace_back(argv_, absl::StrCat("plugin worker ", i));
      free_.push_back(i);
    }
  }

  v1::VerifyResult Verify(const v1::VerifyItem& item) const override {
    const int w = Acquire();
    v1::VerifyResult r = Serve(workers_[w], item);
    Release(w);
    return r;
  }

  int MaxConcurrency() const override { return static_cast<int>(workers_.size()); }

  std::vector<v1::VerifyResult> VerifyBatch(
      const google::protobuf::RepeatedPtrField<v1::VerifyItem>& items) const override {
    std::vector<v1::VerifyResult> results(items.size());
    std::atomic<int> next{0};
    const int n = std::min<int>(items.size(), workers_.size());
    auto run = [&] {
      const int w = Acquire();
      for (int i = next++; i < items.size(); i = next++) results[i] = Serve(workers_[w], items[i]);
      Release(w);
    };
    std::vector<std::thread> threads;
    for (int t = 1; t < n; ++t) threads.emplace_back(run);
    if (n > 0) run();
    for (std::thread& t : threads) t.join();
    return results;
  }

 private:
  int Acquire() const {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(
        +[](std::vector<int>* f) { return !f->empty(); }, &free_));
    const int w = free_.back();
    free_.pop_back();
    return w;
  }
  void Release(int w) const {
    absl::MutexLock lock(&mu_);
    free_.push_back(w);
  }

  // ERROR for a plugin that broke the protocol (MALFORMED) or died
  // (CALL_FAILED).
  v1::VerifyResult Error(std::string detail,
                         v1::VerifyResult::Failure failure = v1::VerifyResult::MALFORMED) const {
    return internal::Failed(v1::ERROR, config_.reward_wrong(), std::move(detail), failure);
  }

  // Retries an item whose worker died, up to config.retries times.
  v1::VerifyResult Serve(LineWorker& w, const v1::VerifyItem& item) const {
    bool died = false;
    v1::VerifyResult r = Exchange(w, item, &died);
    for (int attempt = 0; died && attempt < config_.retries(); ++attempt) {
      r = Exchange(w, item, &died);
      if (!died) r.set_detail(absl::StrCat(r.detail(), " (retried ", attempt + 1, "x)"));
      r.set_retries(attempt + 1);
    }
    return r;
  }

  v1::VerifyResult Exchange(LineWorker& w, const v1::VerifyItem& item, bool* died) const {
    *died = false;
    nlohmann::json request = {
        {"prompt", item.prompt()}, {"response", item.response()}, {"answer", item.answer()}};
    if (!item.metadata_json().empty()) {
      nlohmann::json meta = nlohmann::json::parse(item.metadata_json(), nullptr, false);
      if (!meta.is_discarded()) request["metadata"] = std::move(meta);
    }
    const absl::Time deadline = absl::Now() + absl::Milliseconds(config_.deadline_ms());
    absl::StatusOr<std::string> answer = w.Call(request, deadline, kMaxLineBytes);
    const std::string message(answer.status().message());
    switch (answer.status().code()) {
      case absl::StatusCode::kOk: return Parse(*answer, request["id"].get<uint64_t>());
      case absl::StatusCode::kDeadlineExceeded:
        return internal::Failed(v1::TIMEOUT, config_.timeout_reward(),
                                absl::StrCat("timeout: no answer within ", config_.deadline_ms(),
                                             " ms; ", message, " and restarted"),
                                v1::VerifyResult::DEADLINE);
      case absl::StatusCode::kAborted:
        *died = true;
        return Error(absl::StrCat(message, " while verifying"), v1::VerifyResult::CALL_FAILED);
      case absl::StatusCode::kUnavailable: return Error(message, v1::VerifyResult::CALL_FAILED);
      default: return Error(absl::StrCat("malformed plugin output: ", message, "; restarted"));
    }
  }

  v1::VerifyResult Parse(const std::string& line, uint64_t request_id) const {
    const std::string bad = absl::StrCat("malformed plugin output ", Show(line), ": ");
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) return Error(bad + "not JSON");
    if (!j.is_object()) return Error(bad + "expected a JSON object, found " + TypeName(j));
    auto id = j.find("id");
    if (id != j.end() && !(id->is_number_unsigned() && id->get<uint64_t>() == request_id)) {
      return Error(bad + absl::StrCat("\"id\" must echo the request's id ", request_id));
    }
    auto reward = j.find("reward");
    if (reward == j.end()) return Error(bad + "missing field \"reward\"");
    if (!reward->is_number()) {
      return Error(bad + "\"reward\" must be a number, found " + TypeName(*reward));
    }
    const double value = reward->get<double>();
    if (!std::isfinite(value) || !std::isfinite(static_cast<float>(value))) {
      return Error(bad + "\"reward\" must be finite");
    }
    auto verdict = j.find("verdict");
    if (verdict == j.end()) return Error(bad + "missing field \"verdict\"");
    if (!verdict->is_string()) {
      return Error(bad + "\"verdict\" must be a string, found " + TypeName(*verdict));
    }
    const std::string v = absl::AsciiStrToLower(verdict->get<std::string>());
    v1::Verdict parsed;
    if (v == "correct") {
      parsed = v1::CORRECT;
    } else if (v == "wrong") {
      parsed = v1::WRONG;
    } else if (v == "unparseable") {
      parsed = v1::UNPARSEABLE;
    } else if (v == "error") {
      parsed = v1::ERROR;
    } else {
      return Error(bad + "\"verdict\" must be correct, wrong, unparseable or error");
    }
    std::string detail;
    auto d = j.find("detail");
    if (d != j.end() && !d->is_null()) {
      if (!d->is_string()) return Error(bad + "\"detail\" must be a string, found " + TypeName(*d));
      detail = d->get<std::string>();
    }
    return Result(parsed, static_cast<float>(value), std::move(detail));
  }

  v1::VerifierConfig config_;
  std::vector<std::string> argv_;
  // Each worker is used by one thread at a time: the one that took its index
  // from free_.
  mutable std::vector<LineWorker> workers_;
  mutable absl::Mutex mu_;
  mutable std::vector<int> free_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

absl::Status RegisterSubprocessVerifier(VerifierRegistry& registry) {
  return registry.Register(
      "subprocess",
      [](const v1::VerifierConfig& c) -> absl::StatusOr<std::unique_ptr<Verifier>> {
        return std::make_unique<Subprocess>(c);
      },
      [](const v1::VerifierConfig& c) -> absl::Status {
        if (c.command_size() == 0 || c.command(0).empty()) {
          return absl::InvalidArgumentError(
              "verifier.command: subprocess needs the plugin's command (argv list, or one "
              "shell command string), found none");
        }
        if (c.workers() < 1 || c.workers() > 256) {
          return absl::InvalidArgumentError(
              absl::StrCat("verifier.workers: must be in [1, 256], found ", c.workers()));
        }
        if (c.deadline_ms() < 1) {
          return absl::InvalidArgumentError(
              absl::StrCat("verifier.deadline_ms: must be >= 1, found ", c.deadline_ms()));
        }
        if (c.retries() < 0) {
          return absl::InvalidArgumentError(
              absl::StrCat("verifier.retries: must be >= 0, found ", c.retries()));
        }
        return absl::OkStatus();
      });
}

}  // namespace trellis::verifier::internal
