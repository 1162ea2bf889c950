#!/usr/bin/env python3
"""Fails when a Trellis library links one of a higher layer, or a core
library links gRPC (directly or through another library).

    check_layers.py SOURCE_DIR WORK_DIR

Configures SOURCE_DIR afresh in WORK_DIR with `cmake --graphviz` (no build)
and reads the target graph it writes; LibTorch is found through the
CMAKE_PREFIX_PATH environment variable (':'-separated), as
`CMAKE_PREFIX_PATH=$(scripts/torch_venv.sh | tr ';' :)` gives it. The layers are LAYERS below, lowest
first; a library may link libraries of its own layer or lower ones. Every
trellis_* library must be listed, so a new library is placed on purpose.
docs/architecture.md explains the layers.
"""
import os
import re
import subprocess
import sys

LAYERS = [
    # 0: generated messages and leaf utilities.
    ["trellis_proto", "trellis_torch_pch", "trellis_env", "trellis_env_testing", "trellis_prometheus",
     "trellis_recipe", "trellis_choice", "trellis_printable", "trellis_worker_id", "trellis_jinja"],
    # 1: configuration, models, tokenizers, chat templates, data.
    ["trellis_config", "trellis_test_main", "trellis_request_limits", "trellis_model", "trellis_shard_layout", "trellis_text", "trellis_chat", "trellis_data"],
    # 2: the ledger and its metric sinks, the process-group plumbing, plugin processes.
    ["trellis_process_memory", "trellis_heap_hook", "trellis_ledger", "trellis_ledger_cuda", "trellis_observe", "trellis_comm", "trellis_plugin"],
    # 3: weight transports that need no gRPC.
    ["trellis_weightsync", "trellis_weightsync_reshard"],
    # 4: the roles' engines.
    ["trellis_verifier", "trellis_environment", "trellis_actor", "trellis_reference", "trellis_learner"],
    # 5: recipes and the loop that drives the roles.
    ["trellis_loop"],
    # 6: the local role factories.
    ["trellis_roles"],
    # 7: a run's lifecycle: job runner, embedded and default jobs.
    ["trellis_run"],
    # 8: gRPC: helpers, generated stubs, the roles as services.
    ["trellis_proto_grpc", "trellis_rpc", "trellis_weightsync_grpc", "trellis_weightsync_nccl",
     "trellis_weightsync_cuda_ipc",
     "trellis_verifier_service", "trellis_environment_service", "trellis_actor_service",
     "trellis_learner_service", "trellis_reference_service"],
    # 9: the dashboard and its server.
    ["trellis_web_page", "trellis_web_server"],
    # 10: the control plane.
    ["trellis_concurrency_controller", "trellis_scheduler", "trellis_scheduler_service"],
    # 11: tools that measure and explain jobs.
    ["trellis_tools"],
    # 12: process bootstrap.
    ["trellis_launch", "trellis_ledger_forwarder"],
]
# Libraries that must not link gRPC at all.
CORE = ["trellis_model", "trellis_shard_layout", "trellis_text", "trellis_data", "trellis_config", "trellis_request_limits", "trellis_process_memory", "trellis_heap_hook", "trellis_ledger", "trellis_ledger_cuda", "trellis_observe", "trellis_learner",
        "trellis_actor", "trellis_reference", "trellis_verifier", "trellis_loop", "trellis_roles",
        "trellis_run", "trellis_env", "trellis_comm", "trellis_weightsync",
        "trellis_weightsync_reshard", "trellis_jinja", "trellis_chat"]
GRPC = re.compile(r"^(gRPC::|grpc|trellis_proto_grpc$|trellis_rpc$)")


def target_graph(source_dir, work_dir):
    os.makedirs(work_dir, exist_ok=True)
    dot = os.path.join(work_dir, "targets.dot")
    subprocess.run(["cmake", "-S", source_dir, "-B", os.path.join(work_dir, "build"),
                    "-G", "Ninja", "-DTRELLIS_BUILD_TESTS=OFF", f"--graphviz={dot}"],
                   check=True, stdout=subprocess.DEVNULL)
    text = open(dot).read()
    # A node's label is "NAME" or "NAME\n(ALIAS)"; libraries of our own are
    # drawn as octagons (static), executables as eggs.
    names, libraries = {}, set()
    for node, label, shape in re.findall(
            r'"(node\d+)"\s*\[\s*label\s*=\s*"((?:[^"\\]|\\.)*)",\s*shape\s*=\s*(\w+)', text):
        names[node] = label.split("\\n")[0]
        if shape == "octagon" and names[node].startswith("trellis_"):
            libraries.add(names[node])
    edges = {}
    for a, b in re.findall(r'"(node\d+)"\s*->\s*"(node\d+)"', text):
        edges.setdefault(names[a], set()).add(names[b])
    return libraries, edges


def check(libraries, edges):
    layer = {t: i for i, ts in enumerate(LAYERS) for t in ts}
    errors = []
    for lib in sorted(libraries - set(layer)):
        errors.append(f"{lib}: not placed in a layer (tests/layering/check_layers.py LAYERS)")
    for lib, deps in sorted(edges.items()):
        if lib not in layer:
            continue
        for dep in sorted(deps):
            if dep in layer and layer[dep] > layer[lib]:
                errors.append(f"{lib} (layer {layer[lib]}) links {dep} (layer {layer[dep]}), "
                              "a higher layer")
    for lib in CORE:
        seen, stack = set(), [lib]
        while stack:
            cur = stack.pop()
            for dep in edges.get(cur, ()):
                if GRPC.match(dep):
                    errors.append(f"{lib} is a core library but links gRPC ({cur} -> {dep})")
                    stack.clear()
                    break
                if dep not in seen:
                    seen.add(dep)
                    stack.append(dep)
    return errors


def main():
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    libraries, edges = target_graph(sys.argv[1], sys.argv[2])
    errors = check(libraries, edges)
    placed = [t for ts in LAYERS for t in ts if t in libraries]
    for e in errors:
        print("layering:", e)
    print(f"layering: {len(placed)} libraries in {len(LAYERS)} layers, {len(errors)} violations")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
