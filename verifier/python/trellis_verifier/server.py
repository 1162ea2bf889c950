"""Serves a Python scoring function as a trellis.v1.Verifier.

The protocol is docs/verifier-protocol.md. A scoring function takes
(prompt, response, answer), plus `metadata` (a dict) when it has a parameter
of that name or **kwargs, and returns one of:

  reward                      a number (or a bool: 1.0 / 0.0); verdict CORRECT
                              when > 0, else WRONG
  (reward, verdict)           verdict: "correct", "wrong", "unparseable",
                              "error" (any case), a bool (True: CORRECT) or a
                              trellis.v1.Verdict value
  (reward, verdict, detail)   detail: a human-readable reason

An exception, a non-finite reward or a return value of another shape gives
that item verdict ERROR (reward `error_reward`) with the reason as detail;
the server keeps serving.
"""
import argparse
import inspect
import json
import math
import signal
import sys
import threading
from concurrent import futures

import grpc

from . import _stubs
from .auth import SecretInterceptor, read_secret

_pb = _stubs.load()
rollout_pb2 = _pb.rollout_pb2
health_pb2 = _pb.health_pb2

VERIFIER_SERVICE = "trellis.v1.Verifier"
_VERDICTS = {
    "correct": rollout_pb2.CORRECT,
    "wrong": rollout_pb2.WRONG,
    "unparseable": rollout_pb2.UNPARSEABLE,
    "error": rollout_pb2.ERROR,
}
_FLOAT_MAX = 3.4028234663852886e38
# Same limits and keepalive tolerance as Trellis' C++ servers (rpc/server.h).
_SERVER_OPTIONS = [
    ("grpc.max_receive_message_length", 256 << 20),
    ("grpc.max_send_message_length", 256 << 20),
    ("grpc.keepalive_time_ms", 10000),
    ("grpc.keepalive_timeout_ms", 5000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.min_ping_interval_without_data_ms", 5000),
    ("grpc.http2.max_ping_strikes", 0),
]


def verifier(name, version="0"):
    """Decorator recording a scoring function's name and version for run()."""
    def wrap(fn):
        fn.trellis_name = name
        fn.trellis_version = version
        return fn
    return wrap


def _takes_metadata(fn):
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == "metadata" or p.kind == p.VAR_KEYWORD for p in params)


def _short(text, limit=200):
    text = str(text)
    return text if len(text) <= limit else text[:limit] + "..."


class _Scorer:
    """Turns one VerifyItem into one VerifyResult with the user's function."""

    def __init__(self, fn, label, error_reward):
        self.fn = fn
        self.label = label
        self.error_reward = float(error_reward)
        self.metadata = _takes_metadata(fn)

    def error(self, detail):
        return rollout_pb2.VerifyResult(reward=self.error_reward, verdict=rollout_pb2.ERROR,
                                        detail=detail, verifier=self.label)

    def score(self, index, item):
        kwargs = {}
        if self.metadata:
            try:
                meta = json.loads(item.metadata_json) if item.metadata_json else {}
            except ValueError as e:
                return self.error(f"items[{index}].metadata_json: not valid JSON: {e}")
            if not isinstance(meta, dict):
                return self.error(f"items[{index}].metadata_json: not a JSON object")
            kwargs["metadata"] = meta
        try:
            out = self.fn(item.prompt, item.response, item.answer, **kwargs)
        except Exception as e:  # one bad item must not fail the batch
            return self.error(f"score raised {type(e).__name__}: {_short(e)}")
        return self.convert(out)

    def convert(self, out):
        detail = ""
        verdict = None
        if isinstance(out, tuple):
            if len(out) not in (2, 3):
                return self.error(f"score returned a tuple of {len(out)} values; expected "
                                  "(reward, verdict) or (reward, verdict, detail)")
            reward, verdict = out[0], out[1]
            if len(out) == 3:
                detail = "" if out[2] is None else str(out[2])
        else:
            reward = out
        try:
            if reward is None or isinstance(reward, (str, bytes)):
                raise TypeError
            reward = float(reward)  # int, bool (True: 1.0), numpy scalars
        except (TypeError, ValueError, OverflowError):
            return self.error(f"score returned reward {_short(repr(reward), 60)} of type "
                              f"{type(reward).__name__}; expected a number")
        if not math.isfinite(reward) or abs(reward) > _FLOAT_MAX:
            return self.error(f"score returned a non-finite reward {reward}")
        if verdict is None:
            code = rollout_pb2.CORRECT if reward > 0 else rollout_pb2.WRONG
        elif isinstance(verdict, bool):
            code = rollout_pb2.CORRECT if verdict else rollout_pb2.WRONG
        elif isinstance(verdict, str) and verdict.lower() in _VERDICTS:
            code = _VERDICTS[verdict.lower()]
        elif isinstance(verdict, int) and verdict in _VERDICTS.values():
            code = verdict
        else:
            return self.error(f"score returned verdict {_short(repr(verdict), 60)}; expected "
                              "correct, wrong, unparseable or error")
        return rollout_pb2.VerifyResult(reward=reward, verdict=code, detail=detail,
                                        verifier=self.label)


