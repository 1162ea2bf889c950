// guess_number: the policy finds a secret integer in [low, high] drawn from
// the episode's seed. Each action's last integer is its guess; the
// observation says ">" (the secret is higher), "<" (lower) or "=" (found:
// reward 1, done), and "?" for an action without an integer. The texts are
// options (short by default, for character tokenizers).

#include <cctype>
#include <optional>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "environment/internal/episodes.h"
#include "environment/internal/options.h"
#include "environment/internal/register.h"

namespace trellis::environment::internal {
namespace {

constexpr int64_t kMaxMagnitude = 1'000'000'000;

struct Texts {
  std::string open = "{low}-{high}?";
  std::string higher = ">";
  std::string lower = "<";
  std::string correct = "=";
  std::string invalid = "?";
};

struct GuessEpisode {
  int64_t secret = 0;
  bool done = false;
};

// splitmix64: the seed's bits spread over the whole word.
uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// The last integer in `text` (an optional '-' and digits), if any.
std::optional<int64_t> LastInteger(const std::string& text) {
  size_t end = text.size();
  while (end > 0 && !std::isdigit(static_cast<unsigned char>(text[end - 1]))) --end;
  if (end == 0) return std::nullopt;
  size_t begin = end;
  while (begin > 0 && std::isdigit(static_cast<unsigned char>(text[begin - 1]))) --begin;
  if (begin > 0 && text[begin - 1] == '-') --begin;
  int64_t value = 0;
  if (!absl::SimpleAtoi(text.substr(begin, end - begin), &value)) return std::nullopt;
  return value;
}

class GuessNumber : public Environment {
 public:
  GuessNumber(int64_t low, int64_t high, Texts texts, int workers)
      : low_(low), high_(high), texts_(std::move(texts)), workers_(workers) {}

  absl::StatusOr<v1::OpenEpisodeResponse> Open(const v1::OpenEpisodeRequest& request) override {
    const uint64_t span = static_cast<uint64_t>(high_ - low_) + 1;
    GuessEpisode e;
    e.secret = low_ + static_cast<int64_t>(Mix(request.seed()) % span);
    if (absl::Status s = episodes_.Add(request.episode_id(), e); !s.ok()) return s;
    v1::OpenEpisodeResponse r;
    r.set_observation(absl::StrReplaceAll(
        texts_.open, {{"{low}", absl::StrCat(low_)}, {"{high}", absl::StrCat(high_)}}));
    return r;
  }

  absl::StatusOr<v1::EnvironmentStepResponse> Step(
      const v1::EnvironmentStepRequest& request) override {
    absl::StatusOr<GuessEpisode> e = episodes_.Running(request.episode_id());
    if (!e.ok()) return e.status();
    v1::EnvironmentStepResponse r;
    const std::optional<int64_t> guess = LastInteger(request.action());
    if (!guess.has_value()) {
      r.set_observation(texts_.invalid);
    } else if (*guess < e->secret) {
      r.set_observation(texts_.higher);
    } else if (*guess > e->secret) {
      r.set_observation(texts_.lower);
    } else {
      r.set_observation(texts_.correct);
      r.set_reward(1);
      r.set_done(true);
      e->done = true;
      episodes_.Put(request.episode_id(), *e);
    }
    return r;
  }

  absl::Status Close(const v1::CloseEpisodeRequest& request) override {
    episodes_.Remove(request.episode_id());
    return absl::OkStatus();
  }

  int MaxConcurrency() const override { return workers_; }

 private:
  const int64_t low_;
  const int64_t high_;
  const Texts texts_;
  const int workers_;
  Episodes<GuessEpisode> episodes_;
};

}  // namespace

absl::Status RegisterGuessNumber(EnvironmentRegistry& registry) {
  return registry.Register(
      "guess_number",
      [](const v1::EnvironmentConfig& c) -> absl::StatusOr<std::unique_ptr<Environment>> {
        absl::StatusOr<Options> o =
            Options::Parse(c, {"low", "high", "open", "higher", "lower", "correct", "invalid"});
        if (!o.ok()) return o.status();
        int64_t low = 1;
        int64_t high = 100;
        Texts t;
        for (absl::Status s : {o->Get("low", &low), o->Get("high", &high), o->Get("open", &t.open),
                               o->Get("higher", &t.higher), o->Get("lower", &t.lower),
                               o->Get("correct", &t.correct), o->Get("invalid", &t.invalid)}) {
          if (!s.ok()) return s;
        }
        if (low > high || low < -kMaxMagnitude || high > kMaxMagnitude) {
          return absl::InvalidArgumentError(absl::StrCat(
              "environment.options_json: guess_number needs -", kMaxMagnitude,
              " <= low <= high <= ", kMaxMagnitude, ", found low ", low, ", high ", high));
        }
        return std::make_unique<GuessNumber>(low, high, std::move(t), c.workers());
      });
}

}  // namespace trellis::environment::internal
