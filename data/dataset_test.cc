#include "data/dataset.h"

#include <fstream>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trellis::data {
namespace {

using ::testing::HasSubstr;

std::string WriteFile(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + "/" + name;
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

absl::Status ReadError(const std::string& text) {
  return ReadJsonl(WriteFile("bad.jsonl", text)).status();
}

TEST(Jsonl, RoundTrip) {
  std::vector<Example> in(3);
  in[0] = {0, "12+7=", "19", "{}"};
  in[1] = {1, "say \"hi\"\n\tthere", "h\u00e9llo \u2713", R"({"source":"gsm8k","level":3})"};
  in[2] = {2, "", "-42", R"({"tags":["a","b"],"x":null})"};
  const std::string path = ::testing::TempDir() + "/roundtrip.jsonl";
  ASSERT_TRUE(WriteJsonl(path, in).ok());
  absl::StatusOr<std::vector<Example>> out = ReadJsonl(path);
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->size(), in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    EXPECT_EQ((*out)[i].id, in[i].id);
    EXPECT_EQ((*out)[i].prompt, in[i].prompt);
    EXPECT_EQ((*out)[i].answer, in[i].answer);
    EXPECT_EQ((*out)[i].metadata_json, in[i].metadata_json);
  }
}

TEST(Jsonl, NumberAnswersBlankLinesAndMetadata) {
  absl::StatusOr<std::vector<Example>> out = ReadJsonl(WriteFile("numbers.jsonl",
      "{\"prompt\": \"a\", \"answer\": 42}\n"
      "\n"
      "   \r\n"
      "{\"answer\": 3.0, \"prompt\": \"b\", \"zeta\": 1, \"alpha\": \"x\"}\r\n"
      "{\"prompt\": \"c\", \"answer\": -2.5}\n"
      "{\"prompt\": \"d\", \"answer\": 18446744073709551615}"));
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->size(), 4u);
  EXPECT_EQ((*out)[0].answer, "42");
  EXPECT_EQ((*out)[0].metadata_json, "{}");
  EXPECT_EQ((*out)[1].id, 3u);  // 0-based line index, blank lines counted
  EXPECT_EQ((*out)[1].answer, "3");
  EXPECT_EQ((*out)[1].metadata_json, R"({"zeta":1,"alpha":"x"})");
  EXPECT_EQ((*out)[2].answer, "-2.5");
  EXPECT_EQ((*out)[3].answer, "18446744073709551615");
}

TEST(Jsonl, ErrorsNamePathAndLine) {
  const std::string path = ::testing::TempDir() + "/bad.jsonl";
  absl::Status s = ReadError("{\"prompt\": \"a\", \"answer\": \"1\"}\n\n{\"prompt\": \"b\",\n");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr(path + ":3: bad JSON"));

  s = ReadError("{\"prompt\": \"a\", \"answer\": \"1\"}\n[1, 2]\n");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr(path + ":2: expected a JSON object, found array"));

  s = ReadError("{\"answer\": \"1\"}\n");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr(path + ":1: missing \"prompt\""));

  s = ReadError("{\"prompt\": 5, \"answer\": \"1\"}\n");
  EXPECT_THAT(s.message(), HasSubstr(":1: \"prompt\" must be a string, found number"));
  s = ReadError("{\"prompt\": \"a\"}\n");
  EXPECT_THAT(s.message(), HasSubstr(":1: missing \"answer\""));
  s = ReadError("{\"prompt\": \"a\", \"answer\": true}\n");
  EXPECT_THAT(s.message(), HasSubstr(":1: \"answer\" must be a string or a number"));

  // A number beyond a double (found by fuzz/jsonl_fuzzer.cc) is bad JSON, not an abort.
  s = ReadError("{\"prompt\": \"a\", \"answer\": 1E8034712644}\n");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr(path + ":1: bad JSON: number overflow"));
}

TEST(Jsonl, MissingFileAndBadMetadata) {
  const std::string missing = ::testing::TempDir() + "/no_such.jsonl";
  absl::Status s = ReadJsonl(missing).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(s.message(), HasSubstr(missing));

  const std::string path = ::testing::TempDir() + "/out.jsonl";
  s = WriteJsonl(path, {{7, "p", "a", "[1]"}});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("id 7"));
  s = WriteJsonl(path, {{7, "p", "a", R"({"prompt":"x"})"}});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("\"prompt\""));
  s = WriteJsonl(::testing::TempDir() + "/no_dir/out.jsonl", {});
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
}

