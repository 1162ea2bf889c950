"""Finds the protoc-generated Python stubs (built by CMake, never committed).

They live in BUILD_DIR/python (target trellis_python_stubs). The environment
variable TRELLIS_PYTHON_STUBS names that directory; without it the checkout's
build/python is tried.
"""
import os
import pathlib
import sys

ENV_VAR = "TRELLIS_PYTHON_STUBS"


def stubs_dir():
    """The stubs directory, or raises ImportError saying how to make it."""
    env = os.environ.get(ENV_VAR)
    repo = pathlib.Path(__file__).resolve().parents[3]
    candidate = pathlib.Path(env) if env else repo / "build" / "python"
    if not (candidate / "trellis" / "v1" / "services_pb2_grpc.py").is_file():
        raise ImportError(
            f"trellis_verifier: no generated stubs in {candidate} "
            f"({ENV_VAR}={env!r}); build them with "
            f"`scripts/build.sh trellis_python_stubs` and set {ENV_VAR}=BUILD_DIR/python")
    return str(candidate)


def load():
    """Puts the stubs on sys.path and returns their modules as a namespace."""
    path = stubs_dir()
    if path not in sys.path:
        sys.path.insert(0, path)
    from grpc_health_v1 import health_pb2, health_pb2_grpc  # noqa: E402
    from trellis.v1 import rollout_pb2, services_pb2_grpc  # noqa: E402

    class Stubs:
        pass

    stubs = Stubs()
    stubs.rollout_pb2 = rollout_pb2
    stubs.services_pb2_grpc = services_pb2_grpc
    stubs.health_pb2 = health_pb2
    stubs.health_pb2_grpc = health_pb2_grpc
    return stubs
