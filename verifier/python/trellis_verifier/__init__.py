"""trellis_verifier: write a Trellis verifier in Python (docs/verifier-protocol.md).

    import trellis_verifier

    def score(prompt, response, answer):
        return 1.0 if response.strip() == answer.strip() else 0.0

    trellis_verifier.run(score, name="exact", version="1")   # --port N, default: free

The served process speaks trellis.v1.Verifier and grpc.health.v1.Health; a
job uses it with `verifier: {name: remote, address: HOST:PORT}`. Started with
the job's secret ($TRELLIS_SECRET_FILE or --secret-file), it refuses calls
without it (trellis_verifier.auth), as the job's own services do.

trellis_verifier.environment.Environment serves a multi-turn environment in
the JSON-lines form the "subprocess" environment runs
(docs/environment-protocol.md).
"""
from .server import (VERIFIER_SERVICE, VerifierServer, rollout_pb2, run, serve, start,
                     verifier)

CORRECT = rollout_pb2.CORRECT
WRONG = rollout_pb2.WRONG
UNPARSEABLE = rollout_pb2.UNPARSEABLE
ERROR = rollout_pb2.ERROR

__all__ = ["VERIFIER_SERVICE", "VerifierServer", "run", "serve", "start", "verifier",
           "CORRECT", "WRONG", "UNPARSEABLE", "ERROR"]
