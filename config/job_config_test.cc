#include "config/job_config.h"

#include <cmath>
#include <fstream>
#include <limits>
#include <optional>
#include <string>

#include "config/recipe.h"
#include "config/testing/validate_yaml.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"

namespace trellis::config {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

absl::Status ParseError(const std::string& yaml) {
  return ParseJobYaml(yaml, "job.yaml").status();
}

using testing::ValidateYaml;

// Every singular field of `msg` and its sub-messages is explicitly present.
void ExpectAllPresent(const google::protobuf::Message& msg, const std::string& path) {
  const auto* d = msg.GetDescriptor();
  const auto* r = msg.GetReflection();
  for (int i = 0; i < d->field_count(); ++i) {
    const auto* f = d->field(i);
    if (f->is_repeated()) continue;
    EXPECT_TRUE(r->HasField(msg, f)) << path << f->name();
    if (f->cpp_type() == google::protobuf::FieldDescriptor::CPPTYPE_MESSAGE) {
      ExpectAllPresent(r->GetMessage(msg, f), path + f->name() + ".");
    }
  }
}

TEST(ParseJobYaml, EmptyTextGivesDefaults) {
  absl::StatusOr<v1::JobConfig> job = ParseJobYaml("# nothing\n");
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->model().d_model(), 128);
  EXPECT_FLOAT_EQ(job->grpo().clip_eps(), 0.2f);
  EXPECT_TRUE(ValidateJob(*job).ok()) << ValidateJob(*job);
}

TEST(ParseJobYaml, ReadsEveryScalarType) {
  absl::StatusOr<v1::JobConfig> job = ParseJobYaml(R"(
name: my-run
model:
  d_model: 64
  rms_norm_eps: 1e-6
  tie_embeddings: yes
verifier: {name: exact_match, tolerance: 0.25}
grpo:
  loss_aggregation: sequence_mean
  scale_rewards: False
runtime:
  seed: 18446744073709551615
data:
  arithmetic:
)");
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->name(), "my-run");
  EXPECT_EQ(job->model().d_model(), 64);
  EXPECT_FLOAT_EQ(job->model().rms_norm_eps(), 1e-6f);
  EXPECT_TRUE(job->model().tie_embeddings());
  EXPECT_EQ(job->verifier().name(), "exact_match");
  EXPECT_DOUBLE_EQ(job->verifier().tolerance(), 0.25);
  EXPECT_EQ(job->grpo().loss_aggregation(), v1::SEQUENCE_MEAN);
  EXPECT_FALSE(job->grpo().scale_rewards());
  EXPECT_EQ(job->runtime().seed(), std::numeric_limits<uint64_t>::max());
  EXPECT_TRUE(job->data().has_arithmetic());
}

TEST(ParseJobYaml, UnknownFieldNamesPathLineAndKnownFields) {
  absl::Status s = ParseError("name: x\nmodel:\n  d_modle: 3\n");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("job.yaml:3: model.d_modle: unknown field"));
  EXPECT_THAT(s.message(), HasSubstr("did you mean d_model?"));
  EXPECT_THAT(s.message(), HasSubstr("known fields of model: vocab_size, d_model, n_layers"));

  s = ParseError("grpoo:\n  steps: 3\n");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("job.yaml:1: grpoo: unknown field"));
  EXPECT_THAT(s.message(), HasSubstr("known fields of the job: name, model, data"));
}

TEST(ParseJobYaml, WrongTypeNamesFieldAndValue) {
  absl::Status s = ParseError("model:\n  d_model: 8\ngrpo:\n  steps: 2\n  clip_eps: abc\n");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "job.yaml:5: grpo.clip_eps: expected a number, found \"abc\"");

  s = ParseError("model:\n  n_layers: 2.5\n");
  EXPECT_THAT(s.message(), HasSubstr("job.yaml:2: model.n_layers: expected an integer"));
  s = ParseError("model:\n  tie_embeddings: maybe\n");
  EXPECT_THAT(s.message(), HasSubstr("model.tie_embeddings: expected true or false"));
  s = ParseError("model:\n  d_model: [1, 2]\n");
  EXPECT_THAT(s.message(), HasSubstr("model.d_model: expected an integer, found a list"));
  s = ParseError("model: 3\n");
  EXPECT_THAT(s.message(), HasSubstr("model: expected a map of ModelConfig fields"));
  s = ParseError("sampling:\n  temperature:\n");
  EXPECT_THAT(s.message(), HasSubstr("job.yaml:2: sampling.temperature: expected a number"));
  s = ParseError("- a\n- b\n");
  EXPECT_THAT(s.message(), HasSubstr("expected a map of JobConfig fields, found a list"));
}

