#ifndef TRELLIS_TOOLS_PLANNER_H_
#define TRELLIS_TOOLS_PLANNER_H_

// `trellis plan`: an itemized estimate of a job's memory per role and object,
// and of its step time, before anything runs (DESIGN.md §5: M_total =
// M_weights + M_grads + M_optimizer + M_activations + M_workspace +
// M_communication). Every line carries the formula that gave it.
//
// The formulas follow what this code allocates (float32, or bf16 weights
// and blocks with fp32 masters under memory.precision bf16; per-layer
// activation checkpointing under memory.activation_checkpointing; the
// transformer of model/transformer.cc; AdamW's two state tensors or SGD's
// momentum buffer; every policy phase's optimizer kept resident; the
// in-process weight stage), for jobs run with `trellis run` (every role in
// one process, one actor). Counts are elements of 4 bytes. Activation and
// workspace coefficients per token were counted from the autograd graph of
// transformer.cc, corrected where LibTorch keeps more than the count (each
// such term says so), and are checked against measured runs on three
// configurations (tests/measure_test.cc).

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "config/job_size.h"
#include "trellis/v1/job.pb.h"

namespace trellis::tools {

// The sequence lengths a job's data gives (the caller reads the data).
struct PlanWorkload {
  int64_t vocab_size = 0;
  // Longest prompt in tokens (BOS included).
  int64_t prompt_tokens = 0;
  // Longest SFT target in tokens (EOS included).
  int64_t answer_tokens = 0;
  // Held-out prompts the evaluation decodes (eval.num_prompts, or all).
  int64_t eval_prompts = 0;
  // Where the lengths came from, printed with the plan.
  std::string source;
};

struct PlanLine {
  std::string role;
  std::string object;  // ObjectName()
  int64_t bytes = 0;
  std::string formula;
};

// One stage's transient objects on top of every role's resident objects.
struct PlanStage {
  std::string role;
  std::string stage;  // StageName()
  std::vector<PlanLine> transient;
  // resident + transient.
  int64_t peak_bytes = 0;
};

// A pass's FLOP per token split by depth: one transformer layer's, and
// the part outside the layers (the LM head's matrix product), so the pass
// over a model of L layers costs outside + L x per_layer.
struct DepthFlops {
  double outside = 0;
  double per_layer = 0;
};

// Forward only (reference scoring, rollout prefill and decode): per layer
// 2 x its matmul parameters + 4·seq·d, outside 2·V·d.
DepthFlops ForwardDepthFlops(const v1::ModelConfig& model, int64_t vocab_size, int64_t seq);
// Forward and backward: per layer 6 x its matmul parameters + 12·seq·d,
// and with per-layer checkpointing the layer's forward once more (the
// head is not recomputed); outside 6·V·d.
DepthFlops TrainDepthFlops(const v1::ModelConfig& model, int64_t vocab_size, int64_t seq,
                           bool checkpointing);

// How fast one kind of pass runs here, measured by timing the job's model
// at two depths (tools/plan_job.cc): the seconds each more layer adds give
// the layers' rate; what is left at one layer (embedding, final norm, the
// LM head, log-softmax or sampling over the vocabulary, per-call dispatch)
// gives the rate outside them. Both are in FLOP/s of DepthFlops.
struct PassRate {
  double layer_flops_per_second = 0;
  double outside_flops_per_second = 0;
};

// Seconds of `tokens` tokens through a model of `layers` layers:
// tokens x (outside / outside rate + layers x per_layer / layer rate).
double PassSeconds(const PassRate& rate, const DepthFlops& flops, int64_t layers, double tokens);

// How fast this machine runs the job's work, measured before planning
// (tools/plan_job.cc). The roofline is a float32 matrix product of the
// learner's shape; the passes time the job's own model at each stage's
// shape: small matrices, elementwise work and per-operation overhead make
// them far lower than the roofline on small models.
struct MachineRates {
  double matmul_flops_per_second = 0;
  // Forward and backward of one update micro-batch.
  PassRate train;
  // A forward without autograd (reference scoring, rollout prefill).
  PassRate forward;
  // One decode step of every sample with its KV cache, and sampling.
  PassRate decode;
  // One optimizer step over the policy's trained parameters: the seconds
  // outside the layers plus per_layer x L.
  double optimizer_outside_seconds = 0;
  double optimizer_per_layer_seconds = 0;
  // The deeper cut timed (the other has 1 layer); printed with the rates.
  int32_t calibration_layers = 0;
};

struct PlanTime {
  std::string stage;
  double flops = 0;
  double seconds = 0;
  std::string formula;
};

// One CPU offload strategy priced (memory.offload_optimizer_state,
// memory.offload_frozen, deployment.placement colocated: docs/gpu.md): the
// device memory it frees between uses, the host memory it holds, and the
// bytes it moves per step (both directions).
struct PlanOffload {
  std::string strategy;  // the job field
  bool on = false;       // the job sets it
  int64_t device_bytes_saved = 0;
  int64_t host_bytes = 0;
  int64_t bytes_moved_per_step = 0;
  std::string formula;
};

struct Plan {
  // The policy's and the reference's shapes (the policy's unless a distill
  // teacher), with the workload's vocabulary.
  config::ModelShape shape, reference_shape;
  // Model size: parameters, and those that take part in matrix products
  // (every parameter but the embedding table and the norm scales).
  int64_t parameters = 0;
  int64_t matmul_parameters = 0;
  // A mixture of experts: the routers' and experts' parameters (in
  // `parameters`), of which a token's matrix products use k of E experts
  // (in `matmul_parameters`); 0 for a dense model.
  int64_t expert_parameters = 0;
  std::vector<PlanLine> resident;
  int64_t resident_bytes = 0;
  std::vector<PlanStage> stages;
  // The highest stage and its bytes: the process's expected peak.
  int64_t peak_bytes = 0;
  std::string peak_role, peak_stage;
  MachineRates rates;
  // Per GRPO step (or SFT step when the job has no RL steps).
  std::vector<PlanTime> step_time;
  double step_seconds = 0;
  // Each offload strategy, whether the job sets it or not.
  std::vector<PlanOffload> offload;
  std::vector<std::string> notes;
};

// Elements per token a forward without autograd holds at its largest
// (reference scoring, rollout prefill): one MLP's full expression (4·d_ff;
// a mixture's k experts k(4ef + 2d) and the router's 2E) with the residual
// stream and the norm's scratch (5.5d, measured) and the rotary tables
// (2·hd), or at the end the logits and log-softmax (2V + d).
int64_t NoGradPerToken(const config::ModelShape& s);

// REQUIRES: job validated; every rate > 0, the optimizer's seconds >= 0.
Plan MakePlan(const v1::JobConfig& job, const PlanWorkload& workload, const MachineRates& rates);

// The offload strategies of `job` priced from `plan`'s resident lines
// (tools/plan_offload.cc); MakePlan fills Plan::offload with it.
std::vector<PlanOffload> PriceOffload(const v1::JobConfig& job, const Plan& plan);

void PrintPlan(const Plan& plan, std::ostream& out);
nlohmann::json PlanJson(const Plan& plan);

}  // namespace trellis::tools

#endif  // TRELLIS_TOOLS_PLANNER_H_
