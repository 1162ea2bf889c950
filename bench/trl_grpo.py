"""TRL's GRPOTrainer on the job of examples/jobs/smollm2_grpo_lora.yaml.

The Python side of bench/trl_side_by_side.sh: the same model directory
(SmolLM2-135M-Instruct as scripts/real_model.sh makes it), the same chat
prompts (each line's `messages` through the model's chat template with the
generation prompt, as Trellis renders them), the same reward (Trellis's
`math` verifier: the last \\boxed{} or else the last number of the reply,
equal to the answer; 1 right, 0 wrong or unparseable) and the same
hyperparameters as `trellis resolve` gives for that job:

  4 prompts x 4 responses a step, one micro-batch of 16, one optimizer
  update a step (num_iterations 1), max 16 new tokens, temperature 0.7,
  top_p 1, no top-k; advantages (reward - group mean) / group std; PPO clip
  0.2; k3 KL to the reference (the base: adapters off) with coefficient 0.01
  in the loss; token-mean loss over the batch (TRL's `dapo`: the batch's
  active tokens); AdamW lr 5e-4, betas (0.9, 0.99), eps 1e-8, weight decay
  0.01, gradient norm clipped to 1; the learning rate lr * min(1, (k+1)/2)
  at update k, Trellis's warm-up (a LambdaLR: transformers' own warm-up
  schedules start from 0); LoRA rank 8, alpha 16 on q/k/v/o_proj, no
  dropout; float32, no gradient checkpointing; 2 intra-op threads (--threads)
  and 2 inter-op threads; no eval, no checkpoints.

What cannot match, and why:
  - Which prompts a step draws: TRL's sampler shuffles the file with its own
    generator (seed 1), Trellis's prompt stream with its own; the prompts
    are the same kind (chat questions of 2-digit sums), not the same lines.
  - The random numbers: LoRA's A starts random in both (PEFT's Kaiming
    uniform, Trellis's own draw) and sampling draws other tokens, so the
    replies, and so their lengths, differ. Both stop at <|im_end|> or 16
    tokens; the table prints the mean reply length of each side.
  - The group std: TRL divides by the sample std (n - 1) plus 1e-4,
    Trellis by the population std (n) plus its eps
    (learner/advantages.cc); this moves advantages, not time.
  - Generation: TRL calls transformers' generate (a dynamic KV cache, the
    batch left-padded); Trellis its own sampler with a KV cache. This is
    part of what is measured.
  - Threads: Trellis sets OMP_WAIT_POLICY=PASSIVE in its own process
    (docs/threads.md) and its thread probe may keep 1 of the 2 intra-op
    threads (the ledger's machine record says); bench/trl_side_by_side.sh
    runs this script with OMP_WAIT_POLICY=PASSIVE too, and --threads 1
    gives TRL the one thread.
  - Step time: seconds between the ends of consecutive optimizer steps
    (the first from the start of training), which takes in generation,
    reward, reference and policy passes, and the update, like Trellis's
    step_seconds (BeginStep to EndStep). Within it, the seconds of
    `_generate` (rollout) and of `_generate_and_score_completions` less
    those (the reference's log-probs and the rewards); the rest is the
    policy's forward and backward pass, the optimizer step and logging.

  bench/trl_grpo.py --model DIR --data JSONL --steps N [--threads N] [--json FILE]
(run in the environment scripts/trl_venv.sh makes; HF_HUB_OFFLINE=1).
"""

import argparse
import json
import math
import os
import re
import statistics
import tempfile
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402
from datasets import Dataset  # noqa: E402
from peft import LoraConfig  # noqa: E402
from torch.optim.lr_scheduler import LambdaLR  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback  # noqa: E402
from trl import GRPOConfig, GRPOTrainer  # noqa: E402