TEST(ParseJobYaml, OutOfRangeIntegersAndFloats) {
  absl::Status s = ParseError("model:\n  d_model: 3000000000\n");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("job.yaml:2: model.d_model: expected an integer in "
                                     "[-2147483648, 2147483647], found 3000000000"));
  s = ParseError("runtime:\n  seed: -1\n");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("runtime.seed: expected a non-negative integer"));
  absl::StatusOr<v1::JobConfig> zero = ParseJobYaml("runtime:\n  seed: -0\n");
  ASSERT_TRUE(zero.ok()) << zero.status();
  EXPECT_EQ(zero->runtime().seed(), 0u);
  s = ParseError("runtime:\n  seed: 18446744073709551616\n");
  EXPECT_THAT(s.message(), HasSubstr("runtime.seed: expected an integer in [0, "));
  s = ParseError("model:\n  rope_theta: 1e40\n");
  EXPECT_THAT(s.message(), HasSubstr("model.rope_theta: expected a number within float range"));
}

TEST(ParseJobYaml, BadEnumNamesAllowedValues) {
  absl::Status s = ParseError("grpo:\n  loss_aggregation: per_token\n");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("job.yaml:2: grpo.loss_aggregation: expected one of "
                                     "token_mean, sequence_mean, found \"per_token\""));
  const std::pair<const char*, const char*> cases[] = {
      {"grpo:\n  optimizer: {name: adam}\n",
       "job.yaml:2: grpo.optimizer.name: expected one of adamw, sgd, found \"adam\""},
      {"verifier:\n  sandbox: docker\n",
       "job.yaml:2: verifier.sandbox: expected one of auto, bwrap, rlimits, found \"docker\""},
      {"verifier:\n  timeout_policy: skip\n",
       "job.yaml:2: verifier.timeout_policy: expected one of reward, drop, found \"skip\""},
      {"grpo:\n  advantage_estimator: ppo\n",
       "job.yaml:2: grpo.advantage_estimator: expected one of grpo, rloo, reinforce_pp, found "
       "\"ppo\""},
      {"ppo:\n  critic: joint\n", "ppo.critic: expected one of separate, shared, found \"joint\""},
      {"ppo:\n  kl_mode: both\n", "ppo.kl_mode: expected one of reward, loss, found \"both\""},
      {"ppo:\n  reward: human\n",
       "ppo.reward: expected one of verifier, reward_model, found \"human\""},
      {"memory:\n  precision: fp16\n",
       "memory.precision: expected one of fp32, bf16, found \"fp16\""},
      {"memory:\n  lora: {target_modules: [q_proj, qkv]}\n",
       "job.yaml:2: memory.lora.target_modules[1]: expected one of q_proj, k_proj, v_proj, "
       "o_proj, gate_proj, up_proj, down_proj, found \"qkv\""},
      {"dpo:\n  loss: hinge\n", "dpo.loss: expected one of sigmoid, ipo, found \"hinge\""},
      {"dpo:\n  reference_logprobs: never\n",
       "dpo.reference_logprobs: expected one of cached, on_the_fly, found \"never\""},
  };
  for (const auto& [yaml, expected] : cases) {
    s = ParseError(yaml);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << yaml;
    EXPECT_THAT(s.message(), HasSubstr(expected)) << yaml;
  }
}

