// The subprocess environment: a pool of long-lived plugin processes
// speaking JSON lines (docs/environment-protocol.md), framed as the
// subprocess verifier's: one request line, one answer line echoing its
// "id". Each episode stays with the worker that opened it. A worker that
// misses the call's deadline is killed with its process group (and a dead
// or out-of-step one reaped); its episodes are lost, and the next call
// starts it afresh.

#include <cmath>
#include <map>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "environment/internal/register.h"
#include "nlohmann/json.hpp"
#include "plugin/line_worker.h"

namespace trellis::environment::internal {
namespace {

struct Worker {
  explicit Worker(plugin::LineWorker p) : process(std::move(p)) {}
  absl::Mutex mu;
  bool busy ABSL_GUARDED_BY(mu) = false;
  // Used by the thread that set busy.
  plugin::LineWorker process;
};

struct Placement {
  int worker = 0;
  uint64_t generation = 0;
};

std::string Describe(const nlohmann::json& j) {
  std::string s = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return s.size() <= 200 ? s : s.substr(0, 200) + "...";
}

class Subprocess : public Environment {
 public:
  explicit Subprocess(const v1::EnvironmentConfig& c)
      : deadline_(absl::Milliseconds(c.call_deadline_ms())) {
    std::vector<std::string> argv;
    if (c.command_size() == 1) {
      argv = {"/bin/sh", "-c", c.command(0)};
    } else {
      argv.assign(c.command().begin(), c.command().end());
    }
    for (int i = 0; i < c.workers(); ++i) {
      workers_.push_back(
          std::make_unique<Worker>(plugin::LineWorker(argv, absl::StrCat("plugin worker ", i))));
    }
  }

  absl::StatusOr<v1::OpenEpisodeResponse> Open(const v1::OpenEpisodeRequest& request) override {
    const absl::Time deadline = absl::Now() + deadline_;
    const int w = LeastLoaded();
    nlohmann::json line = {{"verb", "open"},
                           {"episode_id", request.episode_id()},
                           {"prompt", request.prompt()},
                           {"answer", request.answer()},
                           {"seed", request.seed()}};
    if (!request.metadata_json().empty()) {
      nlohmann::json meta = nlohmann::json::parse(request.metadata_json(), nullptr, false);
      if (!meta.is_discarded()) line["metadata"] = std::move(meta);
    }
    uint64_t generation = 0;
    absl::StatusOr<nlohmann::json> j = Call(w, std::move(line), deadline, &generation);
    if (!j.ok()) return j.status();
    v1::OpenEpisodeResponse r;
    if (absl::Status s = ReadString(*j, "observation", r.mutable_observation()); !s.ok()) return s;
    if (auto tools = j->find("tools"); tools != j->end()) {
      if (!tools->is_array()) return Malformed(*j, "\"tools\" must be an array");
      for (const nlohmann::json& t : *tools) {
        if (!t.is_object() || !t.contains("name") || !t["name"].is_string()) {
          return Malformed(*j, "each tool must be {\"name\": str, \"description\": str}");
        }
        v1::EnvironmentTool* tool = r.add_tools();
        tool->set_name(t["name"].get<std::string>());
        if (absl::Status s = ReadString(t, "description", tool->mutable_description()); !s.ok()) {
          return s;
        }
      }
    }
    absl::MutexLock lock(&table_mu_);
    placed_[request.episode_id()] = {w, generation};
    return r;
  }

  absl::StatusOr<v1::EnvironmentStepResponse> Step(
      const v1::EnvironmentStepRequest& request) override {
    const absl::Time deadline = absl::Now() + deadline_;
    absl::StatusOr<Placement> p = Find(request.episode_id());
    if (!p.ok()) return p.status();
    absl::StatusOr<nlohmann::json> j = Call(p->worker,
                                            {{"verb", "step"},
                                             {"episode_id", request.episode_id()},
                                             {"action", request.action()},
                                             {"turn", request.turn()}},
                                            deadline, nullptr, p->generation);
    if (!j.ok()) return j.status();
    v1::EnvironmentStepResponse r;
    if (absl::Status s = ReadString(*j, "observation", r.mutable_observation()); !s.ok()) return s;
    auto reward = j->find("reward");
    if (reward == j->end() || !reward->is_number()) {
      return Malformed(*j, "\"reward\" must be a number");
    }
    const double value = reward->get<double>();
    if (!std::isfinite(value) || !std::isfinite(static_cast<float>(value))) {
      return Malformed(*j, "\"reward\" must be finite");
    }
    r.set_reward(static_cast<float>(value));
    auto done = j->find("done");
    if (done == j->end() || !done->is_boolean()) return Malformed(*j, "\"done\" must be a boolean");
    r.set_done(done->get<bool>());
    if (auto meta = j->find("metadata"); meta != j->end() && !meta->is_null()) {
      if (!meta->is_object()) return Malformed(*j, "\"metadata\" must be an object");
      r.set_metadata_json(meta->dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
    }
    return r;
  }

  absl::Status Close(const v1::CloseEpisodeRequest& request) override {
    const absl::Time deadline = absl::Now() + deadline_;
    absl::StatusOr<Placement> p = Find(request.episode_id());
    if (!p.ok()) return absl::OkStatus();  // closing twice is harmless
    {
      absl::MutexLock lock(&table_mu_);
      placed_.erase(request.episode_id());
    }
    absl::Status closed = Call(p->worker, {{"verb", "close"}, {"episode_id", request.episode_id()}},
                               deadline, nullptr, p->generation)
                              .status();
    return absl::IsFailedPrecondition(closed) ? absl::OkStatus() : closed;  // lost: nothing held
  }

  int MaxConcurrency() const override { return static_cast<int>(workers_.size()); }

 private:
  static absl::Status Malformed(const nlohmann::json& j, const std::string& what) {
    return absl::InvalidArgumentError(
        absl::StrCat("malformed plugin answer ", Describe(j), ": ", what));
  }

  // An optional string field.
  static absl::Status ReadString(const nlohmann::json& j, const char* key, std::string* out) {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) return absl::OkStatus();
    if (!it->is_string()) return Malformed(j, absl::StrCat("\"", key, "\" must be a string"));
    *out = it->get<std::string>();
    return absl::OkStatus();
  }

