#!/usr/bin/python3
"""Tests of the Python verifier SDK and of tests/python/check_services.py.

Run by ctest (verifier_python_sdk_test) with /usr/bin/python3 and
TRELLIS_PYTHON_STUBS=BUILD_DIR/python.
"""
import math
import os
import pathlib
import signal
import subprocess
import sys
import tempfile
import unittest

import grpc

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(HERE))
import trellis_verifier  # noqa: E402
from trellis_verifier import _stubs, auth  # noqa: E402

pb = _stubs.load()
rollout_pb2 = pb.rollout_pb2
health_pb2 = pb.health_pb2


def items(*triples):
    return [rollout_pb2.VerifyItem(prompt=p, response=r, answer=a) for p, r, a in triples]


def secret_file(mode=0o600):
    """A temporary secret file (its path) with `mode`."""
    fd, path = tempfile.mkstemp(prefix="sdk_test_secret")
    os.write(fd, b"0123456789abcdef0123456789abcdef0123456789abcdef\n")
    os.close(fd)
    os.chmod(path, mode)
    return path


class Served:
    def __init__(self, score, **options):
        self.server = trellis_verifier.start(score, **options)
        self.channel = grpc.insecure_channel(self.server.address)
        self.verifier = pb.services_pb2_grpc.VerifierStub(self.channel)
        self.health = pb.health_pb2_grpc.HealthStub(self.channel)

    def verify(self, batch, **kwargs):
        return self.verifier.Verify(rollout_pb2.VerifyRequest(items=batch), timeout=10,
                                    **kwargs).results

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.channel.close()
        self.server.stop(0)


