#ifndef TRELLIS_CLI_USAGE_H_
#define TRELLIS_CLI_USAGE_H_

// The text of `trellis --help` (cli/main.cc).

namespace trellis::cli {

inline constexpr char kUsage[] =
    "usage: trellis run [JOB.yaml] [--out DIR] [--seed N] [--override FILE]\n"
    "                   [--http HOST:PORT]\n"
    "       trellis run --resume RUN_DIR [--http HOST:PORT]\n"
    "       trellis launch [JOB.yaml] [--out DIR] [--seed N] [--override FILE]\n"
    "                      [--cluster CLUSTER.yaml] [--http HOST:PORT] [SECURITY]\n"
    "       trellis launch --resume RUN_DIR [--cluster CLUSTER.yaml] [--http HOST:PORT]\n"
    "                      [SECURITY]\n"
    "       trellis serve ROLE --scheduler HOST:PORT [--listen HOST:PORT]\n"
    "                          [--advertise HOST] [--index K] [--transport-port PORT]\n"
    "                          [--metrics HOST:PORT] SECURITY\n"
    "       trellis serve scheduler [--job JOB.yaml] [--out DIR] [--listen HOST:PORT]\n"
    "                               [--advertise HOST] [--address-file FILE]\n"
    "                               [--resume RUN_DIR] [--http HOST:PORT] SECURITY\n"
    "       trellis resolve [JOB.yaml] [--override FILE] [--seed N]\n"
    "       trellis place [JOB.yaml] [--cluster CLUSTER.yaml]\n"
    "       trellis verify --verifier NAME [--config KEY=VALUE ...] [--items] DATA.jsonl\n"
    "       trellis report RUN_DIR\n"
    "       trellis plan [JOB.yaml] [--json FILE]\n"
    "       trellis probe [JOB.yaml] --vary KEY=V1,V2,... [--steps N] [--role ROLE] [--out DIR]\n"
    "       trellis compare RUN_A RUN_B [...] [--tolerance X] [--budget X]\n"
    "  run     run a job with every role in this process; without JOB.yaml,\n"
    "          the built-in GRPO arithmetic job. Outputs go to --out (default:\n"
    "          the job's runtime.out_dir); --seed overrides runtime.seed, and\n"
    "          the fields of --override FILE replace the job's (as for resolve).\n"
    "          --resume continues the run in RUN_DIR (its job.yaml) from its\n"
    "          newest checkpoint (runtime.checkpoint_every) and writes there.\n"
    "  launch  the same job with the scheduler and every role (deployment.*.count\n"
    "          of each) a separate process on this host, placed on the pools of\n"
    "          --cluster (default: this host as the pool \"local\"); --resume\n"
    "          continues a launched run from its newest checkpoint.\n"
    "  SECURITY --secret-file FILE (or $TRELLIS_SECRET_FILE): the job's secret,\n"
    "          which every call must carry; launch makes one in OUT/launch/secret\n"
    "          when none is given. --insecure: no secret, anyone who reaches a\n"
    "          port may call (local experiments only).\n"
    "  serve   one service: ROLE is actor, learner, reference or verifier; the\n"
    "          scheduler serves the job given, or the first one submitted.\n"
    "          --listen HOST:PORT (default 127.0.0.1:0); across hosts listen on\n"
    "          0.0.0.0 and --advertise the name or address others dial. The\n"
    "          learner's --transport-port fixes its weight rendezvous port.\n"
    "  resolve validate a job and print it with every default filled in (the\n"
    "          job.yaml a run writes); without JOB.yaml, the built-in job. The\n"
    "          fields of --override FILE replace the job's (lists whole).\n"
    "  place   print where each worker goes on --cluster's pools (default: this\n"
    "          host): id, role, index, pool, node, host, GPUs, tab-separated.\n"
    "  verify  score samples with one verifier, no training.\n"
    "  report  write RUN_DIR/report.html: a finished run's dashboard in one file.\n"
    "  --http HOST:PORT   serve the live dashboard (/) and the job's Prometheus\n"
    "          metrics (/metrics) there; port 0 picks a free port, written to\n"
    "          OUT/http.addr. Without it, no HTTP server.\n"
    "  --metrics HOST:PORT   a worker's own Prometheus /metrics.\n"
    "  plan    memory per role and object, and step time, estimated before running.\n"
    "  probe   short runs per setting of KEY (micro_batch, seq_len, accumulation,\n"
    "          optimizer, strategy=none|checkpointing|bf16|lora, or a job field's\n"
    "          path); names the object whose peak moved.\n"
    "  compare baseline RUN_A against candidates side by side, with a verdict;\n"
    "          writes RUN_A/compare.md and compare.json.\n";

}  // namespace trellis::cli

#endif  // TRELLIS_CLI_USAGE_H_
