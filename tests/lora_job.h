#ifndef TRELLIS_TESTS_LORA_JOB_H_
#define TRELLIS_TESTS_LORA_JOB_H_

// The small LoRA job and the random SFT batches the LoRA tests share
// (lora_test, lora_shared_base_test).

#include <cstdint>
#include <random>
#include <vector>

#include "trellis/v1/job.pb.h"
#include "text/tokenizer.h"
#include "trellis/v1/rollout.pb.h"

namespace trellis {

inline v1::JobConfig Job(int rank) {
  v1::JobConfig job;
  auto* m = job.mutable_model();
  m->set_d_model(32);
  m->set_n_layers(2);
  m->set_n_heads(4);
  m->set_n_kv_heads(2);
  m->set_d_ff(64);
  m->set_max_seq_len(24);
  job.mutable_sft()->mutable_optimizer()->set_lr(0.01);
  job.mutable_sft()->mutable_optimizer()->set_warmup_steps(0);
  auto* lora = job.mutable_memory()->mutable_lora();
  lora->set_rank(rank);
  for (v1::LoraConfig::Projection t :
       {v1::LoraConfig::Q_PROJ, v1::LoraConfig::V_PROJ, v1::LoraConfig::DOWN_PROJ}) {
    lora->add_target_modules(t);
  }
  return job;
}

inline v1::SftBatch RandomSft(int rows, int vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto token = [&] { return 3 + static_cast<int>(rng() % (vocab - 3)); };
  v1::SftBatch batch;
  for (int i = 0; i < rows; ++i) {
    auto* pair = batch.add_pairs();
    for (int k = 0; k < 4; ++k) pair->add_prompt_tokens(token());
    for (int k = 0; k < 3; ++k) pair->add_target_tokens(token());
  }
  return batch;
}

// Two arithmetic prompts, 4 sampled responses each, at temperature 1.
inline v1::GenerateRequest Request(const text::Tokenizer& tokenizer) {
  v1::GenerateRequest request;
  request.set_responses_per_prompt(4);
  request.set_seed(5);
  request.mutable_sampling()->set_temperature(1.0);
  request.mutable_sampling()->set_top_p(1.0);
  request.mutable_sampling()->set_max_new_tokens(6);
  for (const char* text : {"12+7=", "3+45="}) {
    v1::Prompt* p = request.add_prompts();
    p->set_id(request.prompts_size());
    p->add_token_ids(*tokenizer.bos_id());
    const std::vector<int32_t> ids = *tokenizer.Encode(text);
    p->mutable_token_ids()->Add(ids.begin(), ids.end());
  }
  return request;
}

}  // namespace trellis

#endif  // TRELLIS_TESTS_LORA_JOB_H_