TEST(ParseJobYaml, ChoicesReadInAnyCaseAndQuoted) {
  absl::StatusOr<v1::JobConfig> job = ParseJobYaml(
      "grpo: {optimizer: {name: \"sgd\"}, advantage_estimator: REINFORCE_PP}\n"
      "memory: {precision: Bf16, lora: {target_modules: [gate_proj, V_PROJ]}}\n"
      "dpo: {reference_logprobs: on_the_fly}\n",
      "job.yaml");
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->grpo().optimizer().name(), v1::OptimizerConfig::SGD);
  EXPECT_EQ(job->grpo().advantage_estimator(), v1::GrpoConfig::REINFORCE_PP);
  EXPECT_EQ(job->memory().precision(), v1::MemoryConfig::BF16);
  EXPECT_THAT(job->memory().lora().target_modules(),
              ::testing::ElementsAre(v1::LoraConfig::GATE_PROJ, v1::LoraConfig::V_PROJ));
  EXPECT_EQ(job->dpo().reference_logprobs(), v1::DpoConfig::ON_THE_FLY);
}

TEST(ParseJobYaml, DuplicateFieldAndBadSyntax) {
  absl::Status s = ParseError("model:\n  d_model: 8\n  d_model: 16\n");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("model.d_model: field given twice"));
  s = ParseError("model: [1, 2\n");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("job.yaml:"));
  EXPECT_THAT(s.message(), HasSubstr("bad YAML"));
}

TEST(ValidateJob, ReportsFieldPathAndAllowedRange) {
  absl::Status s = ValidateYaml("grpo:\n  clip_eps: 1.5\n");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "grpo.clip_eps: must be in (0, 1), found 1.5");
}

