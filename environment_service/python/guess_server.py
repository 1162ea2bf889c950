#!/usr/bin/python3
"""Guess the number, as a trellis.v1.Environment gRPC server in Python.

An example of an environment written in another language
(environment_service/README.md): the policy guesses a number between 1 and
100 and is told "higher" or "lower" until it is right. The number is the
episode's answer when that is an integer in range, else drawn from the
episode's seed. Needs Debian's python3-grpc and the protoc-generated stubs
(`scripts/build.sh trellis_python_stubs`, then TRELLIS_PYTHON_STUBS=build/python):

  TRELLIS_PYTHON_STUBS=build/python /usr/bin/python3 \\
      environment_service/python/guess_server.py --port 50061
  # prints: guess_server: serving on 127.0.0.1:50061

and point a job at it:

  environment: {name: remote, address: "127.0.0.1:50061", turn_stop: "="}

--nan answers every step with a NaN reward (a broken server, for tests).
"""
import argparse
import math
import os
import pathlib
import random
import re
import sys
import threading
from concurrent import futures

import grpc

sys.path.insert(0, os.environ.get("TRELLIS_PYTHON_STUBS",
                                  str(pathlib.Path(__file__).resolve().parents[2] / "build" /
                                      "python")))
from trellis.v1 import environment_pb2, environment_pb2_grpc  # noqa: E402

LOW, HIGH = 1, 100
NUMBER = re.compile(r"-?\d+")


class GuessTheNumber(environment_pb2_grpc.EnvironmentServicer):
    def __init__(self, nan_rewards):
        self._lock = threading.Lock()
        self._targets = {}  # episode_id -> the number
        self._nan_rewards = nan_rewards

    def Open(self, request, context):
        answer = request.answer.strip()
        if re.fullmatch(r"-?\d+", answer) and LOW <= int(answer) <= HIGH:
            target = int(answer)
        else:
            target = random.Random(request.seed).randint(LOW, HIGH)
        with self._lock:
            if request.episode_id in self._targets:
                context.abort(grpc.StatusCode.ALREADY_EXISTS,
                              f"episode_id: {request.episode_id!r} is already open")
            self._targets[request.episode_id] = target
        return environment_pb2.OpenEpisodeResponse(
            observation=f" Guess a number between {LOW} and {HIGH}.")

    def Step(self, request, context):
        with self._lock:
            target = self._targets.get(request.episode_id)
        if target is None:
            context.abort(grpc.StatusCode.NOT_FOUND,
                          f"episode_id: no open episode {request.episode_id!r}")
        found = NUMBER.search(request.action)
        if found is None:
            observation, reward, done = " Say a number.", 0.0, False
        elif int(found.group()) < target:
            observation, reward, done = " higher", 0.0, False
        elif int(found.group()) > target:
            observation, reward, done = " lower", 0.0, False
        else:
            observation, reward, done = " correct", 1.0, True
        return environment_pb2.EnvironmentStepResponse(
            observation=observation, reward=math.nan if self._nan_rewards else reward,
            done=done, metadata_json=f'{{"turn": {request.turn}}}')

    def Close(self, request, context):
        with self._lock:
            self._targets.pop(request.episode_id, None)
        return environment_pb2.CloseEpisodeResponse()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--workers", type=int, default=4, help="calls served at once")
    parser.add_argument("--nan", action="store_true", help="answer NaN rewards")
    args = parser.parse_args()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=args.workers))
    environment_pb2_grpc.add_EnvironmentServicer_to_server(GuessTheNumber(args.nan), server)
    port = server.add_insecure_port(f"{args.host}:{args.port}")
    if port == 0:
        sys.exit(f"guess_server: cannot listen on {args.host}:{args.port}")
    server.start()
    print(f"guess_server: serving on {args.host}:{port}", flush=True)
    server.wait_for_termination()


if __name__ == "__main__":
    main()
