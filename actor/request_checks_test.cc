#include "actor/internal/request_checks.h"

#include <string>

#include "gtest/gtest.h"

namespace trellis::actor::internal {
namespace {

v1::GenerateRequest Request() {
  v1::GenerateRequest request;
  request.set_responses_per_prompt(2);
  request.mutable_sampling()->set_max_new_tokens(4);
  v1::Prompt* prompt = request.add_prompts();
  prompt->set_id(7);
  prompt->add_token_ids(1);
  return request;
}

v1::Sample Partial(int tokens, bool unfinished) {
  v1::Sample s;
  for (int t = 0; t < tokens; ++t) {
    s.add_response_tokens(3);
    s.add_logprobs(-0.5f);
  }
  s.set_unfinished(unfinished);
  return s;
}

TEST(CheckRequest, RefusesResumesThatDoNotFitTheRequestNamingThePrompt) {
  EXPECT_TRUE(CheckRequest(Request(), 16, "actor-0").ok());
  struct Case {
    std::string want;
    v1::GenerateRequest request;
  };
  std::vector<Case> cases;
  {
    v1::GenerateRequest r = Request();
    *r.mutable_prompts(0)->add_resume() = Partial(1, true);
    cases.push_back({"prompt 7 resume has 1 responses; responses_per_prompt is 2", r});
  }
  {
    v1::GenerateRequest r = Request();
    *r.mutable_prompts(0)->add_resume() = Partial(1, true);
    *r.mutable_prompts(0)->add_resume() = Partial(4, true);
    cases.push_back({"prompt 7 resume[1] has 4 tokens; max_new_tokens is 4 and it is unfinished", r});
  }
  {
    v1::GenerateRequest r = Request();
    *r.mutable_prompts(0)->add_resume() = Partial(1, true);
    *r.mutable_prompts(0)->add_resume() = Partial(2, false);
    r.mutable_prompts(0)->mutable_resume(1)->add_logprobs(0);
    cases.push_back({"prompt 7 resume[1] has 2 tokens but 3 log-probs", r});
  }
  {
    v1::GenerateRequest r = Request();
    r.set_finish_prompts(-1);
    cases.push_back({"finish_prompts (-1)", r});
  }
  {
    v1::GenerateRequest r = Request();
    r.mutable_prompts(0)->set_min_new_tokens(-2);
    cases.push_back({"prompt 7 has min_new_tokens -2", r});
  }
  for (const Case& c : cases) {
    const absl::Status s = CheckRequest(c.request, 16, "actor-0");
    EXPECT_TRUE(absl::IsInvalidArgument(s)) << c.want;
    EXPECT_NE(s.message().find("actor-0: " + c.want), std::string::npos) << s;
  }
}

TEST(TagVersions, ResumedTokensKeepTheirVersionsAndNewOnesTakeTheActors) {
  v1::Prompt prompt;
  *prompt.add_resume() = Partial(2, true);
  prompt.mutable_resume(0)->set_policy_version(3);
  v1::Sample sample = Partial(4, false);
  TagVersions(prompt, 0, 5, &sample);
  EXPECT_EQ(sample.policy_version(), 3);
  ASSERT_EQ(sample.token_versions_size(), 4);
  EXPECT_EQ(sample.token_versions(0), 3);
  EXPECT_EQ(sample.token_versions(1), 3);
  EXPECT_EQ(sample.token_versions(2), 5);
  EXPECT_EQ(sample.token_versions(3), 5);
  // Resumed again later: the mixed versions carry over.
  v1::Prompt again;
  *again.add_resume() = sample;
  v1::Sample longer = Partial(5, false);
  TagVersions(again, 0, 6, &longer);
  EXPECT_EQ(longer.policy_version(), 3);
  EXPECT_EQ(longer.token_versions(4), 6);
  // One version only: no per-token list.
  v1::Sample fresh = Partial(2, false);
  TagVersions(v1::Prompt(), 0, 6, &fresh);
  EXPECT_EQ(fresh.policy_version(), 6);
  EXPECT_EQ(fresh.token_versions_size(), 0);
}

}  // namespace
}  // namespace trellis::actor::internal
