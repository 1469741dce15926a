"""The process behind :class:`~kafka_batch_provider.dev.schema_registry.EmbeddedSchemaRegistry`.

``python -m kafka_batch_provider.dev.schema_registry.server --port N`` serves Confluent Schema
Registry's REST API on 127.0.0.1 (memory storage: stopping it drops every schema) until SIGTERM
or SIGINT. It logs one line at start-up and none per request (a traceback on a bug, HTTP 500).

Credentials, when any, come from the environment variable ``KAFKA_BATCH_SCHEMA_REGISTRY_AUTH``
or the file named by ``--auth-file``, never from the command line: a JSON list of
``{"user": ..., "password": ...}`` (HTTP basic auth) and ``{"token": ...}`` (a bearer token),
each optionally ``"read_only": true``. Without credentials every request is let in; with them a
request without valid ones gets 401 (error code 40101), and a read-only one that writes 403
(40301). Lookups (``POST /subjects/{subject}``) and compatibility tests are reads.

The endpoints are those of confluent-kafka's ``SchemaRegistryClient`` (see ``route``); the
state and its error codes are in ``store``, the schema types in ``formats``, the
rules in ``compatibility``. Not served: contexts beyond the default one, schema metadata
and rule sets (accepted, not kept), ``normalize`` (accepted, ignored), IMPORT mode's ids.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import traceback
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from kafka_batch_provider.dev.schema_registry.auth import AUTH_ENV, Credential, parse_credentials
from kafka_batch_provider.dev.schema_registry.formats import SCHEMA_TYPES
from kafka_batch_provider.dev.schema_registry.store import RegistryError, Store, Version, schema_not_found
from kafka_batch_provider.errors import ConfigError

HOST = "127.0.0.1"
CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"


def as_bool(values: dict[str, list[str]], name: str) -> bool:
    return (values.get(name) or ["false"])[-1].lower() == "true"


def page(items: list, query: dict[str, list[str]]) -> list:
    """``offset`` and ``limit`` (negative: all) of a listing."""
    try:
        offset = max(int((query.get("offset") or ["0"])[-1]), 0)
        limit = int((query.get("limit") or ["-1"])[-1])
    except ValueError:
        raise RegistryError(422, 422, "offset and limit must be integers") from None
    return items[offset:] if limit < 0 else items[offset : offset + limit]


def version_body(version: Version, fmt: str | None = None) -> dict[str, Any]:
    stored = version.schema
    return {
        "subject": version.subject,
        "version": version.version,
        "id": stored.id,
        "guid": stored.guid,
        **stored.body(fmt),
    }


def schema_id(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise schema_not_found() from None


def is_write(method: str, path: list[str]) -> bool:
    """Register, delete and change settings; a lookup and a compatibility test only read."""
    if method in ("PUT", "DELETE"):
        return True
    return method == "POST" and path[:1] == ["subjects"] and path[2:] == ["versions"]


def route(store: Store, method: str, path: list[str], query: dict[str, list[str]], body: Any) -> Any:
    """The answer to one request (a JSON value, or ``str`` for a raw schema); RegistryError otherwise."""
    fmt = (query.get("format") or [None])[-1]
    deleted = as_bool(query, "deleted")
    match (method, path):
        case ("GET", []):
            return {}
        case ("GET", ["schemas", "types"]):
            return list(SCHEMA_TYPES)
        case ("GET", ["contexts"]):
            return ["."]
        case ("GET", ["schemas"]):
            prefix = (query.get("subjectPrefix") or [""])[-1]
            latest_only = as_bool(query, "latestOnly")
            found = []
            for subject in store.subject_names(deleted):
                if subject.startswith(prefix):
                    versions = store.versions(subject, deleted)
                    found += [version_body(v) for v in (versions[-1:] if latest_only else versions)]
            return page(found, query)
        case ("GET", ["schemas", "ids", number]):
            return store.schema(schema_id(number)).body(fmt)
        case ("GET", ["schemas", "ids", number, "schema"]):
            return store.schema(schema_id(number)).text
        case ("GET", ["schemas", "ids", number, "subjects"]):
            return page(sorted({v.subject for v in store.uses(schema_id(number), deleted)}), query)
        case ("GET", ["schemas", "ids", number, "versions"]):
            uses = store.uses(schema_id(number), deleted)
            return page([{"subject": v.subject, "version": v.version} for v in uses], query)
        case ("GET", ["schemas", "guids", guid]):
            return store.schema_by_guid(guid).body(fmt)
        case ("GET", ["subjects"]):
            prefix = (query.get("subjectPrefix") or [""])[-1]
            names = store.subject_names(deleted, as_bool(query, "deleted_only"))
            return page([name for name in names if name.startswith(prefix)], query)
        case ("GET", ["subjects", subject, "versions"]):
            versions = store.versions(subject, deleted or as_bool(query, "deleted_only"))
            if as_bool(query, "deleted_only"):
                versions = [v for v in versions if v.deleted]
            return page([v.version for v in versions], query)
        case ("POST", ["subjects", subject, "versions"]):
            version = store.register(subject, body)
            return {"id": version.schema.id, "version": version.version, "guid": version.schema.guid}
        case ("GET", ["subjects", subject, "versions", number]):
            return version_body(store.version(subject, number, deleted), fmt)
        case ("GET", ["subjects", subject, "versions", number, "schema"]):
            return store.version(subject, number, deleted).schema.text
        case ("GET", ["subjects", subject, "versions", number, "referencedby"]):
            return page(store.referenced_by(subject, number), query)
        case ("DELETE", ["subjects", subject, "versions", number]):
            return store.delete_version(subject, number, as_bool(query, "permanent"))
        case ("POST", ["subjects", subject]):
            return version_body(store.lookup(subject, body, deleted), fmt)
        case ("DELETE", ["subjects", subject]):
            return store.delete_subject(subject, as_bool(query, "permanent"))
        case ("GET", ["config", *subject]) if len(subject) <= 1:
            name = subject[0] if subject else None
            return {"compatibilityLevel": store.compatibility_of(name, as_bool(query, "defaultToGlobal"))}
        case ("PUT", ["config", *subject]) if len(subject) <= 1:
            level = body.get("compatibility") or body.get("compatibilityLevel")
            return {"compatibility": store.set_compatibility(subject[0] if subject else None, level)}
        case ("DELETE", ["config", *subject]) if len(subject) <= 1:
            return {"compatibilityLevel": store.delete_compatibility(subject[0] if subject else None)}
        case ("GET", ["mode", *subject]) if len(subject) <= 1:
            return {"mode": store.mode_of(subject[0] if subject else None, as_bool(query, "defaultToGlobal"))}
        case ("PUT", ["mode", *subject]) if len(subject) <= 1:
            return {"mode": store.set_mode(subject[0] if subject else None, body.get("mode"))}
        case ("DELETE", ["mode", subject]):
            with store.lock:
                return {"mode": store.subject_mode.pop(subject, store.mode)}
        case ("POST", ["compatibility", "subjects", subject, "versions", *number]) if len(number) <= 1:
            reasons = store.test_compatibility(subject, body, number[0] if number else None)
            answer: dict[str, Any] = {"is_compatible": not reasons}
            if as_bool(query, "verbose"):
                answer["messages"] = reasons
            return answer
    raise RegistryError(404, 404, "HTTP 404 Not Found")


class RegistryHandler(BaseHTTPRequestHandler):
    """One request: authenticate, authorise, route, answer JSON (errors as ``{"error_code", "message"}``)."""

    protocol_version = "HTTP/1.1"  # keep-alive: clients reuse one connection
    # The headers and the body are two writes: with Nagle's algorithm the body waits for the
    # client's delayed ACK of the headers, ~40 ms a request on Linux.
    disable_nagle_algorithm = True
    server: RegistryServer

    def do_GET(self) -> None:
        self.handle_request()

    do_POST = do_PUT = do_DELETE = do_GET

    def log_message(self, format: str, *args: Any) -> None:
        pass  # no line per request

    def handle_request(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        url = urlsplit(self.path)
        path = [unquote(part) for part in url.path.strip("/").split("/")] if url.path.strip("/") else []
        try:
            self.authorise(self.command, path)
            body = self.json_body(raw)
            self.answer(200, route(self.server.store, self.command, path, parse_qs(url.query), body))
        except RegistryError as exc:
            self.answer(exc.status, {"error_code": exc.code, "message": exc.message})
        except Exception as exc:  # noqa: BLE001 - a bug: answer 500 and keep serving
            traceback.print_exc()
            self.answer(500, {"error_code": 50001, "message": f"Error in the schema registry: {exc}"})

    def authorise(self, method: str, path: list[str]) -> None:
        credentials = self.server.credentials
        if not credentials:
            return
        authorization = self.headers.get("Authorization") or ""
        caller = next((c for c in credentials if c.matches(authorization)), None)
        if caller is None:
            raise RegistryError(401, 40101, "Unauthorized: missing or wrong credentials")
        if caller.read_only and is_write(method, path):
            raise RegistryError(403, 40301, f"Forbidden: {caller.user or 'this token'} may only read")

    @staticmethod
    def json_body(raw: bytes) -> Any:
        if not raw:
            return {}
        try:
            body = json.loads(raw)
        except ValueError as exc:
            raise RegistryError(400, 400, f"Malformed JSON: {exc}") from None
        if not isinstance(body, dict):
            raise RegistryError(422, 422, "The request body must be a JSON object")
        return body

    def answer(self, status: int, value: Any) -> None:
        data = value.encode() if isinstance(value, str) else json.dumps(value).encode()
        self.send_response(status)
        self.send_header("Content-Type", CONTENT_TYPE)
        self.send_header("Content-Length", str(len(data)))
        if status == 401:
            self.send_header("WWW-Authenticate", 'Basic realm="schema-registry"')
        self.end_headers()
        self.wfile.write(data)


class RegistryServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, port: int, credentials: Sequence[Credential] = ()) -> None:
        self.store = Store()
        self.credentials = tuple(credentials)
        super().__init__((HOST, port), RegistryHandler)


def _stop(signum: int, frame: object) -> None:
    raise KeyboardInterrupt  # serve_forever() ends on it


def serve(port: int, credentials: Sequence[Credential] = ()) -> None:
    """Serve the registry on ``127.0.0.1:port`` until SIGTERM/SIGINT."""
    server = RegistryServer(port, credentials)
    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    kinds = sorted({"bearer" if c.token else "basic" for c in credentials}) or ["none"]
    print(f"schema registry on http://{HOST}:{port} (memory storage, auth: {', '.join(kinds)})", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kafka_batch_provider.dev.schema_registry.server")
    parser.add_argument("--port", type=int, required=True, help="port on 127.0.0.1")
    parser.add_argument("--auth-file", help=f"JSON credentials (default: ${AUTH_ENV}, else no authentication)")
    args = parser.parse_args(argv)
    try:
        text = Path(args.auth_file).read_text() if args.auth_file else os.environ.get(AUTH_ENV, "")
        serve(args.port, parse_credentials(text) if text.strip() else ())
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    except OSError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
