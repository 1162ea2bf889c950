"""Checks deploy/k8s without a cluster.

  check_manifests.py [--dir DIR] [--trellis BINARY] [--kubernetes-version V]

1. Every resource that kustomization.yaml lists validates against the
   Kubernetes OpenAPI schemas of version V (strict: unknown fields are
   errors), offline, with the schemas kubernetes-validate bundles.
2. Our own rules: kustomization.yaml lists every manifest here; the job in
   the trellis-job ConfigMap is a valid Trellis job (`trellis resolve`);
   every role the job runs (`trellis place`) has a StatefulSet whose replicas, node selector
   (trellis.dev/pool) and nvidia.com/gpu limit are the job's count, pool and
   gpus_per_worker, and no StatefulSet runs a role the job does not; ports
   agree between arguments (--listen, --http, --metrics, --transport-port),
   container ports, Services and Prometheus annotations; workers dial the
   scheduler's Service; the learner and the scheduler share the run
   directory's volume; every ConfigMap, Secret and claim a pod uses exists;
   every Trellis process reads the job's secret (--secret-file: job-secret
   of the trellis-credentials Secret, mounted with a defaultMode only its
   owner may read).

Prints each problem and exits 1 if there is any. Runs on the venv that
scripts/setup.sh makes (.venv/k8s: kubernetes-validate, PyYAML).
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

import kubernetes_validate
import yaml

POOL_LABEL = "trellis.dev/pool"
GPU = "nvidia.com/gpu"
CREDENTIALS = "trellis-credentials"
SECRET_KEY = "job-secret"
ROLES = ("learner", "reference", "verifier", "actor")


# Memos: loading a schema or starting trellis takes a while, and checks of
# edited copies repeat most documents.
SCHEMA_VERDICTS = {}  # (version, document as JSON) -> schema_verdict
RESOLVED_JOBS = {}  # (trellis binary, job text) -> resolve


def resolve(trellis, job_text):
    """(the job as `trellis resolve` prints it, parsed, with "workers": role
    -> how many `trellis place` starts; None) or (None, why it is not a
    valid job). Placement runs on a cluster with a node per pool the job
    names, GPUs to spare, so that it says which roles the job runs (the
    reference only when the recipe needs one) and not whether they fit."""
    with tempfile.TemporaryDirectory() as d:
        job_file, cluster_file = os.path.join(d, "job.yaml"), os.path.join(d, "cluster.yaml")
        with open(job_file, "w") as f:
            f.write(job_text)
        resolved = subprocess.run([trellis, "resolve", job_file], capture_output=True, text=True)
        if resolved.returncode != 0:
            return None, resolved.stderr.strip()
        job = yaml.safe_load(resolved.stdout)
        pools = sorted({job["deployment"][r]["pool"] for r in ROLES})
        with open(cluster_file, "w") as f:
            yaml.safe_dump({"pools": [{"name": p, "nodes": [{"name": p, "gpus": 1024}]}
                                      for p in pools]}, f)
        placed = subprocess.run([trellis, "place", job_file, "--cluster", cluster_file],
                                capture_output=True, text=True)
        if placed.returncode != 0:
            return None, f"trellis place: {placed.stderr.strip()}"
    job["workers"] = {}
    for line in placed.stdout.splitlines()[1:]:
        role = line.split("\t")[1]
        job["workers"][role] = job["workers"].get(role, 0) + 1
    return job, None


def schema_verdict(doc, version):
    """None when `doc` validates against the Kubernetes `version` schemas
    (strict), else what is wrong."""
    try:
        kubernetes_validate.validate(doc, version, strict=True)
    except kubernetes_validate.ValidationError as e:
        path = ".".join(str(p) for p in e.path)
        return f"Kubernetes {version} schema: {path}: {e.message}"
    except (kubernetes_validate.SchemaNotFoundError, kubernetes_validate.InvalidSchemaError) as e:
        return f"no Kubernetes {version} schema: {e}"
    return None


def load(directory):
    """(kustomization, [(file, document)]) of the resources it lists."""
    with open(os.path.join(directory, "kustomization.yaml")) as f:
        kustomization = yaml.safe_load(f)
    documents = []
    for name in kustomization.get("resources", []):
        with open(os.path.join(directory, name)) as f:
            documents += [(name, d) for d in yaml.safe_load_all(f) if d is not None]
    return kustomization, documents


def flag(args, name):
    """The value after `name` in a container's args, or None."""
    return args[args.index(name) + 1] if name in args and args.index(name) + 1 < len(args) else None


