#!/usr/bin/python3
"""Checks running Trellis services from the outside, with protoc-generated stubs only.

  check_services.py [--stubs DIR] [--timeout S] [--verify ADDR ...]
                    [--probe JSON ...] [--expect VERDICT ...] [--secret-file FILE]
                    ADDR [ADDR ...]

For every ADDR (host:port):
  1. grpc.health.v1.Health/Check with service "" must answer SERVING (it is
     retried until --timeout seconds, default 30, have passed);
  2. the services it serves are listed through server reflection
     (grpc.reflection.v1alpha) where the server offers it, else by asking
     Health/Check about "trellis.v1.Verifier";
  3. every address serving trellis.v1.Verifier (and every --verify ADDR)
     gets one trellis.v1.Verifier/Verify call with the probe items (--probe
     '{"prompt": "1+1=", "response": "2", "answer": "2"}', repeatable;
     default: that one item): one result per item, each with a finite
     reward and a verdict; with --expect, the verdicts (names, in order).

Every call but Health's carries `authorization: Bearer <secret>` when a
secret file is given (--secret-file, default $TRELLIS_SECRET_FILE), as a
secured job's services require.

Prints one line per address and exits 0 when every check passed, 1 otherwise
(the failures on stderr), 2 for a usage error. The stubs come from --stubs or
$TRELLIS_PYTHON_STUBS (BUILD_DIR/python, CMake target trellis_python_stubs).
Run by /usr/bin/python3 (Debian's python3-grpcio and python3-protobuf).
"""
import argparse
import json
import math
import os
import sys
import time

import grpc

VERIFIER = "trellis.v1.Verifier"


def load_stubs(path):
    if not path or not os.path.isfile(os.path.join(path, "trellis", "v1", "services_pb2.py")):
        sys.exit(f"check_services: no generated stubs in {path!r}; pass --stubs BUILD_DIR/python "
                 "or set TRELLIS_PYTHON_STUBS")
    sys.path.insert(0, path)
    global health_pb2, health_pb2_grpc, reflection_pb2, reflection_pb2_grpc
    global rollout_pb2, services_pb2_grpc
    from grpc_health_v1 import health_pb2, health_pb2_grpc
    from grpc_reflection_v1alpha import reflection_pb2, reflection_pb2_grpc
    from trellis.v1 import rollout_pb2, services_pb2_grpc


def wait_serving(channel, deadline):
    """None when Health/Check("") says SERVING before `deadline`, else why not."""
    stub = health_pb2_grpc.HealthStub(channel)
    last = "no answer"
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return f"health: not SERVING before the deadline (last: {last})"
        try:
            reply = stub.Check(health_pb2.HealthCheckRequest(service=""),
                               timeout=min(left, 5.0), wait_for_ready=True)
            if reply.status == health_pb2.HealthCheckResponse.SERVING:
                return None
            last = health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)
        except grpc.RpcError as e:
            last = f"{e.code().name}: {e.details()}"
        time.sleep(0.2)


def list_services(channel, metadata):
    """Service names by reflection, or None when the server offers none."""
    stub = reflection_pb2_grpc.ServerReflectionStub(channel)
    request = reflection_pb2.ServerReflectionRequest(list_services="")
    try:
        for reply in stub.ServerReflectionInfo(iter([request]), timeout=5, metadata=metadata):
            return sorted(s.name for s in reply.list_services_response.service)
    except grpc.RpcError as e:
        if e.code() == grpc.StatusCode.UNIMPLEMENTED:
            return None
        raise
    return None


def serves_verifier(channel):
    stub = health_pb2_grpc.HealthStub(channel)
    try:
        reply = stub.Check(health_pb2.HealthCheckRequest(service=VERIFIER), timeout=5)
        return reply.status == health_pb2.HealthCheckResponse.SERVING
    except grpc.RpcError as e:
        if e.code() == grpc.StatusCode.NOT_FOUND:
            return False
        raise