v1::ArithmeticTaskConfig Arith(int min_d, int max_d, const std::string& ops, int n,
                               float eval_fraction) {
  v1::ArithmeticTaskConfig c;
  c.set_min_digits(min_d);
  c.set_max_digits(max_d);
  c.set_operators(ops);
  c.set_num_problems(n);
  c.set_eval_fraction(eval_fraction);
  return c;
}

// Checks the problem text, its operand digit counts and its answer.
void ExpectWellFormed(const Example& ex, int min_d, int max_d) {
  static const std::regex kProblem(R"((\d+)([+-])(\d+)=)");
  std::smatch m;
  ASSERT_TRUE(std::regex_match(ex.prompt, m, kProblem)) << ex.prompt;
  for (int g : {1, 3}) {
    const std::string operand = m[g].str();
    EXPECT_GE(static_cast<int>(operand.size()), min_d) << ex.prompt;
    EXPECT_LE(static_cast<int>(operand.size()), max_d) << ex.prompt;
    EXPECT_TRUE(operand.size() == 1 || operand[0] != '0') << ex.prompt;
  }
  const int64_t a = std::stoll(m[1].str()), b = std::stoll(m[3].str());
  EXPECT_EQ(ex.answer, std::to_string(m[2].str() == "+" ? a + b : a - b)) << ex.prompt;
}

TEST(GenerateArithmetic, SplitIsDisjointCorrectAndSized) {
  const Split split = GenerateArithmetic(Arith(1, 3, "+-", 500, 0.1f), 7);
  EXPECT_EQ(split.eval.size(), 50u);
  EXPECT_EQ(split.train.size(), 450u);
  std::set<std::string> prompts;
  std::set<uint64_t> ids;
  bool saw_minus = false, saw_negative = false;
  for (const auto* half : {&split.train, &split.eval}) {
    for (const Example& ex : *half) {
      ExpectWellFormed(ex, 1, 3);
      EXPECT_TRUE(prompts.insert(ex.prompt).second) << "repeated " << ex.prompt;
      EXPECT_TRUE(ids.insert(ex.id).second);
      EXPECT_LT(ex.id, 500u);
      saw_minus |= ex.prompt.find('-') != std::string::npos;
      saw_negative |= ex.answer[0] == '-';
    }
  }
  EXPECT_TRUE(saw_minus);
  EXPECT_TRUE(saw_negative);
}

TEST(GenerateArithmetic, DeterministicPerSeed) {
  const auto config = Arith(1, 2, "+-", 100, 0.2f);
  const Split a = GenerateArithmetic(config, 1), b = GenerateArithmetic(config, 1);
  const Split c = GenerateArithmetic(config, 2);
  ASSERT_EQ(a.train.size(), b.train.size());
  std::vector<std::string> pa, pb, pc;
  for (const auto& ex : a.train) pa.push_back(ex.prompt + ex.answer);
  for (const auto& ex : b.train) pb.push_back(ex.prompt + ex.answer);
  for (const auto& ex : c.train) pc.push_back(ex.prompt + ex.answer);
  EXPECT_EQ(pa, pb);
  EXPECT_NE(pa, pc);
  // Pinned: the same on every standard library (no std:: distributions).
  EXPECT_EQ(a.eval.front().prompt, "7-4=");
  EXPECT_EQ(a.train.front().prompt + a.train.front().answer, "6-2=4");
}

TEST(GenerateArithmetic, SmallSpaceTerminatesWithFewerProblems) {
  const Split split = GenerateArithmetic(Arith(1, 1, "+", 4000, 0.1f), 3);
  // 10 x 10 distinct "a+b=" problems exist.
  EXPECT_EQ(split.train.size() + split.eval.size(), 100u);
  EXPECT_EQ(split.eval.size(), 10u);
  for (const Example& ex : split.train) EXPECT_EQ(ex.prompt.find('-'), std::string::npos);
}

TEST(GenerateArithmetic, EvalGetsAtLeastOne) {
  const Split split = GenerateArithmetic(Arith(2, 2, "-", 2, 0.01f), 5);
  EXPECT_EQ(split.eval.size(), 1u);
  EXPECT_EQ(split.train.size(), 1u);
  ExpectWellFormed(split.eval[0], 2, 2);
}

std::vector<Example> Numbered(int n) {
  std::vector<Example> v(n);
  for (int i = 0; i < n; ++i) v[i] = {static_cast<uint64_t>(i), std::to_string(i), "", "{}"};
  return v;
}

