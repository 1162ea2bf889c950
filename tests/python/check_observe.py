"""Reads a Trellis run's metrics back with the real tools (docs/observe.md).

  check_observe.py tensorboard RUN_DIR
      Every step record of RUN_DIR/ledger.jsonl has each of its numbers at
      its step in RUN_DIR/tensorboard/, read by TensorBoard's own
      EventAccumulator, and so does every eval record.
  check_observe.py serve PORT DIR
      Runs `mlflow server` on 127.0.0.1:PORT (a sqlite store in DIR) until
      killed; prints "ready" once it answers /health (120 s at most).
  check_observe.py mlflow URI EXPERIMENT RUN_DIR
      The experiment has one run, FINISHED, whose parameters are the job's
      (grpo.steps) and whose metric histories (MlflowClient) hold every step
      record's mean_reward, kl and loss of RUN_DIR/ledger.jsonl at its step,
      and the summary.

Runs in the virtual environment of scripts/observe_venv.sh; prints what it
checked and exits 0, or 1 naming what is missing.
"""
import json
import math
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request


def fail(message):
    print(f"FAIL: {message}", file=sys.stderr)
    sys.exit(1)


def records(run_dir, kind):
    with open(os.path.join(run_dir, "ledger.jsonl")) as f:
        return [r for r in map(json.loads, f) if r["type"] == kind]


def numbers(value, prefix, out):
    """The record's numbers as the run names them (ledger/record_scalars.h)."""
    for key, v in sorted(value.items()):
        tag = re.sub(r"[^A-Za-z0-9_./ -]", "_", prefix + key)
        if isinstance(v, dict):
            numbers(v, tag + "/", out)
        elif isinstance(v, bool):
            out[tag] = 1.0 if v else 0.0
        elif isinstance(v, (int, float)) and math.isfinite(v):
            out[tag] = float(v)
    return out


def close(a, b):
    return math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-6)


def check_tensorboard(run_dir):
    from tensorboard.backend.event_processing import event_accumulator

    logdir = os.path.join(run_dir, "tensorboard")
    files = [f for f in os.listdir(logdir) if f.startswith("events.out.tfevents.")]
    if len(files) != 1:
        fail(f"{logdir}: expected one event file, found {files}")
    acc = event_accumulator.EventAccumulator(logdir, size_guidance={event_accumulator.SCALARS: 0})
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    values = {t: {e.step: e.value for e in acc.Scalars(t)} for t in tags}
    steps = records(run_dir, "step")
    if not steps:
        fail(f"{run_dir}/ledger.jsonl has no step record")
    checked = 0
    for r in steps:
        want = numbers({k: v for k, v in r.items() if k not in ("type", "step", "time")}, "", {})
        for required in ("mean_reward", "kl", "loss", "effective_sample_rate",
                         "stage_seconds/rollout", "stage_seconds/update"):
            if required not in want:
                fail(f"step {r['step']}: the ledger has no {required}")
        for tag, value in want.items():
            got = values.get(tag, {}).get(r["step"])
            if got is None:
                fail(f"step {r['step']}: no {tag} in the event files")
            # simple_value is a float32.
            if not math.isclose(got, value, rel_tol=1e-6, abs_tol=1e-30):
                fail(f"step {r['step']}: {tag} is {got}, the ledger has {value}")
            checked += 1
        if not any(t.startswith("memory_peak_bytes/") and r["step"] in values[t] for t in tags):
            fail(f"step {r['step']}: no memory_peak_bytes/<role>")
    for r in records(run_dir, "eval"):
        if values.get("eval/accuracy", {}).get(r["step"] + 1) is None:
            fail(f"eval {r['label']}: no eval/accuracy at step {r['step'] + 1}")
    print(f"tensorboard: {len(steps)} steps, {checked} step scalars, {len(tags)} tags match "
          f"{run_dir}/ledger.jsonl")


def serve(port, directory):
    venv_bin = os.path.dirname(sys.executable)
    # The server's own process group (uvicorn is a child), ended with this
    # process; no job runner (its consumers are processes of their own).
    server = subprocess.Popen(
        [os.path.join(venv_bin, "mlflow"), "server", "--host", "127.0.0.1", "--port", port,
         "--workers", "1", "--backend-store-uri", f"sqlite:///{directory}/mlflow.db",
         "--default-artifact-root", os.path.join(directory, "artifacts")],
        stdout=open(os.path.join(directory, "server.log"), "w"), stderr=subprocess.STDOUT,
        env=dict(os.environ, MLFLOW_SERVER_ENABLE_JOB_EXECUTION="false"), start_new_session=True)

    def stop(*_):
        os.killpg(server.pid, signal.SIGKILL)
        sys.exit(0)

    signal.signal(signal.SIGTERM, stop)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if server.poll() is not None:
            os.killpg(server.pid, signal.SIGKILL)
            fail(f"mlflow server exited with {server.returncode}; see {directory}/server.log")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                if r.status == 200:
                    print("ready", flush=True)
                    server.wait()
                    return
        except OSError:
            time.sleep(0.5)
    os.killpg(server.pid, signal.SIGKILL)
    fail(f"mlflow server on port {port} did not answer /health within 120 s")


def check_mlflow(uri, experiment, run_dir):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    found = client.get_experiment_by_name(experiment)
    if found is None:
        fail(f"{uri}: no experiment {experiment!r}")
    runs = client.search_runs([found.experiment_id])
    if len(runs) != 1:
        fail(f"{uri}: expected one run in {experiment!r}, found {len(runs)}")
    run = runs[0]
    if run.info.status != "FINISHED":
        fail(f"run {run.info.run_id}: status {run.info.status}, expected FINISHED")
    import yaml

    with open(os.path.join(run_dir, "job.yaml")) as f:
        steps = yaml.safe_load(f)["grpo"]["steps"]
    if run.data.params.get("grpo.steps") != str(steps):
        fail(f"param grpo.steps is {run.data.params.get('grpo.steps')}, the job has {steps}")
    step_records = records(run_dir, "step")
    for key in ("mean_reward", "kl", "loss"):
        history = {m.step: m.value for m in client.get_metric_history(run.info.run_id, key)}
        for r in step_records:
            if r["step"] not in history or not close(history[r["step"]], r[key]):
                fail(f"metric {key} at step {r['step']}: {history.get(r['step'])}, "
                     f"the ledger has {r[key]}")
    if "summary/steps" not in run.data.metrics:
        fail("no summary/steps metric")
    print(f"mlflow: run {run.info.run_id} FINISHED with {len(run.data.params)} params, "
          f"{len(run.data.metrics)} metrics; mean_reward, kl, loss match all "
          f"{len(step_records)} steps")


def main(argv):
    if len(argv) >= 2 and argv[1] == "tensorboard" and len(argv) == 3:
        check_tensorboard(argv[2])
    elif len(argv) >= 2 and argv[1] == "serve" and len(argv) == 4:
        serve(argv[2], argv[3])
    elif len(argv) >= 2 and argv[1] == "mlflow" and len(argv) == 5:
        check_mlflow(argv[2], argv[3], argv[4])
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