class SdkTest(unittest.TestCase):
    def test_return_shapes_become_verdicts(self):
        def score(prompt, response, answer):
            return {
                "float": 0.5,
                "zero": 0,
                "bool": True,
                "pair": (1.0, "Correct"),
                "triple": (0.0, "unparseable", "no digits"),
                "enum": (0.25, trellis_verifier.WRONG),
                "flag": (1.0, False),
            }[response]

        with Served(score, name="shapes", version="3") as s:
            results = s.verify(items(*[("p", r, "a") for r in
                                       ["float", "zero", "bool", "pair", "triple", "enum",
                                        "flag"]]))
        got = [(r.reward, rollout_pb2.Verdict.Name(r.verdict), r.detail) for r in results]
        self.assertEqual(got, [
            (0.5, "CORRECT", ""), (0.0, "WRONG", ""), (1.0, "CORRECT", ""),
            (1.0, "CORRECT", ""), (0.0, "UNPARSEABLE", "no digits"), (0.25, "WRONG", ""),
            (1.0, "WRONG", "")])
        self.assertTrue(all(r.verifier == "shapes@3" for r in results))

    def test_failures_are_error_verdicts_with_reasons(self):
        def score(prompt, response, answer):
            if response == "raise":
                raise KeyError("missing")
            return {"nan": math.nan, "inf": (math.inf, "correct"), "huge": 1e300,
                    "text": "1.0", "verdict": (1.0, "maybe"), "four": (1, 2, 3, 4),
                    "ok": 1.0}[response]

        with Served(score, error_reward=-1.0) as s:
            results = s.verify(items(*[("p", r, "a") for r in
                                       ["raise", "nan", "inf", "huge", "text", "verdict",
                                        "four", "ok"]]))
        self.assertEqual([rollout_pb2.Verdict.Name(r.verdict) for r in results],
                         ["ERROR"] * 7 + ["CORRECT"])
        self.assertEqual([r.reward for r in results], [-1.0] * 7 + [1.0])
        details = [r.detail for r in results]
        self.assertIn("score raised KeyError: 'missing'", details[0])
        self.assertIn("non-finite reward nan", details[1])
        self.assertIn("non-finite reward inf", details[2])
        self.assertIn("non-finite reward 1e+300", details[3])
        self.assertIn("of type str; expected a number", details[4])
        self.assertIn("verdict 'maybe'", details[5])
        self.assertIn("tuple of 4 values", details[6])

    def test_metadata_is_passed_when_asked_for(self):
        def score(prompt, response, answer, metadata):
            return float(metadata.get("weight", 0))

        with Served(score) as s:
            batch = items(("p", "r", "a"), ("p", "r", "a"), ("p", "r", "a"))
            batch[0].metadata_json = '{"weight": 2}'
            batch[2].metadata_json = "[1]"
            results = s.verify(batch)
        self.assertEqual(results[0].reward, 2.0)
        self.assertEqual(results[1].verdict, rollout_pb2.WRONG)
        self.assertEqual(results[2].verdict, rollout_pb2.ERROR)
        self.assertIn("items[2].metadata_json", results[2].detail)

    def test_too_many_items_is_invalid_argument_and_it_keeps_serving(self):
        with Served(lambda p, r, a: 1.0, max_items=2) as s:
            with self.assertRaises(grpc.RpcError) as caught:
                s.verify(items(("p", "r", "a"), ("p", "r", "a"), ("p", "r", "a")))
            self.assertEqual(caught.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
            self.assertIn("items: 3 items", caught.exception.details())
            self.assertEqual(len(s.verify(items(("p", "r", "a")))), 1)
            self.assertEqual(len(s.verify([])), 0)

    def test_health(self):
        with Served(lambda p, r, a: 1.0) as s:
            for service in ("", trellis_verifier.VERIFIER_SERVICE):
                reply = s.health.Check(health_pb2.HealthCheckRequest(service=service), timeout=5)
                self.assertEqual(reply.status, health_pb2.HealthCheckResponse.SERVING)
            with self.assertRaises(grpc.RpcError) as caught:
                s.health.Check(health_pb2.HealthCheckRequest(service="trellis.v1.Actor"),
                               timeout=5)
            self.assertEqual(caught.exception.code(), grpc.StatusCode.NOT_FOUND)
            watch = s.health.Watch(health_pb2.HealthCheckRequest(service=""), timeout=5)
            self.assertEqual(next(watch).status, health_pb2.HealthCheckResponse.SERVING)
            watch.cancel()


class SecretTest(unittest.TestCase):
    """With a secret file, only calls carrying the secret are scored."""

    def test_calls_without_the_secret_are_unauthenticated(self):
        path = secret_file()
        self.addCleanup(os.unlink, path)
        secret = auth.read_secret(path)
        with Served(lambda p, r, a: 1.0, secret_file=path) as s:
            for wrong in ([], auth.metadata("x" * 48)):
                with self.assertRaises(grpc.RpcError) as caught:
                    s.verify(items(("p", "r", "a")), metadata=wrong)
                self.assertEqual(caught.exception.code(), grpc.StatusCode.UNAUTHENTICATED)
            results = s.verify(items(("p", "r", "a")), metadata=auth.metadata(secret))
            self.assertEqual(results[0].verdict, rollout_pb2.CORRECT)
            # Health stays open for readiness probes.
            reply = s.health.Check(health_pb2.HealthCheckRequest(service=""), timeout=5)
            self.assertEqual(reply.status, health_pb2.HealthCheckResponse.SERVING)

    def test_a_file_others_may_read_is_refused(self):
        path = secret_file(0o644)
        self.addCleanup(os.unlink, path)
        with self.assertRaises(ValueError) as caught:
            auth.read_secret(path)
        self.assertIn("chmod 600", str(caught.exception))


class ProcessTest(unittest.TestCase):
    """The example served as its own process, checked by check_services.py."""

    def setUp(self):
        self.secret = secret_file()
        self.addCleanup(os.unlink, self.secret)
        self.proc = subprocess.Popen(
            [sys.executable, str(REPO / "examples" / "verifiers" / "python_numeric.py"),
             "--secret-file", self.secret],
            stdout=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        self.assertTrue(line.startswith("trellis_verifier: serving numeric-py@1 on "), line)
        self.address = line.split(" on ")[1].strip()

    def tearDown(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self.proc.stdout.close()

    def check(self, *args):
        return subprocess.run(
            [sys.executable, str(REPO / "tests" / "python" / "check_services.py"),
             "--secret-file", self.secret, *args],
            capture_output=True, text=True, timeout=60)

    def test_check_services_against_the_sdk(self):
        done = self.check(self.address,
                          "--probe", '{"prompt": "2+3=", "response": "5", "answer": "5"}',
                          "--probe", '{"prompt": "2+3=", "response": "6", "answer": "5"}',
                          "--probe", '{"prompt": "2+3=", "response": "?", "answer": "5"}',
                          "--expect", "correct", "--expect", "wrong", "--expect", "unparseable")
        self.assertEqual(done.returncode, 0, done.stdout + done.stderr)
        self.assertIn("serves trellis.v1.Verifier", done.stdout)
        self.assertIn("Verify: 3 items -> CORRECT, WRONG, UNPARSEABLE", done.stdout)

        wrong = self.check(self.address, "--expect", "wrong")
        self.assertEqual(wrong.returncode, 1)
        self.assertIn("expected verdicts wrong, got CORRECT", wrong.stderr)

        outsider = subprocess.run(
            [sys.executable, str(REPO / "tests" / "python" / "check_services.py"), self.address],
            capture_output=True, text=True, timeout=60, env={
                k: v for k, v in os.environ.items() if k != auth.SECRET_FILE_ENV})
        self.assertEqual(outsider.returncode, 1)
        self.assertIn("UNAUTHENTICATED", outsider.stdout)

    def test_sigterm_stops_it(self):
        self.proc.send_signal(signal.SIGTERM)
        # Generous: under a parallel build the interpreter may be slow to run the handler.
        self.assertEqual(self.proc.wait(timeout=60), 0)
        down = self.check("--timeout", "1", self.address)
        self.assertEqual(down.returncode, 1)


if __name__ == "__main__":
    unittest.main(verbosity=2)