TEST(ValidateJob, EachRuleNamesItsField) {
  const std::pair<const char*, const char*> cases[] = {
      {"model: {d_model: 0}", "model.d_model: must be > 0"},
      {"model: {d_model: 130}", "model.d_model: must be divisible by model.n_heads (4)"},
      {"model: {d_model: 12, n_heads: 4}", "head size, 3) is even"},
      {"model: {n_kv_heads: 3}", "model.n_kv_heads: must be a divisor of model.n_heads (4)"},
      {"model: {head_dim: 7}", "model.head_dim: must be even for rotary embeddings, found 7"},
      {"model: {max_position_embeddings: 16}",
       "model.max_seq_len: must be <= model.max_position_embeddings (16), found 32"},
      {"model: {rope_scaling: {type: llama3, high_freq_factor: 0.5}}",
       "model.rope_scaling.high_freq_factor: must be > low_freq_factor (1)"},
      {"model: {max_seq_len: 1}", "model.max_seq_len: must be >= 2, found 1"},
      {"sampling: {temperature: 0}", "sampling.temperature: must be in [0.001, 100], found 0"},
      {"sft: {optimizer: {momentum: 1}}", "sft.optimizer.momentum: must be in [0, 1)"},
      {"sampling: {top_p: 1.5}", "sampling.top_p: must be in (0, 1]"},
      {"sampling: {top_p: .nan}", "sampling.top_p: must be in (0, 1], found nan"},
      {"sampling: {max_new_tokens: 0}", "sampling.max_new_tokens: must be >= 1"},
      {"sampling: {max_new_tokens: 40}", "< model.max_seq_len (32)"},
      {"verifier: {name: ''}", "verifier.name: must be a registered verifier name"},
      {"verifier: {cache_entries: -1}", "verifier.cache_entries: must be >= 0, found -1"},
      {"verifier: {breaker_failures: -1}", "verifier.breaker_failures: must be >= 0"},
      {"eval: {verify_retries: -1}", "eval.verify_retries: must be >= 0"},
      {"verifier: {breaker_pause_ms: 0}", "verifier.breaker_pause_ms: must be >= 1, found 0"},
      {"sft: {optimizer: {lr: 0}}", "sft.optimizer.lr: must be in (0, 1], found 0"},
      {"grpo: {optimizer: {beta1: 1}}", "grpo.optimizer.beta1: must be in [0, 1)"},
      {"grpo: {responses_per_prompt: 1}", "grpo.responses_per_prompt: must be >= 2"},
      {"grpo: {prompts_per_step: 0}", "grpo.prompts_per_step: must be >= 1"},
      {"grpo: {micro_batch_size: 0}", "grpo.micro_batch_size: must be >= 1"},
      {"grpo: {kl_coef: -0.1}", "grpo.kl_coef: must be in [0, 1000], found -0.1"},
      {"grpo: {loss_aggregation: loss_aggregation_unspecified}",
       "grpo.loss_aggregation: must be token_mean or sequence_mean, found "
       "loss_aggregation_unspecified"},
      {"algorithm: ppo\ngrpo: {advantage_estimator: rloo}",
       "grpo.advantage_estimator: must be grpo (the default) with algorithm ppo, whose critic "
       "gives the advantages, found rloo"},
      {"algorithm: ppo\nppo: {reward: reward_model}",
       "ppo.reward_model_path: must be set when ppo.reward is reward_model"},
      {"algorithm: ppo\nppo: {critic: shared}\nmemory: {zero_stage: 3}\n"
       "deployment: {learner: {count: 2}}", "ppo.critic: must be separate under memory.zero"},
      {"grpo: {dapo: {clip_eps_low: 1}}", "grpo.dapo.clip_eps_low: must be in [0, 1)"},
      {"grpo: {dapo: {clip_eps_high: -0.1}}", "grpo.dapo.clip_eps_high: must be in [0, 10]"},
      {"grpo: {dapo: {max_sampling_rounds: 0}}",
       "grpo.dapo.max_sampling_rounds: must be >= 1, found 0"},
      {"async: {max_staleness: 9}", "async.max_staleness: must be in [0, 8], found 9"},
      {"async: {importance_weight_cap: 0.5}",
       "async.importance_weight_cap: must be in [1, 100], found 0.5"},
      {"algorithm: sft\nasync: {enabled: true}",
       "async.enabled: must be false unless the algorithm samples"},
      {"sft: {steps: -1}", "sft.steps: must be >= 0"},
      {"sft: {batch_size: 0}", "sft.batch_size: must be >= 1"},
      {"data: {arithmetic: {min_digits: 0}}", "data.arithmetic.min_digits: must be in [1, 9]"},
      {"data: {arithmetic: {min_digits: 3, max_digits: 2}}",
       "data.arithmetic.max_digits: must be >= min_digits (3)"},
      {"data: {arithmetic: {operators: '*'}}", "data.arithmetic.operators: must be a non-empty"},
      {"data: {arithmetic: {operators: ''}}", "data.arithmetic.operators"},
      {"data: {arithmetic: {num_problems: 1}}", "data.arithmetic.num_problems: must be >= 2"},
      {"data: {arithmetic: {eval_fraction: 1}}",
       "data.arithmetic.eval_fraction: must be in (0, 1)"},
      {"runtime: {num_threads: -2}", "runtime.num_threads: must be >= 0"},
      {"deployment: {actor: {count: 0}}", "deployment.actor.count: must be >= 1, found 0"},
      {"deployment: {learner: {count: 0}}", "deployment.learner.count: must be >= 1, found 0"},
      {"deployment: {reference: {count: 2}}", "deployment.reference.count: must be 1, found 2"},
      {"deployment: {weight_transport: udp}",
       "deployment.weight_transport: must be one of gloo, tcp, grpc, nccl, cuda_ipc, found "
       "\"udp\""},
      {"deployment: {heartbeat_interval_ms: 500, heartbeat_timeout_ms: 400}",
       "deployment.heartbeat_timeout_ms: must be > deployment.heartbeat_interval_ms"},
      {"deployment: {heartbeat_timeout_ms: 5000, stall_timeout_ms: 4000}",
       "deployment.stall_timeout_ms: must be >= deployment.heartbeat_timeout_ms"},
      {"deployment: {max_restarts: -1}", "deployment.max_restarts: must be in [0, 100]"},
      {"deployment: {verifier: {pool: ''}}", "deployment.verifier.pool: must be a pool name"},
      {"dpo: {beta: 0}", "dpo.beta: must be in (0, 1000], found 0"},
      {"dpo: {batch_size: 0}", "dpo.batch_size: must be >= 1"},
      {"dpo: {responses_per_prompt: 1}", "dpo.responses_per_prompt: must be >= 2"},
      {"dpo: {optimizer: {lr: -1}}", "dpo.optimizer.lr: must be in (0, 1], found -1"},
      {"algorithm: dpo\ndata: {preference_train_path: a.jsonl}",
       "data.preference_eval_path: must be set together with data.preference_train_path"},
      {"data: {preference_train_path: a.jsonl, preference_eval_path: b.jsonl}",
       "data.preference_train_path: must be empty unless algorithm is dpo"},
      {"algorithm: sft\nruntime: {checkpoint_every: 5}",
       "runtime.checkpoint_every: must be 0 with algorithm sft"},
      {"environment: {name: e}", "environment.turn_stop: must be set with an environment"},
      {"environment: {name: e, turn_stop: '|', max_turns: 0}",
       "environment.max_turns: must be >= 1"},
      {"environment: {name: e, turn_stop: '|', workers: 0}", "environment.workers: must be >= 1"},
      {"environment: {name: e, turn_stop: '|', call_deadline_ms: 0}",
       "environment.call_deadline_ms: must be > 0"},
      {"environment: {name: e, turn_stop: '|', episode_deadline_ms: -1}",
       "environment.episode_deadline_ms: must be > 0"},
      {"environment: {name: e, turn_stop: '|', max_tokens: 33}",
       "environment.max_tokens: must be in [0, model.max_seq_len 32] (0: model.max_seq_len), "
       "found 33"},
  };
  for (const auto& [yaml, expected] : cases) {
    absl::Status s = ValidateYaml(yaml);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << yaml;
    EXPECT_THAT(s.message(), HasSubstr(expected)) << yaml;
  }
}

