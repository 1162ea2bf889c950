#include "loop/prompt_format.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trellis::loop {
namespace {

using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

// The example model of examples/jobs/hf_grpo.yaml: a byte-level BPE
// tokenizer and a ChatML chat template.
std::unique_ptr<PromptFormat> ExampleModelFormat() {
  v1::JobConfig job;
  job.mutable_model()->set_path(absl::StrCat(TRELLIS_SOURCE_DIR, "/examples/models/qwen2_arith"));
  absl::StatusOr<std::unique_ptr<PromptFormat>> format = PromptFormat::ForJob(job);
  EXPECT_TRUE(format.ok()) << format.status();
  return format.ok() ? *std::move(format) : nullptr;
}

std::vector<int32_t> Encode(const PromptFormat& format, const std::string& text) {
  absl::StatusOr<std::vector<int32_t>> ids = format.tokenizer().Encode(text);
  EXPECT_TRUE(ids.ok()) << ids.status();
  return ids.ok() ? *ids : std::vector<int32_t>();
}

data::Example Chat(const std::string& messages_json, const std::string& answer) {
  data::Example ex;
  ex.id = 7;
  ex.messages_json = messages_json;
  ex.answer = answer;
  return ex;
}

TEST(PromptFormat, PlainPromptsStartWithBos) {
  v1::JobConfig job;
  absl::StatusOr<std::unique_ptr<PromptFormat>> format = PromptFormat::ForJob(job);
  ASSERT_TRUE(format.ok()) << format.status();
  data::Example ex;
  ex.prompt = "1+2=";
  ex.answer = "3";
  absl::StatusOr<v1::Prompt> prompt = (*format)->MakePrompt(ex);
  ASSERT_TRUE(prompt.ok()) << prompt.status();
  std::vector<int32_t> want = {*(*format)->tokenizer().bos_id()};
  for (int32_t id : Encode(**format, "1+2=")) want.push_back(id);
  EXPECT_THAT(prompt->token_ids(), ElementsAreArray(want));
  absl::StatusOr<v1::SftBatch::Pair> pair = (*format)->MakeSftPair(ex);
  ASSERT_TRUE(pair.ok()) << pair.status();
  EXPECT_TRUE(pair->trained().empty());
  EXPECT_EQ(pair->target_tokens(pair->target_tokens_size() - 1), (*format)->tokenizer().eos_id());
}

TEST(PromptFormat, ChatPromptsAreRenderedWithTheGenerationPrompt) {
  std::unique_ptr<PromptFormat> format = ExampleModelFormat();
  ASSERT_NE(format, nullptr);
  absl::StatusOr<v1::Prompt> prompt =
      format->MakePrompt(Chat(R"([{"role":"user","content":"47+85="}])", "132"));
  ASSERT_TRUE(prompt.ok()) << prompt.status();
  const std::string text = "<|im_start|>user\n47+85=<|im_end|>\n<|im_start|>assistant\n";
  EXPECT_EQ(prompt->text(), text);
  EXPECT_THAT(prompt->token_ids(), ElementsAreArray(Encode(*format, text)));
  EXPECT_EQ(prompt->answer(), "132");
}

TEST(PromptFormat, SupervisedChatsTrainTheAssistantTurnsOnly) {
  std::unique_ptr<PromptFormat> format = ExampleModelFormat();
  ASSERT_NE(format, nullptr);
  absl::StatusOr<v1::SftBatch::Pair> pair = format->MakeSftPair(
      Chat(R"([{"role":"user","content":"1+1="},{"role":"assistant","content":"2"},)"
           R"({"role":"user","content":"2+2="}])",
           "4"));
  ASSERT_TRUE(pair.ok()) << pair.status();
  EXPECT_THAT(pair->prompt_tokens(), ElementsAreArray(Encode(*format,
                                                             "<|im_start|>user\n1+1=<|im_end|>\n"
                                                             "<|im_start|>assistant\n")));
  const std::vector<int32_t> first = Encode(*format, "2<|im_end|>\n");
  const std::vector<int32_t> between =
      Encode(*format, "<|im_start|>user\n2+2=<|im_end|>\n<|im_start|>assistant\n");
  const std::vector<int32_t> second = Encode(*format, "4<|im_end|>\n");
  std::vector<int32_t> target = first;
  std::vector<bool> trained(first.size(), true);
  target.insert(target.end(), between.begin(), between.end());
  trained.insert(trained.end(), between.size(), false);
  target.insert(target.end(), second.begin(), second.end());
  trained.insert(trained.end(), second.size(), true);
  EXPECT_THAT(pair->target_tokens(), ElementsAreArray(target));
  EXPECT_THAT(pair->trained(), ElementsAreArray(trained));
}

TEST(PromptFormat, ChatsNeedAChatTemplateAndAnAssistantTurn) {
  v1::JobConfig job;
  absl::StatusOr<std::unique_ptr<PromptFormat>> plain = PromptFormat::ForJob(job);
  ASSERT_TRUE(plain.ok());
  absl::Status s = (*plain)->MakePrompt(Chat(R"([{"role":"user","content":"x"}])", "1")).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("example 7 holds messages, but"));

  std::unique_ptr<PromptFormat> format = ExampleModelFormat();
  ASSERT_NE(format, nullptr);
  s = format->MakeSftPair(Chat(R"([{"role":"user","content":"x"}])", "")).status();
  EXPECT_THAT(s.message(), HasSubstr("example 7: a supervised chat needs an assistant turn"));
  s = format->MakePrompt(Chat(R"([{"role":"user","content":3}])", "1")).status();
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("prompt 7"));

  job.mutable_model()->set_path(absl::StrCat(TRELLIS_SOURCE_DIR, "/no/such/model"));
  s = PromptFormat::ForJob(job).status();
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("model.path"));
}

}  // namespace
}  // namespace trellis::loop