std::vector<uint64_t> Take(PromptStream& s, int n) {
  std::vector<uint64_t> ids;
  for (int i = 0; i < n; ++i) ids.push_back(s.Next().id);
  return ids;
}

TEST(PromptStream, EachPassIsAReproduciblePermutation) {
  PromptStream a(Numbered(20), 11), b(Numbered(20), 11), c(Numbered(20), 12);
  const std::vector<uint64_t> ids = Take(a, 60);
  EXPECT_EQ(a.position(), 60u);
  EXPECT_EQ(ids, Take(b, 60));
  EXPECT_NE(ids, Take(c, 60));
  std::vector<std::vector<uint64_t>> passes;
  for (int p = 0; p < 3; ++p) {
    std::vector<uint64_t> pass(ids.begin() + 20 * p, ids.begin() + 20 * (p + 1));
    EXPECT_EQ(std::set<uint64_t>(pass.begin(), pass.end()).size(), 20u);
    passes.push_back(pass);
  }
  EXPECT_NE(passes[0], passes[1]);
  EXPECT_NE(passes[1], passes[2]);
}

TEST(PromptStream, SeekResumesTheSameSequence) {
  PromptStream a(Numbered(7), 3);
  const std::vector<uint64_t> ids = Take(a, 30);
  a.Seek(3);  // backwards, into an earlier pass
  EXPECT_EQ(Take(a, 27), std::vector<uint64_t>(ids.begin() + 3, ids.end()));
  for (uint64_t start : {0, 5, 7, 13, 29}) {
    PromptStream b(Numbered(7), 3);
    b.Seek(start);
    EXPECT_EQ(b.position(), start);
    EXPECT_EQ(Take(b, 30 - start), std::vector<uint64_t>(ids.begin() + start, ids.end()))
        << "from " << start;
  }
}

TEST(PromptStream, AtNamesAPositionsExampleWithoutMoving) {
  PromptStream a(Numbered(7), 3);
  const std::vector<uint64_t> ids = Take(a, 30);
  PromptStream b(Numbered(7), 3);
  b.Seek(9);
  for (uint64_t at : {0, 5, 13, 29, 8}) EXPECT_EQ(b.At(at).id, ids[at]) << "at " << at;
  EXPECT_EQ(b.position(), 9u);
  EXPECT_EQ(Take(b, 21), std::vector<uint64_t>(ids.begin() + 9, ids.end()));
}

TEST(Jsonl, SftLinesTakeResponseOrAnswer) {
  absl::StatusOr<std::vector<Example>> out = ReadSftJsonl(WriteFile("sft.jsonl",
      "{\"prompt\": \"a\", \"response\": \"x y\", \"k\": 1}\n"
      "{\"prompt\": \"b\", \"answer\": 7}\n"));
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->size(), 2u);
  EXPECT_EQ((*out)[0].answer, "x y");
  EXPECT_EQ((*out)[0].metadata_json, R"({"k":1})");
  EXPECT_EQ((*out)[1].answer, "7");
  absl::Status s = ReadSftJsonl(WriteFile("sft_both.jsonl",
      "{\"prompt\": \"a\", \"response\": \"x\", \"answer\": \"y\"}\n")).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("sft_both.jsonl:1: both \"answer\" and \"response\""));
  // ReadJsonl keeps "response" as metadata and still wants "answer".
  s = ReadJsonl(WriteFile("not_sft.jsonl", "{\"prompt\": \"a\", \"response\": \"x\"}\n"))
          .status();
  EXPECT_THAT(s.message(), HasSubstr(":1: missing \"answer\""));
}