# Trellis's job (examples/jobs/smollm2_grpo_lora.yaml, resolved).
PROMPTS_PER_STEP = 4
RESPONSES_PER_PROMPT = 4
MAX_NEW_TOKENS = 16
TEMPERATURE = 0.7
LR = 5e-4
WARMUP_STEPS = 2
KL_COEF = 0.01
CLIP_EPS = 0.2
LORA = dict(r=8, lora_alpha=16, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"])
THREADS = 2
SEED = 1


# --- Trellis's `math` verifier (verifier/answers.cc), tolerance 0. ---

def last_boxed(s):
    """The content of the last complete \\boxed{...} (nested braces allowed)."""
    found, start = None, 0
    while True:
        at = s.find("\\boxed{", start)
        if at < 0:
            return found
        open_at = at + 7
        depth, i = 1, open_at
        while i < len(s) and depth > 0:
            depth += {"{": 1, "}": -1}.get(s[i], 0)
            i += 1
        if depth == 0:
            found = s[open_at:i - 1]
        start = open_at


def last_number(s):
    """The last -?\\d+(,\\d{3})*(\\.\\d+)? of s, thousands commas removed."""
    found, i = None, 0
    while i < len(s):
        if not s[i].isascii() or not s[i].isdigit():
            i += 1
            continue
        number = "-" if i > 0 and s[i - 1] == "-" else ""
        while i < len(s):
            c = s[i]
            if c.isascii() and c.isdigit():
                number += c
                i += 1
            elif (c == "," and i + 3 < len(s) and s[i + 1:i + 4].isdigit() and s[i + 1:i + 4].isascii()
                  and (i + 4 == len(s) or not (s[i + 4].isascii() and s[i + 4].isdigit()))):
                i += 1
            elif c == "." and i + 1 < len(s) and s[i + 1].isascii() and s[i + 1].isdigit() and "." not in number:
                number += c
                i += 1
            else:
                break
        found = number
    return found


def _atod(text):
    """absl::SimpleAtod: a float, surrounding whitespace allowed; None if not one."""
    try:
        return float(text.strip())
    except ValueError:
        return None


def parse_math_number(text):
    """"-3", "2.5", "1,000", "3/4", "\\frac{3}{4}", "50\\%", possibly inside $...$."""
    s = text
    for old, new in [("$", ""), ("\\!", ""), ("\\,", ""), (" ", ""), ("\\%", ""), ("%", ""),
                     ("\\dfrac", "\\frac"), ("\\tfrac", "\\frac")]:
        s = s.replace(old, new)
    v = s.strip(" \t\n\v\f\r")
    sign = 1.0
    if v.startswith("-"):
        sign, v = -1.0, v[1:]
    if v.startswith("\\frac{"):
        v = v[6:]
        mid = v.find("}{")
        if mid < 0 or not v.endswith("}"):
            return None
        a, b = _atod(v[:mid]), _atod(v[mid + 2:len(v) - 1])
        return None if a is None or b is None or b == 0 else sign * a / b
    plain = v.replace(",", "")
    if "/" in plain:
        num, den = plain.split("/", 1)
        a, b = _atod(num), _atod(den)
        return None if a is None or b is None or b == 0 else sign * a / b
    if not plain or re.search(r"[^0-9.]", plain):
        return None
    a = _atod(plain)
    return None if a is None else sign * a


def canonical(s):
    return "".join(c for c in s if not c.isspace() and c != "$")


def math_reward(response, answer):
    got = last_boxed(response)
    if got is None:
        got = last_number(response)
    if got is None:
        return 0.0  # unparseable
    boxed_answer = last_boxed(answer)
    want = boxed_answer if boxed_answer is not None else answer
    got_v, want_v = parse_math_number(got), parse_math_number(want)
    if got_v is not None and want_v is not None:
        correct = abs(got_v - want_v) <= 0 or got_v == want_v
    else:
        correct = canonical(got) == canonical(want)
    return 1.0 if correct else 0.0


def reward_math(completions, answer, **_):
    texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
    return [math_reward(t, str(a)) for t, a in zip(texts, answer)]


# --- Timing. ---

class StepClock(TrainerCallback):
    """Seconds from one optimizer step's end to the next's (the first from
    the start of training), and the logged reward and reply length."""

    def __init__(self):
        self.seconds, self.logs, self.stages, self._last = [], [], [], None
        self.open = {"generate": 0.0, "generate_and_score": 0.0}

    def on_train_begin(self, args, state, control, **kwargs):
        self._last = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        now = time.perf_counter()
        step = now - self._last
        self.seconds.append(step)
        self._last = now
        g, gs = self.open["generate"], self.open["generate_and_score"]
        self.stages.append({"rollout": g, "reference_and_reward": gs - g, "update_and_rest": step - gs})
        self.open = {"generate": 0.0, "generate_and_score": 0.0}

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and "reward" in logs:
            self.logs.append(dict(logs))
        # Logging runs inside the step, before on_step_end: it is counted.


class TrellisWarmupGRPOTrainer(GRPOTrainer):
    """Trellis's warm-up: lr * min(1, (k + 1) / warmup) at update k; and the
    seconds of generation (`_generate`) and of generation with the
    reference's log-probs and the rewards (`_generate_and_score_completions`)
    added to `clock`."""

    clock = None

    def _timed(self, name, method, *args, **kwargs):
        start = time.perf_counter()
        try:
            return method(*args, **kwargs)
        finally:
            self.clock.open[name] += time.perf_counter() - start

    def _generate(self, prompts):
        return self._timed("generate", super()._generate, prompts)

    def _generate_and_score_completions(self, inputs):
        return self._timed("generate_and_score", super()._generate_and_score_completions, inputs)

    def create_scheduler(self, num_training_steps, optimizer=None):
        if self.lr_scheduler is None:
            self.lr_scheduler = LambdaLR(
                optimizer if optimizer is not None else self.optimizer,
                lambda k: min(1.0, (k + 1) / WARMUP_STEPS) if WARMUP_STEPS > 0 else 1.0)
        return self.lr_scheduler


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", required=True, help="Hugging Face model directory")
    p.add_argument("--data", required=True, help="JSON lines of {messages, answer}")
    p.add_argument("--steps", type=int, required=True)
    p.add_argument("--threads", type=int, default=THREADS,
                   help="intra-op threads (default 2, the job's runtime.num_threads)")
    p.add_argument("--json", help="write {step_seconds, stage_seconds, reward, completion_length, versions} here")
    a = p.parse_args()

    torch.set_num_threads(a.threads)
    torch.set_num_interop_threads(THREADS)
    torch.manual_seed(SEED)

    rows = []
    with open(a.data) as f:
        for line in f:
            if line.strip():
                item = json.loads(line)
                rows.append({"prompt": item["messages"], "answer": str(item["answer"])})
    dataset = Dataset.from_list(rows)

    tokenizer = AutoTokenizer.from_pretrained(a.model)
    model = AutoModelForCausalLM.from_pretrained(a.model, dtype=torch.float32)

    out = tempfile.mkdtemp(prefix="trl_grpo_")
    config = GRPOConfig(
        output_dir=out, max_steps=a.steps, seed=SEED, use_cpu=True, bf16=False, fp16=False,
        per_device_train_batch_size=PROMPTS_PER_STEP * RESPONSES_PER_PROMPT,
        gradient_accumulation_steps=1, num_generations=RESPONSES_PER_PROMPT, num_iterations=1,
        max_completion_length=MAX_NEW_TOKENS, temperature=TEMPERATURE, top_p=1.0, top_k=0,
        beta=KL_COEF, epsilon=CLIP_EPS, loss_type="dapo", scale_rewards="group",
        mask_truncated_completions=False,
        learning_rate=LR, adam_beta1=0.9, adam_beta2=0.99, adam_epsilon=1e-8, weight_decay=0.01,
        max_grad_norm=1.0, optim="adamw_torch",
        activation_checkpointing=False, disable_dropout=True, remove_unused_columns=False,
        logging_steps=1, report_to=[], save_strategy="no", eval_strategy="no",
        dataloader_num_workers=0, disable_tqdm=True)
    clock = StepClock()
    trainer = TrellisWarmupGRPOTrainer(
        model=model, processing_class=tokenizer, reward_funcs=[reward_math], args=config,
        train_dataset=dataset, peft_config=LoraConfig(lora_dropout=0.0, bias="none",
                                                      task_type="CAUSAL_LM", **LORA),
        callbacks=[clock])
    trainer.clock = clock
    trainer.train()

    import peft
    import transformers
    import trl
    reward = [float(l.get("reward", math.nan)) for l in clock.logs]
    length = [float(l.get("completions/mean_length", math.nan)) for l in clock.logs]
    for i, s in enumerate(clock.seconds):
        r = reward[i] if i < len(reward) else math.nan
        n = length[i] if i < len(length) else math.nan
        stages = "  ".join(f"{k} {v:.2f}" for k, v in clock.stages[i].items())
        print(f"trl step {i}: {s:.2f} s ({stages})  reward {r:.3f}  reply tokens {n:.1f}", flush=True)
    later = clock.seconds[1:] or clock.seconds
    print(f"trl median step (steps after the first): {statistics.median(later):.2f} s")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"step_seconds": clock.seconds, "stage_seconds": clock.stages, "reward": reward, "completion_length": length,
                       "threads": torch.get_num_threads(),
                       "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", "(libgomp's default)"),
                       "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                                    "peft": peft.__version__, "trl": trl.__version__}}, f)


if __name__ == "__main__":
    main()