  int LeastLoaded() {
    absl::MutexLock lock(&table_mu_);
    std::vector<int> load(workers_.size());
    for (const auto& [id, p] : placed_) ++load[p.worker];
    int best = 0;
    for (size_t i = 1; i < load.size(); ++i) {
      if (load[i] < load[best]) best = static_cast<int>(i);
    }
    return best;
  }

  // NotFound for an episode never opened (or closed).
  absl::StatusOr<Placement> Find(const std::string& id) {
    absl::MutexLock lock(&table_mu_);
    auto it = placed_.find(id);
    if (it == placed_.end()) {
      return absl::NotFoundError(absl::StrCat("episode \"", id, "\" is not open"));
    }
    return it->second;
  }

  // Sends `request` to worker `w` and returns its answer: an object that
  // echoes the id and holds no "error". `generation`, unless 0, is the
  // worker's generation the episode lives in. Sets *spawned_in to the
  // generation that answered.
  absl::StatusOr<nlohmann::json> Call(int w, nlohmann::json request, absl::Time deadline,
                                      uint64_t* spawned_in, uint64_t generation = 0) {
    Worker& worker = *workers_[w];
    worker.mu.Lock();
    const bool free =
        worker.mu.AwaitWithDeadline(absl::Condition(
                                        +[](bool* busy) { return !*busy; }, &worker.busy),
                                    deadline);
    if (free) worker.busy = true;
    worker.mu.Unlock();
    const std::string where = absl::StrCat("plugin worker ", w);
    if (!free) {
      return absl::DeadlineExceededError(
          absl::StrCat(where, " stayed busy with other episodes past the deadline"));
    }
    absl::StatusOr<nlohmann::json> answer =
        Exchange(worker.process, std::move(request), deadline, generation);
    if (spawned_in != nullptr) *spawned_in = worker.process.generation();
    absl::MutexLock lock(&worker.mu);
    worker.busy = false;
    return answer;
  }

  absl::StatusOr<nlohmann::json> Exchange(plugin::LineWorker& w, nlohmann::json request,
                                          absl::Time deadline, uint64_t generation) {
    if (generation != 0 && generation != w.generation()) {
      return absl::FailedPreconditionError(
          absl::StrCat("episode \"", request["episode_id"].get<std::string>(),
                       "\" was lost: ", w.name(), " was restarted since it opened the episode"));
    }
    absl::StatusOr<std::string> text = w.Call(request, deadline);
    switch (text.status().code()) {
      case absl::StatusCode::kOk: break;
      case absl::StatusCode::kDeadlineExceeded:
        return absl::DeadlineExceededError(absl::StrCat(
            "no answer within ", absl::FormatDuration(deadline_), "; ", text.status().message()));
      case absl::StatusCode::kAborted: return absl::InternalError(text.status().message());
      case absl::StatusCode::kDataLoss:
        return absl::InvalidArgumentError(
            absl::StrCat("malformed plugin output: ", text.status().message(), "; killed"));
      default: return text.status();
    }
    const uint64_t id = request["id"].get<uint64_t>();
    const nlohmann::json j = nlohmann::json::parse(*text, nullptr, false);
    if (!j.is_object()) {
      return absl::InvalidArgumentError(
          absl::StrCat("malformed plugin output ", Describe(j), ": expected a JSON object"));
    }
    if (auto echo = j.find("id");
        echo != j.end() && !(echo->is_number_unsigned() && echo->get<uint64_t>() == id)) {
      return Malformed(j, absl::StrCat("\"id\" must echo the request's id ", id));
    }
    if (auto error = j.find("error"); error != j.end() && !error->is_null()) {
      return absl::InternalError(absl::StrCat(
          "plugin error: ", error->is_string() ? error->get<std::string>() : Describe(*error)));
    }
    return j;
  }

  const absl::Duration deadline_;
  std::vector<std::unique_ptr<Worker>> workers_;
  absl::Mutex table_mu_;
  std::map<std::string, Placement> placed_ ABSL_GUARDED_BY(table_mu_);
};

}  // namespace

absl::Status RegisterSubprocessEnvironment(EnvironmentRegistry& registry) {
  return registry.Register(
      "subprocess",
      [](const v1::EnvironmentConfig& c) -> absl::StatusOr<std::unique_ptr<Environment>> {
        if (c.command_size() == 0 || c.command(0).empty()) {
          return absl::InvalidArgumentError(
              "environment.command: subprocess needs the plugin's command (argv list, or one "
              "shell command string), found none");
        }
        return std::make_unique<Subprocess>(c);
      });
}

}  // namespace trellis::environment::internal