TEST(Jsonl, ChatLinesKeepTheirMessages) {
  const std::string chat =
      R"([{"role":"system","content":"Add."},{"role":"user","content":"2+2="},)"
      R"({"role":"assistant","content":"","tool_calls":[{"function":{"name":"add"}}]}])";
  absl::StatusOr<std::vector<Example>> out = ReadJsonl(WriteFile("chat.jsonl",
      "{\"messages\": " + chat + ", \"answer\": 4, \"k\": 1}\n"));
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->size(), 1u);
  EXPECT_EQ((*out)[0].messages_json, chat);
  EXPECT_EQ((*out)[0].prompt, "");
  EXPECT_EQ((*out)[0].answer, "4");
  EXPECT_EQ((*out)[0].metadata_json, R"({"k":1})");
  const std::string path = ::testing::TempDir() + "/chat_roundtrip.jsonl";
  ASSERT_TRUE(WriteJsonl(path, *out).ok());
  absl::StatusOr<std::vector<Example>> again = ReadJsonl(path);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ((*again)[0].messages_json, chat);

  // A supervised chat may carry its targets as assistant turns.
  out = ReadSftJsonl(WriteFile("chat_sft.jsonl", "{\"messages\": " + chat + "}\n"));
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ((*out)[0].answer, "");
  EXPECT_THAT(ReadError("{\"messages\": " + chat + "}\n").message(),
              HasSubstr(":1: missing \"answer\""));
  EXPECT_THAT(ReadError("{\"prompt\": \"a\", \"messages\": " + chat + ", \"answer\": 1}").message(),
              HasSubstr(":1: both \"prompt\" and \"messages\""));
  EXPECT_THAT(ReadError("{\"messages\": [], \"answer\": 1}").message(),
              HasSubstr("\"messages\" must be a non-empty list"));
  EXPECT_THAT(ReadError("{\"messages\": [{\"role\": \"user\"}, {\"content\": \"x\"}], \"answer\": 1}")
                  .message(),
              HasSubstr("messages[1] must be an object with a string \"role\""));
}

TEST(Jsonl, PreferencePairs) {
  absl::StatusOr<std::vector<PreferencePair>> out = ReadPreferenceJsonl(WriteFile("pref.jsonl",
      "{\"prompt\": \"2+2=\", \"chosen\": \"4\", \"rejected\": \"5\", \"src\": \"x\"}\n"
      "\n"
      "{\"rejected\": \"no\", \"prompt\": \"q\", \"chosen\": \"yes\"}\n"));
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->size(), 2u);
  EXPECT_EQ((*out)[0].prompt, "2+2=");
  EXPECT_EQ((*out)[0].chosen, "4");
  EXPECT_EQ((*out)[0].rejected, "5");
  EXPECT_EQ((*out)[0].metadata_json, R"({"src":"x"})");
  EXPECT_EQ((*out)[1].id, 2u);
  EXPECT_EQ((*out)[1].chosen, "yes");

  absl::Status s = ReadPreferenceJsonl(WriteFile("pref_bad.jsonl",
      "{\"prompt\": \"a\", \"chosen\": \"x\"}\n")).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("pref_bad.jsonl:1: missing \"rejected\""));
  s = ReadPreferenceJsonl(WriteFile("pref_num.jsonl",
      "{\"prompt\": \"a\", \"chosen\": 4, \"rejected\": \"5\"}\n")).status();
  EXPECT_THAT(s.message(), HasSubstr(":1: \"chosen\" must be a string, found number"));
  s = ReadPreferenceJsonl(WriteFile("pref_same.jsonl",
      "{\"prompt\": \"a\", \"chosen\": \"4\", \"rejected\": \"4\"}\n")).status();
  EXPECT_THAT(s.message(), HasSubstr(":1: \"chosen\" and \"rejected\" are the same response"));
}

TEST(ArithmeticPreferences, ChosenIsTheAnswerRejectedANearMissOrARunOn) {
  v1::ArithmeticTaskConfig config;
  config.set_num_problems(300);
  const Split split = GenerateArithmetic(config, 3);
  const std::vector<PreferencePair> pairs = ArithmeticPreferences(split.train, 9);
  ASSERT_EQ(pairs.size(), split.train.size());
  size_t near_misses = 0;
  for (size_t i = 0; i < pairs.size(); ++i) {
    const PreferencePair& p = pairs[i];
    EXPECT_EQ(p.id, split.train[i].id);
    EXPECT_EQ(p.prompt, split.train[i].prompt);
    EXPECT_EQ(p.chosen, split.train[i].answer);
    const bool run_on = p.rejected.size() == p.chosen.size() + 1 &&
                        p.rejected.compare(0, p.chosen.size(), p.chosen) == 0;
    const int64_t off = std::stoll(p.rejected) - std::stoll(p.chosen);
    near_misses += !run_on;
    EXPECT_TRUE(run_on || (off != 0 && off >= -9 && off <= 9)) << p.prompt << " " << p.rejected;
  }
  EXPECT_GT(near_misses, pairs.size() / 3);
  EXPECT_LT(near_misses, pairs.size() * 2 / 3);
  const std::vector<PreferencePair> again = ArithmeticPreferences(split.train, 9);
  for (size_t i = 0; i < pairs.size(); ++i) EXPECT_EQ(again[i].rejected, pairs[i].rejected);
}

}  // namespace
}  // namespace trellis::data
