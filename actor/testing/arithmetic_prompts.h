#ifndef TRELLIS_ACTOR_TESTING_ARITHMETIC_PROMPTS_H_
#define TRELLIS_ACTOR_TESTING_ARITHMETIC_PROMPTS_H_

// Three arithmetic prompts for the actors' tests: "1+2=", "13-40=" and
// "7=", ids 0 to 2, each token list starting with BOS.

#include <cstdint>
#include <vector>

#include "text/tokenizer.h"
#include "trellis/v1/rollout.pb.h"

namespace trellis::testing_util {

inline void AddArithmeticPrompts(const text::Tokenizer& tokenizer,
                                 v1::GenerateRequest& request) {
  int id = 0;
  for (const char* text : {"1+2=", "13-40=", "7="}) {
    v1::Prompt* p = request.add_prompts();
    p->set_id(id++);
    p->add_token_ids(*tokenizer.bos_id());
    const std::vector<int32_t> ids = *tokenizer.Encode(text);
    p->mutable_token_ids()->Add(ids.begin(), ids.end());
  }
}

}  // namespace trellis::testing_util

#endif  // TRELLIS_ACTOR_TESTING_ARITHMETIC_PROMPTS_H_
