"""The process behind :class:`~kafka_batch_provider.dev.s3.EmbeddedS3`.

``python -m kafka_batch_provider.dev.s3_server --port N [--bucket NAME ...]`` serves moto's
S3 backend on 127.0.0.1 (memory storage: stopping it drops every bucket) until SIGTERM or
SIGINT. The buckets exist before the port opens, so a client that can connect finds them.
It logs one line at start-up and no line per request.
"""

from __future__ import annotations

import argparse
import logging
import re
import signal
import sys
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from kafka_batch_provider.errors import ConfigError, KafkaBatchError

HOST = "127.0.0.1"

#: WSGI environ keys of the headers that make a request conditional on the object's state.
CONDITIONAL_HEADERS = ("HTTP_IF_NONE_MATCH", "HTTP_IF_MATCH")

WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


def serialise_conditional_requests(app: WsgiApp) -> WsgiApp:
    """Run requests with an ``If-None-Match`` or ``If-Match`` header one at a time.

    moto checks the condition and then stores the object with no lock in between, so in a
    threaded server two concurrent ``PUT`` with ``If-None-Match: *`` on one key can both
    succeed. Real S3 lets exactly one win, and the offset log relies on that for its atomic
    create-if-absent. One lock held for the whole conditional request (the response body
    included) restores that; requests without those headers stay concurrent. (It also stops
    racing large conditional PUTs from failing with HTTP 500 in moto: the second store closes
    the first object's buffer while its ETag is being computed.)
    """
    lock = threading.Lock()

    def middleware(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if not any(key in environ for key in CONDITIONAL_HEADERS):
            return app(environ, start_response)
        with lock:
            result = app(environ, start_response)
            try:
                return [b"".join(result)]
            finally:
                close = getattr(result, "close", None)
                if close is not None:
                    close()

    return middleware


#: SigV4 names its access key id in the Authorization header or, presigned, in the query.
_CREDENTIAL = re.compile(r"Credential=([^/,\s&]+)/|X-Amz-Credential=([^%/&]+)(?:%2F|/)")

_INVALID_ACCESS_KEY = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>InvalidAccessKeyId</Code>'
    b"<Message>The AWS Access Key Id you provided does not exist in our records.</Message></Error>"
)


def refuse_other_access_keys(app: WsgiApp, access_key: str) -> WsgiApp:
    """Answer a request signed with another access key id as S3 does: HTTP 403 InvalidAccessKeyId.

    moto accepts any credentials; with this, a client configured with wrong ones fails as it
    would against S3. Only the key id is checked, not the signature; unsigned requests pass.
    """

    def middleware(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        signed = f"{environ.get('HTTP_AUTHORIZATION', '')} {environ.get('QUERY_STRING', '')}"
        match = _CREDENTIAL.search(signed)
        if match and (match.group(1) or match.group(2)) != access_key:
            body = b"" if environ.get("REQUEST_METHOD") == "HEAD" else _INVALID_ACCESS_KEY  # HEAD: headers only
            start_response("403 Forbidden", [("Content-Type", "application/xml"), ("Content-Length", str(len(body)))])
            return [body]
        return app(environ, start_response)

    return middleware


def build_app(serialise_conditional: bool = True, access_key: str | None = None) -> WsgiApp:
    """moto's S3 application, wrapped so that conditional writes are atomic as on S3 (and,
    given ``access_key``, requests signed with another key id are refused)."""
    from moto.moto_server.werkzeug_app import create_backend_app

    app = create_backend_app("s3")
    app = serialise_conditional_requests(app) if serialise_conditional else app
    return refuse_other_access_keys(app, access_key) if access_key else app


def create_buckets(app: WsgiApp, buckets: Sequence[str]) -> None:
    """Create each bucket with a path-style ``PUT /<bucket>`` handled in this process."""
    from werkzeug.test import Client

    client = Client(app)
    for bucket in buckets:
        response = client.put(f"/{bucket}", base_url=f"http://{HOST}")
        if response.status_code != 200:
            raise ConfigError(f"cannot create bucket {bucket!r}: S3 answered HTTP {response.status_code}")


def _request_handler() -> type:
    from moto.moto_server.werkzeug_app import MotoRequestHandler

    class QuietRequestHandler(MotoRequestHandler):
        """moto's handler without werkzeug's access-log line for every request."""

        def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
            pass

    return QuietRequestHandler


def _stop(signum: int, frame: object) -> None:
    raise KeyboardInterrupt  # serve_forever() ends on it and closes the socket


def serve(
    port: int, buckets: Sequence[str] = (), serialise_conditional: bool = True, access_key: str | None = None
) -> None:
    """Serve S3 on ``127.0.0.1:port`` until SIGTERM/SIGINT."""
    from werkzeug.serving import make_server

    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    app = build_app(serialise_conditional, access_key)
    create_buckets(app, buckets)
    server = make_server(HOST, port, app, threaded=True, request_handler=_request_handler())
    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    print(f"S3 (moto) on http://{HOST}:{port}, buckets: {', '.join(buckets) or '-'}", flush=True)
    server.serve_forever()  # returns on KeyboardInterrupt, having closed the socket


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kafka_batch_provider.dev.s3_server", description=__doc__)
    parser.add_argument("--port", type=int, required=True, help="port on 127.0.0.1")
    parser.add_argument("--bucket", action="append", default=[], help="bucket to create at start-up (repeatable)")
    parser.add_argument("--access-key", help="refuse requests signed with another access key id (HTTP 403)")
    args = parser.parse_args(argv)
    try:
        serve(args.port, args.bucket, access_key=args.access_key)
    except KafkaBatchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    return 0  # (a port already taken: werkzeug prints why and exits 1)


if __name__ == "__main__":
    sys.exit(main())
