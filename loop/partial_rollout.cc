#include "loop/partial_rollout.h"

#include <algorithm>
#include <cmath>
#include <utility>

namespace trellis::loop {
namespace {

int64_t TokensOf(const v1::Prompt& prompt) {
  int64_t tokens = 0;
  for (const v1::Sample& s : prompt.resume()) tokens += s.response_tokens_size();
  return tokens;
}

int64_t OldestVersion(const v1::Prompt& prompt) {
  int64_t oldest = INT64_MAX;
  for (const v1::Sample& s : prompt.resume()) {
    if (s.response_tokens_size() > 0) oldest = std::min(oldest, s.policy_version());
  }
  return oldest;
}

}  // namespace

int PipelineLead(const v1::AsyncConfig& async) {
  if (async.partial_rollout() != v1::AsyncConfig::CONTINUE) return async.max_staleness();
  return std::min(1, async.max_staleness());
}

PartialRollouts::PartialRollouts(v1::AsyncConfig::PartialRollout mode, int64_t batch,
                                 double overdraw)
    : mode_(mode),
      batch_(batch),
      overdraw_(static_cast<int64_t>(std::ceil(overdraw * static_cast<double>(batch)))) {}

int64_t PartialRollouts::ToDraw() const {
  return std::max<int64_t>(0, batch_ + overdraw_ - carried());
}

void PartialRollouts::Add(CarriedGroup group) { carried_.push_back(std::move(group)); }

int64_t PartialRollouts::RestartOlderThan(int64_t oldest_version, int64_t* discarded) {
  int64_t restarted = 0;
  for (CarriedGroup& group : carried_) {
    if (OldestVersion(group.prompt) >= oldest_version) continue;
    *discarded += TokensOf(group.prompt);
    group.prompt.clear_resume();
    group.prompt.clear_resume_seed();
    ++restarted;
  }
  return restarted;
}

v1::GenerateRequest PartialRollouts::Request(const v1::GenerateRequest& base) const {
  v1::GenerateRequest request = base;
  request.clear_prompts();
  for (const CarriedGroup& group : carried_) *request.add_prompts() = group.prompt;
  request.set_finish_prompts(static_cast<int32_t>(batch_));
  return request;
}

std::optional<v1::GenerateResponse> PartialRollouts::Finished(
    const v1::GenerateRequest& request) const {
  const int n = std::max(1, request.responses_per_prompt());
  const auto done = [](const CarriedGroup& g) {
    return g.prompt.resume_size() > 0 &&
           std::none_of(g.prompt.resume().begin(), g.prompt.resume().end(),
                        [](const v1::Sample& s) { return s.unfinished(); });
  };
  if (std::count_if(carried_.begin(), carried_.end(), done) < batch_) return std::nullopt;
  v1::GenerateResponse response;
  for (const CarriedGroup& group : carried_) {
    for (int i = 0; i < n; ++i) {
      v1::Sample* sample = response.add_samples();
      if (group.prompt.resume_size() > 0) {
        *sample = group.prompt.resume(i);
        continue;
      }
      sample->set_prompt_id(group.prompt.id());
      sample->set_index(i);
      sample->set_unfinished(true);
    }
  }
  return response;
}

PartialSplit PartialRollouts::Split(const v1::GenerateRequest& request,
                                    const v1::GenerateResponse& response) {
  PartialSplit out;
  out.rollout = response;
  out.rollout.clear_samples();
  const int n = std::max(1, request.responses_per_prompt());
  std::vector<CarriedGroup> next;
  for (int i = 0; i < request.prompts_size(); ++i) {
    CarriedGroup& group = carried_[i];
    const auto begin = response.samples().begin() + static_cast<int64_t>(i) * n;
    const bool finished =
        std::none_of(begin, begin + n, [](const v1::Sample& s) { return s.unfinished(); });
    if (finished && static_cast<int64_t>(out.examples.size()) < batch_) {
      out.examples.push_back(group.example);
      for (auto s = begin; s != begin + n; ++s) *out.rollout.add_samples() = *s;
      continue;
    }
    const bool begun = std::any_of(begin, begin + n, [](const v1::Sample& s) {
      return !s.unfinished() || s.response_tokens_size() > 0;
    });
    if (!begun && group.prompt.resume_size() == 0) {
      next.push_back(std::move(group));  // not started yet: still fresh
      continue;
    }
    const uint64_t seed =
        group.prompt.resume_size() > 0 ? group.prompt.resume_seed() : request.seed();
    group.prompt.clear_resume();
    if (finished || mode_ == v1::AsyncConfig::CONTINUE) {
      group.prompt.mutable_resume()->Add(begin, begin + n);
      group.prompt.set_resume_seed(seed);
      ++out.counts.groups_carried;
    } else {
      group.prompt.clear_resume_seed();
      for (auto s = begin; s != begin + n; ++s) {
        out.counts.tokens_discarded += s->response_tokens_size();
      }
      ++out.counts.groups_restarted;
    }
    next.push_back(std::move(group));
  }
  carried_ = std::move(next);
  return out;
}

int64_t PartialRollouts::DropAll() {
  const int64_t dropped = carried();
  carried_.clear();
  return dropped;
}

std::vector<uint64_t> PartialRollouts::Positions() const {
  std::vector<uint64_t> positions;
  for (const CarriedGroup& group : carried_) positions.push_back(group.position);
  return positions;
}

}  // namespace trellis::loop