class _VerifierServicer(_pb.services_pb2_grpc.VerifierServicer):
    def __init__(self, scorer, max_items):
        self.scorer = scorer
        self.max_items = max_items

    def Verify(self, request, context):
        n = len(request.items)
        if self.max_items and n > self.max_items:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                          f"items: {n} items in one request; this verifier accepts at most "
                          f"{self.max_items} (split the batch)")
        results = []
        for i, item in enumerate(request.items):
            if not context.is_active():  # the caller gave up (deadline passed)
                break
            results.append(self.scorer.score(i, item))
        return rollout_pb2.VerifyResponse(results=results)


class _HealthServicer(_pb.health_pb2_grpc.HealthServicer):
    """grpc.health.v1: "" and trellis.v1.Verifier are SERVING until stop()."""

    def __init__(self):
        self.stopping = threading.Event()

    def _status(self, service, context):
        if service not in ("", VERIFIER_SERVICE):
            return None
        if self.stopping.is_set():
            return health_pb2.HealthCheckResponse.NOT_SERVING
        return health_pb2.HealthCheckResponse.SERVING

    def Check(self, request, context):
        status = self._status(request.service, context)
        if status is None:
            context.abort(grpc.StatusCode.NOT_FOUND, f"unknown service {request.service!r}")
        return health_pb2.HealthCheckResponse(status=status)

    def Watch(self, request, context):
        status = self._status(request.service, context)
        if status is None:
            status = health_pb2.HealthCheckResponse.SERVICE_UNKNOWN
        yield health_pb2.HealthCheckResponse(status=status)
        while context.is_active() and not self.stopping.wait(1.0):
            pass
        if context.is_active() and status != health_pb2.HealthCheckResponse.SERVICE_UNKNOWN:
            yield health_pb2.HealthCheckResponse(
                status=health_pb2.HealthCheckResponse.NOT_SERVING)


class VerifierServer:
    """A running verifier: .port, .address, .label; stop() and wait()."""

    def __init__(self, server, health, host, port, label):
        self._server = server
        self._health = health
        self.port = port
        self.address = f"{host}:{port}"
        self.label = label

    def stop(self, grace=2.0):
        """Reports NOT_SERVING, then stops; calls in flight get `grace` seconds."""
        self._health.stopping.set()
        self._server.stop(grace).wait()

    def wait(self):
        self._server.wait_for_termination()


def start(score, name=None, version=None, host="127.0.0.1", port=0, max_workers=4,
          error_reward=0.0, max_items=1 << 16, secret_file=None):
    """Starts serving `score`; returns a VerifierServer (port 0 picks a free port).

    With a secret (the file `secret_file`, else $TRELLIS_SECRET_FILE) every
    Verify call must carry it (trellis_verifier.auth); without one it serves
    anyone who reaches the port, and says so on stderr.
    """
    name = name or getattr(score, "trellis_name", None) or getattr(score, "__name__", "verifier")
    version = str(version or getattr(score, "trellis_version", "0"))
    label = f"{name}@{version}"
    secret = read_secret(secret_file)
    if secret is None:
        print("trellis_verifier: no secret (TRELLIS_SECRET_FILE unset): serving anyone who "
              "reaches the port", file=sys.stderr, flush=True)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=max_workers),
                         options=_SERVER_OPTIONS,
                         interceptors=[SecretInterceptor(secret)] if secret else [])
    _pb.services_pb2_grpc.add_VerifierServicer_to_server(
        _VerifierServicer(_Scorer(score, label, error_reward), max_items), server)
    health = _HealthServicer()
    _pb.health_pb2_grpc.add_HealthServicer_to_server(health, server)
    bound = server.add_insecure_port(f"{host}:{port}")
    if bound == 0:
        raise RuntimeError(f"trellis_verifier: cannot listen on {host}:{port}")
    server.start()
    return VerifierServer(server, health, host, bound, label)


def serve(score, name=None, version=None, host="127.0.0.1", port=0, **options):
    """Serves `score` until SIGTERM or SIGINT; returns the port it was bound to.

    Prints one line, "trellis_verifier: serving NAME@VERSION on HOST:PORT",
    on stdout (flushed) as soon as it accepts calls.
    """
    done = threading.Event()

    def on_signal(signum, frame):
        done.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, on_signal)
    running = start(score, name=name, version=version, host=host, port=port, **options)
    print(f"trellis_verifier: serving {running.label} on {running.address}", flush=True)
    while not done.wait(3600):
        pass
    running.stop()
    return running.port


def run(score, name=None, version=None, argv=None):
    """serve() with --host, --port, --workers, --error-reward from the command line."""
    parser = argparse.ArgumentParser(description=f"Trellis verifier {name or ''}".strip())
    parser.add_argument("--host", default="127.0.0.1",
                        help="address to listen on (default 127.0.0.1; 0.0.0.0 for all)")
    parser.add_argument("--port", type=int, default=0, help="port (default 0: a free one)")
    parser.add_argument("--workers", type=int, default=4, help="concurrent Verify calls")
    parser.add_argument("--error-reward", type=float, default=0.0,
                        help="reward of an item the scoring function fails on")
    parser.add_argument("--secret-file", default=None,
                        help="the job's secret (default: $TRELLIS_SECRET_FILE); every call "
                             "must carry it")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    return serve(score, name=name, version=version, host=args.host, port=args.port,
                 max_workers=args.workers, error_reward=args.error_reward,
                 secret_file=args.secret_file)