def port_of(address):
    return int(address.rsplit(":", 1)[1])


def container_ports(pod):
    """name -> containerPort over every container of a pod spec."""
    return {p.get("name", str(p["containerPort"])): p["containerPort"]
            for c in pod["containers"] for p in c.get("ports", [])}


def selects(selector, labels):
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


class Checker:
    def __init__(self, directory, trellis, version):
        self.directory, self.trellis, self.version = directory, trellis, version
        self.problems = []

    def problem(self, where, message):
        self.problems.append(f"{where}: {message}")

    def run(self):
        kustomization, documents = load(self.directory)
        self.check_listed(kustomization)
        for file, doc in documents:
            self.check_schema(file, doc)
        by_kind = {}
        for file, doc in documents:
            by_kind.setdefault(doc.get("kind"), []).append(doc)
        self.docs = by_kind
        job = self.check_job()
        self.check_references()
        self.check_services()
        scheduler = self.check_scheduler()
        if job is not None and scheduler is not None:
            self.check_roles(job, scheduler)
        return self.problems

    def check_listed(self, kustomization):
        listed = set(kustomization.get("resources", []))
        present = {f for f in os.listdir(self.directory)
                   if f.endswith(".yaml") and f != "kustomization.yaml"}
        for f in sorted(present - listed):
            self.problem("kustomization.yaml", f"resources does not list {f}")
        for f in sorted(listed - present):
            self.problem("kustomization.yaml", f"resources lists {f}, which is not here")

    def check_schema(self, file, doc):
        where = f"{file}: {doc.get('kind')} {doc.get('metadata', {}).get('name')}"
        key = (self.version, json.dumps(doc, sort_keys=True))
        if key not in SCHEMA_VERDICTS:
            SCHEMA_VERDICTS[key] = schema_verdict(doc, self.version)
        if SCHEMA_VERDICTS[key] is not None:
            self.problem(where, SCHEMA_VERDICTS[key])

    def named(self, kind, name):
        return next((d for d in self.docs.get(kind, []) if d["metadata"]["name"] == name), None)

    def check_job(self):
        """The resolved job of the trellis-job ConfigMap (resolve), or None."""
        config_map = self.named("ConfigMap", "trellis-job")
        if config_map is None or "job.yaml" not in config_map.get("data", {}):
            self.problem("ConfigMap trellis-job", "missing, or without data.job.yaml")
            return None
        key = (self.trellis, config_map["data"]["job.yaml"])
        if key not in RESOLVED_JOBS:
            RESOLVED_JOBS[key] = resolve(*key)
        job, error = RESOLVED_JOBS[key]
        if error is not None:
            self.problem("ConfigMap trellis-job: job.yaml", f"not a valid Trellis job: {error}")
        return job

    def workloads(self):
        return self.docs.get("Deployment", []) + self.docs.get("StatefulSet", [])

    def check_references(self):
        """Volumes name ConfigMaps, Secrets and claims that are here; $(VAR)
        in args names an env var of the container."""
        for w in self.workloads():
            where = f"{w['kind']} {w['metadata']['name']}"
            pod = w["spec"]["template"]["spec"]
            for v in pod.get("volumes", []):
                for key, kind, field in (("configMap", "ConfigMap", "name"),
                                         ("secret", "Secret", "secretName"),
                                         ("persistentVolumeClaim", "PersistentVolumeClaim",
                                          "claimName")):
                    if key in v and self.named(kind, v[key][field]) is None:
                        self.problem(where, f"volume {v['name']}: no {kind} {v[key][field]}")
            for c in pod["containers"]:
                env = {e["name"] for e in c.get("env", [])}
                for a in c.get("args", []):
                    if a.startswith("$(") and a[2:-1] not in env:
                        self.problem(where, f"argument {a}: no env var {a[2:-1]}")

    def check_services(self):
        """Each Service selects a workload; each of its ports' targets is a
        container port of a pod it selects."""
        for s in self.docs.get("Service", []):
            where = f"Service {s['metadata']['name']}"
            pods = [w["spec"]["template"] for w in self.workloads()
                    if selects(s["spec"].get("selector"), w["spec"]["template"]["metadata"]["labels"])]
            if not pods:
                self.problem(where, "selects no pod template")
                continue
            for p in s["spec"]["ports"]:
                target = p.get("targetPort", p["port"])
                found = [container_ports(t["spec"]) for t in pods]
                if not any(target in ports or target in ports.values() for ports in found):
                    self.problem(where, f"port {p['name']}: no pod it selects has port {target}")

    def service_port(self, service, name):
        return next((p["port"] for p in service["spec"]["ports"] if p["name"] == name), None)

    def check_ports(self, where, container, annotations):
        """--listen, --http, --metrics, --transport-port against the
        container's ports, and the Prometheus annotation."""
        args = container.get("args", [])
        ports = {p.get("name"): p["containerPort"] for p in container.get("ports", [])}
        for option, name in (("--listen", "grpc"), ("--http", "http"), ("--metrics", "metrics"),
                             ("--transport-port", "weights")):
            value = flag(args, option)
            if value is None:
                continue
            port = int(value) if option == "--transport-port" else port_of(value)
            if ports.get(name) != port:
                self.problem(where, f"{option} {value}: the container's port {name} is "
                                    f"{ports.get(name)}")
        listen = flag(args, "--listen")
        if listen is not None and listen.startswith("0.0.0.0:") and flag(args, "--advertise") is None:
            self.problem(where, "--listen 0.0.0.0 without --advertise: nothing names this pod")
        scrape = annotations.get("prometheus.io/port")
        if scrape is not None and int(scrape) not in ports.values():
            self.problem(where, f"prometheus.io/port {scrape} is none of the container's ports")

    def check_secret(self, where, container, pod):
        """--secret-file names job-secret of the credentials Secret, mounted for its owner alone."""
        path = flag(container.get("args", []), "--secret-file")
        mounts = {m["name"]: m["mountPath"] for m in container.get("volumeMounts", [])}
        secrets = [v for v in pod.get("volumes", [])
                   if v.get("secret", {}).get("secretName") == CREDENTIALS
                   and path == f"{mounts.get(v['name'], chr(0))}/{SECRET_KEY}"]
        if not secrets:
            self.problem(where, f"--secret-file {path}: not {SECRET_KEY} of the {CREDENTIALS} "
                                "Secret mounted in the pod (every call must carry the job's secret)")
        elif secrets[0]["secret"].get("defaultMode", 0o644) & 0o077:
            self.problem(where, f"the {CREDENTIALS} volume's defaultMode "
                                f"{secrets[0]['secret'].get('defaultMode', 0o644):o} lets others "
                                "read the job's secret (trellis refuses it): use 0400")

    def check_scheduler(self):
        """The scheduler's Service and its address ("name:port"), or None."""
        deployments = [d for d in self.docs.get("Deployment", [])
                       if d["spec"]["template"]["spec"]["containers"][0].get("args", [])[:2]
                       == ["serve", "scheduler"]]
        if len(deployments) != 1:
            self.problem("Deployment", f"{len(deployments)} run `trellis serve scheduler`, expected 1")
            return None
        d = deployments[0]
        where = f"Deployment {d['metadata']['name']}"
        template = d["spec"]["template"]
        container = template["spec"]["containers"][0]
        if d["spec"].get("replicas", 1) != 1:
            self.problem(where, "replicas: a job has one scheduler")
        self.check_ports(where, container, template["metadata"].get("annotations", {}))
        self.check_secret(where, container, template["spec"])
        args = container["args"]
        mounts = {m["name"]: m["mountPath"] for m in container.get("volumeMounts", [])}
        volumes = {v["name"]: v for v in template["spec"].get("volumes", [])}
        job_path = flag(args, "--job")
        sources = [f"{mounts[n]}/{key}" for n, v in volumes.items() if n in mounts
                   and v.get("configMap", {}).get("name") == "trellis-job"
                   for key in ("job.yaml",)]
        if job_path not in sources:
            self.problem(where, f"--job {job_path}: not the trellis-job ConfigMap's job.yaml "
                                f"(mounted: {sources})")
        services = [s for s in self.docs.get("Service", [])
                    if selects(s["spec"].get("selector"), template["metadata"]["labels"])]
        if len(services) != 1 or self.service_port(services[0], "grpc") is None:
            self.problem(where, "needs one Service with a grpc port selecting it")
            return None
        self.scheduler_out = (flag(args, "--out"), mounts, volumes)
        return f"{services[0]['metadata']['name']}:{self.service_port(services[0], 'grpc')}"

    def check_roles(self, job, scheduler):
        wanted = {r: job["deployment"][r] for r in job["workers"]}
        running = {}
        for s in self.docs.get("StatefulSet", []):
            args = s["spec"]["template"]["spec"]["containers"][0].get("args", [])
            role = args[1] if args[:1] == ["serve"] and len(args) > 1 else None
            if role in running:
                self.problem(f"StatefulSet {s['metadata']['name']}",
                             f"a second StatefulSet for {role}")
            running[role] = s
        for role in sorted(set(running) - set(wanted)):
            self.problem(f"StatefulSet {running[role]['metadata']['name']}",
                         f"runs {role}, which the job does not")
        for role, d in sorted(wanted.items()):
            s = running.get(role)
            if s is None:
                self.problem(f"role {role}", "the job runs it, no StatefulSet does")
                continue
            self.check_role(role, d, s, scheduler)

    def check_role(self, role, d, s, scheduler):
        where = f"StatefulSet {s['metadata']['name']}"
        template = s["spec"]["template"]
        pod = template["spec"]
        container = pod["containers"][0]
        args = container["args"]
        if s["spec"].get("replicas", 1) != d["count"]:
            self.problem(where, f"replicas {s['spec'].get('replicas', 1)}, the job's "
                                f"deployment.{role}.count is {d['count']}")
        pool = pod.get("nodeSelector", {}).get(POOL_LABEL)
        if pool != d["pool"]:
            self.problem(where, f"nodeSelector {POOL_LABEL}: {pool}, the job's "
                                f"deployment.{role}.pool is {d['pool']}")
        resources = container.get("resources", {})
        gpus = int(resources.get("limits", {}).get(GPU, 0))
        if gpus != d["gpus_per_worker"]:
            self.problem(where, f"{GPU} limit {gpus}, the job's deployment.{role}.gpus_per_worker "
                                f"is {d['gpus_per_worker']}")
        if GPU in resources.get("requests", {}) and int(resources["requests"][GPU]) != gpus:
            self.problem(where, f"{GPU} request and limit differ")
        if flag(args, "--scheduler") != scheduler:
            self.problem(where, f"--scheduler {flag(args, '--scheduler')}, the scheduler's "
                                f"Service is {scheduler}")
        if flag(args, "--index") != "$(POD_INDEX)":
            self.problem(where, "--index must be the pod's ordinal, $(POD_INDEX)")
        governing = self.named("Service", s["spec"]["serviceName"])
        if governing is None or governing["spec"].get("clusterIP") != "None":
            self.problem(where, f"serviceName {s['spec']['serviceName']}: no headless Service")
        elif not selects(governing["spec"].get("selector"), template["metadata"]["labels"]):
            self.problem(where, f"its Service {s['spec']['serviceName']} does not select its pods")
        self.check_ports(where, container, template["metadata"].get("annotations", {}))
        self.check_secret(where, container, pod)
        if role == "learner":
            self.check_learner(where, container, pod, governing)

    def check_learner(self, where, container, pod, governing):
        port = flag(container["args"], "--transport-port")
        if port is None:
            self.problem(where, "no --transport-port: the weight rendezvous port is random")
        elif governing is not None and self.service_port(governing, "weights") != int(port):
            self.problem(where, f"--transport-port {port}, the headless Service's weights port "
                                f"is {self.service_port(governing, 'weights')}")
        # The learner writes weights and checkpoints into the run directory.
        out, scheduler_mounts, scheduler_volumes = self.scheduler_out
        mounts = {m["name"]: m["mountPath"] for m in container.get("volumeMounts", [])}
        claims = {v["persistentVolumeClaim"]["claimName"]: mounts.get(v["name"])
                  for v in pod.get("volumes", []) if "persistentVolumeClaim" in v}
        shared = [n for n, v in scheduler_volumes.items() if "persistentVolumeClaim" in v
                  and out.startswith(scheduler_mounts.get(n, "\0") + "/")
                  and claims.get(v["persistentVolumeClaim"]["claimName"]) == scheduler_mounts[n]]
        if not shared:
            self.problem(where, f"does not mount the scheduler's run directory {out} "
                                "(same claim, same path)")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", default=os.path.dirname(os.path.abspath(__file__)))
    parser.add_argument("--trellis", default="trellis")
    parser.add_argument("--kubernetes-version", default="1.30.0")
    a = parser.parse_args()
    problems = Checker(a.dir, a.trellis, a.kubernetes_version).run()
    for p in problems:
        print(p)
    if problems:
        return 1
    print(f"{a.dir}: every manifest valid for Kubernetes {a.kubernetes_version}; "
          "roles, pools, GPUs, ports and volumes agree with the job")
    return 0


if __name__ == "__main__":
    sys.exit(main())
