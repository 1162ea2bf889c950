"""deploy/k8s checked without a cluster (deploy/k8s/check_manifests.py):
the manifests as shipped pass, and each kind of mistake in a copy of them is
caught with a message that names it.

  TRELLIS_BINARY=build/trellis .venv/k8s/bin/python tests/deploy/k8s_manifests_test.py
"""

import os
import shutil
import sys
import tempfile
import unittest

import yaml

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MANIFESTS = os.path.join(REPO, "deploy", "k8s")
sys.path.insert(0, MANIFESTS)
import check_manifests  # noqa: E402

TRELLIS = os.environ["TRELLIS_BINARY"]


def container(doc):
    return doc["spec"]["template"]["spec"]["containers"][0]


def set_arg(doc, option, value):
    args = container(doc)["args"]
    args[args.index(option) + 1] = value


class ManifestsTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="trellis-k8s-")
        self.addCleanup(shutil.rmtree, self.dir)
        for f in os.listdir(MANIFESTS):
            if f.endswith(".yaml"):
                shutil.copy(os.path.join(MANIFESTS, f), self.dir)

    def edit(self, file, change):
        """Applies change(doc) to the first document of `file`."""
        path = os.path.join(self.dir, file)
        with open(path) as f:
            docs = list(yaml.safe_load_all(f))
        change(docs[0])
        with open(path, "w") as f:
            yaml.safe_dump_all(docs, f)

    def problems(self):
        return check_manifests.Checker(self.dir, TRELLIS, "1.30.0").run()

    def expect(self, needle):
        problems = self.problems()
        self.assertTrue(any(needle in p for p in problems),
                        f"expected a problem with {needle!r}, got {problems}")

    def test_shipped_manifests_pass(self):
        self.assertEqual(check_manifests.Checker(MANIFESTS, TRELLIS, "1.30.0").run(), [])

    def test_unknown_field_fails_the_schema(self):
        self.edit("scheduler.yaml",
                  lambda d: container(d).update({"imagePullPolicyy": "Always"}))
        self.expect("Kubernetes 1.30.0 schema")

    def test_wrong_type_fails_the_schema(self):
        self.edit("actor.yaml", lambda d: d["spec"].update({"replicas": "two"}))
        self.expect("Kubernetes 1.30.0 schema: spec.replicas")

    def test_replicas_must_be_the_jobs_count(self):
        self.edit("actor.yaml", lambda d: d["spec"].update({"replicas": 3}))
        self.expect("replicas 3, the job's deployment.actor.count is 2")

    def test_pool_must_be_the_node_selector(self):
        self.edit("learner.yaml", lambda d: d["spec"]["template"]["spec"]["nodeSelector"]
                  .update({"trellis.dev/pool": "rollout"}))
        self.expect("deployment.learner.pool is train")

    def test_gpus_must_be_the_jobs(self):
        self.edit("verifier.yaml", lambda d: container(d)["resources"]
                  .update({"limits": {"nvidia.com/gpu": 1}}))
        self.expect("nvidia.com/gpu limit 1, the job's deployment.verifier.gpus_per_worker is 0")

    def test_every_role_needs_a_statefulset(self):
        os.remove(os.path.join(self.dir, "reference.yaml"))
        self.edit("kustomization.yaml", lambda d: d["resources"].remove("reference.yaml"))
        self.expect("role reference: the job runs it, no StatefulSet does")

    def test_no_statefulset_for_a_role_the_job_does_not_run(self):
        # Without a KL penalty GRPO needs no reference (trellis place says so).
        self.edit("job-configmap.yaml", lambda d: d["data"].update(
            {"job.yaml": d["data"]["job.yaml"].replace("  steps: 300\n",
                                                       "  steps: 300\n  kl_coef: 0\n")}))
        self.expect("StatefulSet trellis-reference: runs reference, which the job does not")

    def test_every_manifest_is_listed(self):
        self.edit("kustomization.yaml", lambda d: d["resources"].remove("verifier.yaml"))
        self.expect("resources does not list verifier.yaml")

    def test_the_job_must_be_valid(self):
        self.edit("job-configmap.yaml", lambda d: d["data"].update(
            {"job.yaml": d["data"]["job.yaml"].replace("prompts_per_step", "prompts_per_stp")}))
        self.expect("not a valid Trellis job")
        self.expect("did you mean prompts_per_step?")

    def test_listen_port_must_be_the_container_port(self):
        self.edit("actor.yaml", lambda d: set_arg(d, "--listen", "0.0.0.0:50052"))
        self.expect("--listen 0.0.0.0:50052: the container's port grpc is 50051")

    def test_every_process_reads_the_jobs_secret(self):
        def drop_secret(d):
            args = container(d)["args"]
            del args[args.index("--secret-file"):args.index("--secret-file") + 2]
        self.edit("actor.yaml", drop_secret)
        self.expect("--secret-file None: not job-secret of the trellis-credentials Secret")

    def test_the_secret_is_mounted_for_its_owner_alone(self):
        def open_mode(d):
            for v in d["spec"]["template"]["spec"]["volumes"]:
                if "secret" in v:
                    v["secret"]["defaultMode"] = 0o444
        self.edit("scheduler.yaml", open_mode)
        self.expect("defaultMode 444 lets others read the job's secret")

    def test_wildcard_listen_needs_advertise(self):
        def drop_advertise(d):
            args = container(d)["args"]
            del args[args.index("--advertise"):args.index("--advertise") + 2]
        self.edit("verifier.yaml", drop_advertise)
        self.expect("without --advertise")

    def test_transport_port_must_be_the_headless_services(self):
        def move(d):
            set_arg(d, "--transport-port", "29501")
            for p in container(d)["ports"]:
                if p["name"] == "weights":
                    p["containerPort"] = 29501
        self.edit("learner.yaml", move)
        self.expect("--transport-port 29501, the headless Service's weights port is 29500")

    def test_workers_dial_the_scheduler_service(self):
        self.edit("actor.yaml", lambda d: set_arg(d, "--scheduler", "scheduler:50051"))
        self.expect("--scheduler scheduler:50051, the scheduler's Service is trellis-scheduler:50051")

    def test_learner_shares_the_run_directory(self):
        def unmount(d):
            c = container(d)
            c["volumeMounts"] = [m for m in c["volumeMounts"] if m["name"] != "runs"]
            spec = d["spec"]["template"]["spec"]
            spec["volumes"] = [v for v in spec["volumes"] if v["name"] != "runs"]
        self.edit("learner.yaml", unmount)
        self.expect("does not mount the scheduler's run directory /runs/grpo-arithmetic")

    def test_volumes_name_objects_that_exist(self):
        os.remove(os.path.join(self.dir, "credentials-secret.yaml"))
        self.edit("kustomization.yaml",
                  lambda d: d["resources"].remove("credentials-secret.yaml"))
        self.expect("volume credentials: no Secret trellis-credentials")

    def test_prometheus_port_is_a_container_port(self):
        self.edit("actor.yaml", lambda d: d["spec"]["template"]["metadata"]["annotations"]
                  .update({"prometheus.io/port": "9191"}))
        self.expect("prometheus.io/port 9191 is none of the container's ports")

    def test_service_targets_a_container_port(self):
        self.edit("scheduler.yaml", lambda d: d["spec"]["template"]["spec"]["containers"][0]
                  ["ports"].pop())
        self.expect("Service trellis-scheduler: port http: no pod it selects has port http")


if __name__ == "__main__":
    unittest.main()