def check_verify(channel, probes, expect, metadata):
    """(summary, problem): problem is None when the reply is well-formed."""
    request = rollout_pb2.VerifyRequest(items=[rollout_pb2.VerifyItem(**p) for p in probes])
    reply = services_pb2_grpc.VerifierStub(channel).Verify(request, timeout=30,
                                                           metadata=metadata)
    if len(reply.results) != len(probes):
        return "", f"Verify: {len(reply.results)} results for {len(probes)} items"
    names = []
    for i, r in enumerate(reply.results):
        if not math.isfinite(r.reward):
            return "", f"Verify: results[{i}].reward is {r.reward}"
        if r.verdict == rollout_pb2.VERDICT_UNSPECIFIED:
            return "", f"Verify: results[{i}].verdict is unset"
        names.append(rollout_pb2.Verdict.Name(r.verdict))
    summary = f"Verify: {len(probes)} items -> {', '.join(names)}"
    if expect and [e.upper() for e in expect] != names:
        return summary, f"Verify: expected verdicts {', '.join(expect)}, got {', '.join(names)}"
    return summary, None


def check(address, args, probes, metadata):
    """(line, problem) for one address."""
    deadline = time.monotonic() + args.timeout
    with grpc.insecure_channel(address) as channel:
        problem = wait_serving(channel, deadline)
        if problem:
            return f"{address}: {problem}", problem
        services = list_services(channel, metadata)
        if services is not None:
            verifier = VERIFIER in services
            parts = [f"SERVING; services: {', '.join(services)}"]
        else:
            verifier = serves_verifier(channel)
            parts = ["SERVING (no reflection)" + (f"; serves {VERIFIER}" if verifier else "")]
        if verifier or address in args.verify:
            summary, problem = check_verify(channel, probes, args.expect, metadata)
            parts += [x for x in (summary, problem) if x]
            if problem:
                return f"{address}: {'; '.join(parts)}", problem
        return f"{address}: {'; '.join(parts)}", None


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("addresses", nargs="*", metavar="ADDR")
    parser.add_argument("--stubs", default=os.environ.get("TRELLIS_PYTHON_STUBS"))
    parser.add_argument("--timeout", type=float, default=30.0,
                        help="seconds each address may take to report SERVING")
    parser.add_argument("--verify", action="append", default=[], metavar="ADDR",
                        help="call Verify on ADDR whatever it says it serves")
    parser.add_argument("--probe", action="append", default=[], metavar="JSON",
                        help='a Verify item, e.g. {"prompt": "1+1=", "response": "2", '
                             '"answer": "2"}')
    parser.add_argument("--expect", action="append", default=[], metavar="VERDICT",
                        help="expected verdict of each probe, in order")
    parser.add_argument("--secret-file", default=os.environ.get("TRELLIS_SECRET_FILE"),
                        help="the job's secret, sent with every call but Health's")
    args = parser.parse_args(argv)
    addresses = list(dict.fromkeys(args.addresses + args.verify))
    if not addresses:
        parser.error("no address to check")
    try:
        probes = [json.loads(p) for p in args.probe] or [
            {"prompt": "1+1=", "response": "2", "answer": "2"}]
        for p in probes:
            if not isinstance(p, dict) or set(p) - {"prompt", "response", "answer",
                                                    "metadata_json"}:
                raise ValueError(f"{p!r}: expected an object of prompt, response, answer")
    except ValueError as e:
        parser.error(f"--probe: {e}")
    if args.expect and len(args.expect) != len(probes):
        parser.error(f"--expect: {len(args.expect)} verdicts for {len(probes)} probes")
    load_stubs(args.stubs)
    metadata = []
    if args.secret_file:
        with open(args.secret_file, encoding="ascii") as f:
            metadata = [("authorization", "Bearer " + f.read().strip())]
    failed = False
    for address in addresses:
        try:
            line, problem = check(address, args, probes, metadata)
        except grpc.RpcError as e:
            line, problem = f"{address}: {e.code().name}: {e.details()}", "rpc failed"
        print(line, flush=True)
        if problem:
            failed = True
            print(f"check_services: {line}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
