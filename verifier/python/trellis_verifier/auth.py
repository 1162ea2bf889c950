"""The job's secret, as Trellis' C++ services check and send it (rpc/auth.h).

A secured job's every call carries the metadata `authorization: Bearer
<secret>`; a server refuses a call without it with UNAUTHENTICATED, before
the handler runs, except grpc.health.v1.Health (readiness probes). The secret
lives in a file only its owner may read (chmod 600), named by
$TRELLIS_SECRET_FILE or passed explicitly.
"""
import hmac
import os
import stat

import grpc

SECRET_FILE_ENV = "TRELLIS_SECRET_FILE"
AUTHORIZATION = "authorization"
_MIN_CHARS = 32
_OPEN_PREFIX = "/grpc.health.v1.Health/"
_REFUSED = ("missing or wrong credentials: this service needs the job's secret "
            "(metadata authorization: Bearer <secret>)")


def read_secret(path=None):
    """The secret of `path`, else of $TRELLIS_SECRET_FILE; None when neither is given.

    Raises ValueError naming the file (never quoting it) when group or others
    may read or write it, or it holds fewer than 32 characters or whitespace.
    """
    path = path or os.environ.get(SECRET_FILE_ENV)
    if not path:
        return None
    mode = os.stat(path).st_mode
    if stat.S_IMODE(mode) & 0o077:
        raise ValueError(f"secret file {path}: mode {stat.S_IMODE(mode):03o} lets group or "
                         f"others read or write it; chmod 600 {path}")
    with open(path, encoding="ascii") as f:
        secret = f.read().strip()
    if len(secret) < _MIN_CHARS or any(c.isspace() or not c.isprintable() for c in secret):
        raise ValueError(f"secret file {path}: expected at least {_MIN_CHARS} printable "
                         "characters without whitespace")
    return secret


def metadata(secret):
    """The call metadata a client sends: [] when insecure (secret None)."""
    return [(AUTHORIZATION, f"Bearer {secret}")] if secret else []


class SecretInterceptor(grpc.ServerInterceptor):
    """Refuses, with UNAUTHENTICATED, every call but Health's that lacks the secret."""

    def __init__(self, secret):
        self._want = f"Bearer {secret}".encode()

    def _authorized(self, details):
        for key, value in details.invocation_metadata or ():
            if key == AUTHORIZATION:
                got = value.encode() if isinstance(value, str) else value
                return hmac.compare_digest(got, self._want)
        return False

    def intercept_service(self, continuation, details):
        if details.method.startswith(_OPEN_PREFIX) or self._authorized(details):
            return continuation(details)
        handler = continuation(details)
        if handler is None:
            return None

        def refuse(request, context):
            context.abort(grpc.StatusCode.UNAUTHENTICATED, _REFUSED)

        if handler.request_streaming and handler.response_streaming:
            return grpc.stream_stream_rpc_method_handler(refuse)
        if handler.request_streaming:
            return grpc.stream_unary_rpc_method_handler(refuse)
        if handler.response_streaming:
            return grpc.unary_stream_rpc_method_handler(refuse)
        return grpc.unary_unary_rpc_method_handler(refuse)