TEST(ValidateJob, LoraNeedsAPolicyToAdapt) {
  const std::string lora = "memory: {lora: {rank: 8, target_modules: [q_proj, down_proj]}}\n";
  for (const char* algorithm : {"grpo", "ppo", "sft", "dpo", "online_dpo"}) {
    EXPECT_TRUE(ValidateYaml(lora + "algorithm: " + algorithm + "\n").ok()) << algorithm;
  }
  absl::Status s = ValidateYaml(lora + "algorithm: reward_model\n");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("memory.lora.rank: must be 0 with algorithm reward_model"));
  s = ValidateYaml("memory: {precision: bf16, lora: {rank: 4}}\n");
  EXPECT_THAT(s.message(),
              HasSubstr("memory.precision: must be fp32 with memory.lora (bf16 LoRA is not "
                        "supported yet), found bf16"));
  s = ValidateYaml("memory: {lora: {rank: 4, target_modules: [q_proj, v_proj, q_proj]}}\n");
  EXPECT_THAT(s.message(), HasSubstr("memory.lora.target_modules[2]: must name each entry once, "
                                     "found q_proj again (first at [0]; 1 entry repeats"));
}

TEST(ValidateJob, ReportsEveryViolation) {
  absl::Status s = ValidateYaml("grpo: {clip_eps: 0, kl_coef: -1}\nsft: {batch_size: 0}\n");
  EXPECT_THAT(s.message(), HasSubstr("grpo.clip_eps"));
  EXPECT_THAT(s.message(), HasSubstr("grpo.kl_coef"));
  EXPECT_THAT(s.message(), HasSubstr("sft.batch_size"));
}

TEST(ResolvedJobYaml, DefaultsRoundTripWithEveryFieldPresent) {
  const std::string yaml = ResolvedJobYaml(v1::JobConfig());
  EXPECT_THAT(yaml, HasSubstr("\n  clip_eps: 0.2\n"));
  EXPECT_THAT(yaml, HasSubstr("\n  loss_aggregation: token_mean\n"));
  EXPECT_THAT(yaml, HasSubstr("\n    name: adamw\n"));
  EXPECT_THAT(yaml, HasSubstr("\n  sandbox: auto\n"));
  EXPECT_THAT(yaml, HasSubstr("\n    operators: \"+-\"\n"));
  absl::StatusOr<v1::JobConfig> back = ParseJobYaml(yaml, "resolved");
  ASSERT_TRUE(back.ok()) << back.status() << "\n" << yaml;
  ExpectAllPresent(*back, "");
  google::protobuf::util::MessageDifferencer diff;
  diff.set_message_field_comparison(google::protobuf::util::MessageDifferencer::EQUIVALENT);
  EXPECT_TRUE(diff.Compare(v1::JobConfig(), *back));
}

TEST(ResolvedJobYaml, ValuesRoundTripExactly) {
  v1::JobConfig job;
  job.set_name("quote \" back\\slash: # not a comment\nnew line\t\x01");
  job.mutable_model()->set_rope_theta(0.1f);
  job.mutable_model()->set_init_std(1.17549435e-38f);
  job.mutable_model()->set_rms_norm_eps(std::numeric_limits<float>::infinity());
  job.mutable_verifier()->set_tolerance(0.1 + 0.2);
  job.mutable_runtime()->set_seed(std::numeric_limits<uint64_t>::max());
  job.mutable_runtime()->set_out_dir("");
  job.mutable_model()->set_init_checkpoint("~");
  job.mutable_data()->set_eval_path("null");
  job.mutable_data()->set_train_path("- [a]: {b}");
  job.mutable_grpo()->set_loss_aggregation(v1::LOSS_AGGREGATION_UNSPECIFIED);
  job.mutable_sft()->mutable_optimizer()->set_lr(3e-4f);
  job.mutable_sft()->mutable_optimizer()->set_name(v1::OptimizerConfig::SGD);
  job.mutable_memory()->set_precision(v1::MemoryConfig::BF16);
  job.mutable_memory()->mutable_lora()->add_target_modules(v1::LoraConfig::DOWN_PROJ);
  job.mutable_memory()->mutable_lora()->add_target_modules(v1::LoraConfig::Q_PROJ);
  const std::string yaml = ResolvedJobYaml(job);
  absl::StatusOr<v1::JobConfig> back = ParseJobYaml(yaml, "resolved");
  ASSERT_TRUE(back.ok()) << back.status() << "\n" << yaml;
  ExpectAllPresent(*back, "");
  google::protobuf::util::MessageDifferencer diff;
  diff.set_message_field_comparison(google::protobuf::util::MessageDifferencer::EQUIVALENT);
  std::string report;
  diff.ReportDifferencesToString(&report);
  EXPECT_TRUE(diff.Compare(job, *back)) << report << "\n" << yaml;
  // And the resolved text is a fixed point.
  EXPECT_EQ(ResolvedJobYaml(*back), yaml);
}

TEST(LoadJobFile, MissingFileIsNotFoundNamingPath) {
  const std::string path = ::testing::TempDir() + "/no_such_job.yaml";
  absl::Status s = LoadJobFile(path).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(s.message(), HasSubstr(path));
  s = LoadJobFile(::testing::TempDir()).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
}

TEST(LoadJobFile, ErrorsNameTheFile) {
  const std::string path = ::testing::TempDir() + "/bad_job.yaml";
  std::ofstream(path) << "grpo:\n  steps: 3\n  clip_eps: abc\n";
  absl::Status s = LoadJobFile(path).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr(path + ":3: grpo.clip_eps"));
  std::ofstream(path) << "grpo:\n  steps: 3\n";
  absl::StatusOr<v1::JobConfig> job = LoadJobFile(path);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->grpo().steps(), 3);
  EXPECT_THAT(ResolvedJobYaml(*job), Not(HasSubstr("\n  steps: 40\n")));
}

}  // namespace
TEST(RecipeTest, NamesRoundTrip) {
  for (const char* name : {"grpo", "ppo", "sft", "dpo", "online_dpo", "reward_model", "distill"}) {
    const std::optional<Recipe> recipe = RecipeFromName(name);
    ASSERT_TRUE(recipe.has_value()) << name;
    EXPECT_EQ(RecipeName(*recipe), name);
  }
  EXPECT_FALSE(RecipeFromName("kto").has_value());
  v1::JobConfig job;
  job.set_algorithm("reward_model");
  EXPECT_EQ(RecipeOf(job), Recipe::kRewardModel);
  job.set_algorithm("a_plug_in");  // a loop recipe no lower layer tells apart
  EXPECT_FALSE(RecipeOf(job).has_value());
}

}  // namespace trellis::config
