"""A fault-injecting HTTP server and gRPC server on 127.0.0.1, for the corpus of real exceptions.

HTTP scenarios are chosen by path, `/s/<name>/...` (OpenAI and Anthropic clients append their
own paths to the base URL; S3 in path style reads bucket "s" and key <name>), or, for the AWS
services' POST / (JSON and query protocols) and Lambda's REST paths, by the first request
parameter that names an AWS scenario (a DynamoDB TableName, a KMS KeyId, an SQS QueueName, ...).
`running()` starts the HTTP and gRPC servers and yields a `FaultEnv` saying where they are; the
other protocols' servers (protocol_faults.py: TLS, SMTP, FTP, SSH, a private PostgreSQL) start
on first use and stop with it. The tests' fixture and the classify benchmark both use it.
"""

from __future__ import annotations

import json
import socket
import ssl
import sys
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager
from dataclasses import dataclass
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, TypeVar

from tests.classifier import handshake_faults, protocol_faults
from tests.classifier.delay_faults import (
    DELAY_SCENARIOS,
    RETRY_INFO_REQUEST,
    quota_status_with_retry_info,
)
from tests.classifier.protocol_faults import POLL_S

SLOW_SECONDS = 1.5
TLS12 = ssl.TLSVersion.TLSv1_2
JSON = "application/json"
AMZ_JSON = "application/x-amz-json-1.0"
XML = "text/xml"

HeaderValue = str | Callable[[], str]


def _json(data: object) -> bytes:
    return json.dumps(data).encode()


def _openai(message: str, type_: str, code: str | None) -> bytes:
    return _json({"error": {"message": message, "type": type_, "param": None, "code": code}})


def _anthropic(type_: str, message: str) -> bytes:
    return _json({"type": "error", "error": {"type": type_, "message": message}})


def _s3(code: str, message: str) -> bytes:
    return (
        f'<?xml version="1.0" encoding="UTF-8"?><Error><Code>{code}</Code>'
        f"<Message>{message}</Message><RequestId>R1</RequestId><HostId>H1</HostId></Error>"
    ).encode()


def _dynamodb(code: str, message: str) -> bytes:
    return _json({"__type": f"com.amazonaws.dynamodb.v20120810#{code}", "message": message})


def _query_error(code: str, message: str) -> bytes:
    """An AWS query-protocol error (STS, SNS, IAM)."""
    return (
        f'<ErrorResponse xmlns="https://fault.test/"><Error><Type>Sender</Type><Code>{code}</Code>'
        f"<Message>{message}</Message></Error><RequestId>R1</RequestId></ErrorResponse>"
    ).encode()


def _ec2_error(code: str, message: str) -> bytes:
    return (
        f"<Response><Errors><Error><Code>{code}</Code><Message>{message}</Message></Error>"
        "</Errors><RequestID>R1</RequestID></Response>"
    ).encode()


def _aws_json(namespace: str, code: str, message: str) -> bytes:
    return _json({"__type": f"{namespace}#{code}", "message": message})


# AWS services' own error codes beyond S3 and DynamoDB, each as its protocol sends it, chosen by
# the request parameter that names the scenario. SQS speaks JSON but keeps its query-era codes in
# the x-amzn-query-error header (botocore reports that one).
AWS_SCENARIOS: dict[str, tuple[int, dict[str, HeaderValue], bytes, str]] = {
    "sqs-missing-queue": (
        400,
        {"x-amzn-query-error": "AWS.SimpleQueueService.NonExistentQueue;Sender"},
        _aws_json("com.amazonaws.sqs", "QueueDoesNotExist", "The specified queue does not exist."),
        AMZ_JSON,
    ),
    "sqs-invalid-security": (
        403,
        {"x-amzn-query-error": "InvalidSecurity;Sender"},
        _aws_json("com.amazonaws.sqs", "InvalidSecurity", "The request is not secure enough."),
        AMZ_JSON,
    ),
    "kms-missing-key": (
        400,
        {},
        _aws_json("com.amazonaws.kms", "NotFoundException", "Key 'alias/x' does not exist"),
        AMZ_JSON,
    ),
    "kms-disabled-key": (
        400,
        {},
        _aws_json("com.amazonaws.kms", "DisabledException", "The key is disabled."),
        AMZ_JSON,
    ),
    "secret-missing": (
        400,
        {},
        _aws_json(
            "com.amazonaws.secretsmanager",
            "ResourceNotFoundException",
            "Secrets Manager can't find the specified secret.",
        ),
        AMZ_JSON,
    ),
    "secret-denied": (
        400,
        {},
        _aws_json("com.amazonaws.secretsmanager", "AccessDeniedException", "not authorized"),
        AMZ_JSON,
    ),
    "lambda-kms-denied": (
        502,
        {"x-amzn-ErrorType": "KMSAccessDeniedException"},
        _json({"Type": "User", "message": "Lambda was unable to decrypt the environment"}),
        JSON,
    ),
    "lambda-missing": (
        404,
        {"x-amzn-ErrorType": "ResourceNotFoundException"},
        _json({"Type": "User", "message": "Function not found"}),
        JSON,
    ),
    "sts-bad-token": (
        400,
        {},
        _query_error("InvalidIdentityToken", "Couldn't retrieve verification key from issuer."),
        XML,
    ),
    "sns-not-authorized": (
        403,
        {},
        _query_error("AuthorizationError", "User is not authorized to perform SNS:Publish"),
        XML,
    ),
    "iam-no-such-user": (404, {}, _query_error("NoSuchEntity", "The user cannot be found."), XML),
    # Access denied beyond IAM and S3: each service's own spelling, mostly on a plain 400.
    "kms-access-denied": (
        400,
        {},
        _aws_json("com.amazonaws.kms", "AccessDeniedException", "not authorized to kms:Decrypt"),
        AMZ_JSON,
    ),
    "sns-kms-denied": (
        400,
        {},
        _query_error("KMSAccessDenied", "The ciphertext references a key that is not accessible"),
        XML,
    ),
    "sqs-kms-denied": (
        400,
        {"x-amzn-query-error": "KMS.AccessDeniedException;Sender"},
        _aws_json("com.amazonaws.sqs", "KmsAccessDenied", "The caller doesn't have KMS access."),
        AMZ_JSON,
    ),
    "redshift-cluster-denied": (
        400,
        {},
        _query_error("AccessToClusterDenied", "You are not authorized to access the cluster."),
        XML,
    ),
    "rds-sns-no-authorization": (
        400,
        {},
        _query_error("SNSNoAuthorization", "You do not have permission to publish to the topic."),
        XML,
    ),
    "ec2-bad-parameter": (
        400,
        {},
        _ec2_error("InvalidParameterValue", "Value (x) for parameter instanceType is invalid."),
        XML,
    ),
    "ec2-missing-instance": (
        400,
        {},
        _ec2_error("InvalidInstanceID.NotFound", "The instance ID 'i-0' does not exist"),
        XML,
    ),
    "ec2-unauthorized": (
        403,
        {},
        _ec2_error("UnauthorizedOperation", "You are not authorized to perform this operation."),
        XML,
    ),
}


def aws_scenario(path: str, body: bytes) -> str | None:
    """Return the AWS scenario a request names: in its path, JSON body or form (first match)."""
    values = [part for part in path.split("?")[0].split("/") if part]
    try:
        data = json.loads(body) if body.startswith(b"{") else None
    except ValueError:
        data = None
    if isinstance(data, dict):
        values += [value for value in data.values() if isinstance(value, str)]
    elif body:
        form = urllib.parse.parse_qs(body.decode("latin-1"))
        values += [value for values_ in form.values() for value in values_]
    return next((value for value in values if value in AWS_SCENARIOS), None)


# name -> (status, headers, body, content type)
SCENARIOS: dict[str, tuple[int, dict[str, HeaderValue], bytes, str]] = {
    **{
        f"status-{code}": (code, {}, _json({"message": f"status {code}"}), JSON)
        for code in (400, 401, 403, 404, 408, 409, 410, 412, 418, 422, 429, 500, 501, 502, 503)
    },
    **{f"status-{code}": (code, {}, _json({"message": "?"}), JSON) for code in (504, 529, 599)},
    "retry-after-seconds": (429, {"Retry-After": "7"}, _json({"message": "slow down"}), JSON),
    "retry-after-date": (
        429,
        {"Retry-After": lambda: formatdate(time.time() + 30, usegmt=True)},
        b"{}",
        JSON,
    ),
    "retry-after-past-date": (
        429,
        {"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"},
        b"{}",
        JSON,
    ),
    "retry-after-ms": (429, {"retry-after-ms": "1500"}, b"{}", JSON),
    "x-ratelimit-reset-epoch": (
        429,
        {"X-RateLimit-Reset": lambda: str(int(time.time()) + 60)},
        b"{}",
        JSON,
    ),
    "x-ratelimit-reset-delta": (429, {"X-RateLimit-Reset": "12"}, b"{}", JSON),
    "ratelimit-reset": (429, {"RateLimit-Reset": "9"}, b"{}", JSON),
    "reset-durations": (
        429,
        {"x-ratelimit-reset-requests": "1m30s", "x-ratelimit-reset-tokens": "20ms"},
        b"{}",
        JSON,
    ),
    "retry-after-garbage": (429, {"Retry-After": "soon, maybe"}, b"{}", JSON),
    **DELAY_SCENARIOS,
    "unavailable-retry-after": (503, {"Retry-After": "4"}, b"{}", JSON),
    # OpenAI shapes (openai-python's _make_status_error reads body["error"])
    "openai-quota": (
        429,
        {"x-should-retry": "false"},
        _openai("You exceeded your current quota.", "insufficient_quota", "insufficient_quota"),
        JSON,
    ),
    "openai-quota-no-flag": (
        429,
        {},
        _openai("You exceeded your current quota.", "insufficient_quota", "insufficient_quota"),
        JSON,
    ),
    "openai-rate": (
        429,
        {"retry-after-ms": "250", "x-ratelimit-reset-requests": "6m0s"},
        _openai("Rate limit reached for requests", "requests", "rate_limit_exceeded"),
        JSON,
    ),
    "openai-model": (
        404,
        {},
        _openai("The model `gpt-9` does not exist", "invalid_request_error", "model_not_found"),
        JSON,
    ),
    "openai-key": (
        401,
        {},
        _openai("Incorrect API key provided", "invalid_request_error", "invalid_api_key"),
        JSON,
    ),
    "openai-bad": (400, {}, _openai("Invalid 'messages'", "invalid_request_error", None), JSON),
    "openai-server": (500, {}, _openai("The server had an error", "server_error", None), JSON),
    # Anthropic shapes
    "anthropic-overloaded": (529, {}, _anthropic("overloaded_error", "Overloaded"), JSON),
    "anthropic-rate": (
        429,
        {"retry-after": "20"},
        _anthropic("rate_limit_error", "Number of requests has exceeded your rate limit"),
        JSON,
    ),
    "anthropic-auth": (401, {}, _anthropic("authentication_error", "invalid x-api-key"), JSON),
    "anthropic-bad": (400, {}, _anthropic("invalid_request_error", "max_tokens: required"), JSON),
    "anthropic-missing": (404, {}, _anthropic("not_found_error", "model: claude-9"), JSON),
    "anthropic-api": (500, {}, _anthropic("api_error", "Internal server error"), JSON),
    # S3 XML errors (bucket "s", key = scenario)
    "NoSuchKey": (
        404,
        {},
        _s3("NoSuchKey", "The specified key does not exist."),
        "application/xml",
    ),
    "SlowDown": (503, {}, _s3("SlowDown", "Please reduce your request rate."), "application/xml"),
    "AccessDenied": (403, {}, _s3("AccessDenied", "Access Denied"), "application/xml"),
    "ExpiredToken": (
        400,
        {},
        _s3("ExpiredToken", "The provided token has expired."),
        "application/xml",
    ),
    "InternalError": (500, {}, _s3("InternalError", "We encountered an error"), "application/xml"),
    "NoSuchBucket": (
        404,
        {},
        _s3("NoSuchBucket", "The specified bucket does not exist"),
        "application/xml",
    ),
    # DynamoDB JSON errors (TableName = scenario)
    **{
        code: (status, {}, _dynamodb(code, code), AMZ_JSON)
        for code, status in (
            ("ProvisionedThroughputExceededException", 400),
            ("ThrottlingException", 400),
            ("ResourceNotFoundException", 400),
            ("ValidationException", 400),
            ("UnrecognizedClientException", 400),
            ("ExpiredTokenException", 400),
            ("AccessDeniedException", 400),
            ("InternalServerError", 500),
        )
    },
}


class FaultHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Headers and body leave in two writes; without TCP_NODELAY the body waits for the client's
    # delayed ACK (about 40 ms) on a kept-alive connection, which no real server makes anyone pay.
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: object) -> None:  # quiet
        pass

    def do_GET(self) -> None:
        self._serve(aws_scenario(self.path, b"") or self._scenario_from_path())

    def do_HEAD(self) -> None:
        self._serve(self._scenario_from_path())

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        name = aws_scenario(self.path, body) or self._scenario_from_path()
        if self.path.rstrip("/") == "" and name == "":
            try:
                name = json.loads(body or b"{}").get("TableName", "")
            except ValueError:
                name = ""
        self._serve(name)

    do_PUT = do_POST

    def _scenario_from_path(self) -> str:
        parts = self.path.split("?")[0].strip("/").split("/")
        return parts[1] if len(parts) >= 2 and parts[0] == "s" else ""

    def _serve(self, name: str) -> None:
        if name == "slow":
            time.sleep(SLOW_SECONDS)
            self._send(200, {}, b"{}", JSON)
        elif name == "drop":
            # Promise 1000 bytes, send 10, then close: a connection dropped mid-response.
            self.wfile.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                b'Content-Length: 1000\r\nConnection: close\r\n\r\n{"partial"'
            )
            self.wfile.flush()
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
        elif name == "hangup":
            # Close without a status line: the server went away before answering.
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
        elif name in SCENARIOS:
            self._send(*SCENARIOS[name])
        elif name in AWS_SCENARIOS:
            self._send(*AWS_SCENARIOS[name])
        else:
            self._send(200, {}, b'{"ok": true}', JSON)

    def _send(self, status: int, headers: dict[str, HeaderValue], body: bytes, ctype: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("x-amzn-RequestId", "R1")
        for name, value in headers.items():
            self.send_header(name, value() if callable(value) else value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)


S = TypeVar("S")


@dataclass(frozen=True)
class FaultEnv:
    """Where the faults live: the HTTP server's base URL, gRPC target, refused and silent ports,
    and the other protocols' servers, each started on first use and stopped with the env."""

    url: str
    grpc: str
    closed: int
    silent: int
    stack: ExitStack
    started: dict[str, Any]

    def at(self, scenario: str) -> str:
        """Return the URL of an HTTP scenario."""
        return f"{self.url}/s/{scenario}"

    def _service(self, name: str, start: Callable[[], AbstractContextManager[S]]) -> S:
        if name not in self.started:
            self.started[name] = self.stack.enter_context(start())
        return self.started[name]

    def certificates(self) -> protocol_faults.Certificates:
        return self._service("certificates", protocol_faults.certificates)

    def tls(self, kind: str) -> str:
        """Return the https:// base URL of the fault server behind TLS: "untrusted" (a
        self-signed certificate), "other-host" (a certificate for elsewhere.test),
        "client-cert" (the server demands a client certificate) or "client-cert-tls12" (the
        same, in a TLS 1.2 handshake)."""
        certs = self.certificates()
        cert = certs.other if kind == "other-host" else certs.good
        client_ca = certs.good[0] if kind.startswith("client-cert") else None
        version = TLS12 if kind.endswith("tls12") else ssl.TLSVersion.MAXIMUM_SUPPORTED
        return self._service(
            f"tls-{kind}",
            lambda: protocol_faults.tls_server(FaultHandler, cert, client_ca, version),
        )

    def postgres_tls(self, version: ssl.TLSVersion) -> int:
        """Return the port of a PostgreSQL-like server demanding a client certificate."""
        certs = self.certificates()
        return self._service(
            f"postgres-tls-{version.name}",
            lambda: handshake_faults.postgres_tls_server(certs.good, certs.good[0], version),
        )

    def blackhole(self) -> int:
        """Return a port where a connect never completes (its accept queue is full)."""
        return self._service("blackhole", handshake_faults.blackhole_port)

    def ftp(self) -> int:
        """Return the port of a real FTP server (pyftpdlib) with a read-only user."""
        return self._service("ftp", handshake_faults.ftp_server)

    def websocket(self) -> str:
        """Return the ws:// base URL of a real WebSocket server refusing handshakes."""
        return self._service("websocket", handshake_faults.websocket_server)

    def script(self, name: str) -> int:
        """Return the port of the scripted SMTP or FTP server `name`."""
        script = {**protocol_faults.SMTP_SCRIPTS, **protocol_faults.FTP_SCRIPTS}[name]
        return self._service(name, lambda: protocol_faults.script_server(script))

    def cut_short(self) -> int:
        """Return the port of a server that hangs up in the middle of its HTTP answer."""
        return self._service("cut-short", protocol_faults.cut_short_server)

    def garbage(self) -> int:
        return self._service("garbage", protocol_faults.garbage_server)

    def ssh(self) -> protocol_faults.SSHServer:
        return self._service("ssh", protocol_faults.ssh_server)

    def private_postgres(self) -> int:
        return self._service("private-postgres", protocol_faults.private_postgres)


@contextmanager
def running() -> Iterator[FaultEnv]:
    """Start the HTTP and gRPC fault servers and a silent port; yield where they all are."""
    with ExitStack() as stack:
        url = stack.enter_context(http_server())
        target = stack.enter_context(grpc_server())
        silent = stack.enter_context(silent_port())
        yield FaultEnv(url, target, closed_port(), silent, stack, {})


class FaultServer(ThreadingHTTPServer):
    """The HTTP fault server, quiet about clients that gave up before it answered."""

    daemon_threads = True

    def handle_error(self, request: object, client_address: object) -> None:
        # A timeout scenario answers after the client left: the reset is the scenario working.
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


@contextmanager
def http_server() -> Iterator[str]:
    """Yield the base URL of a running fault server; stop it afterwards."""
    server = FaultServer(("127.0.0.1", 0), FaultHandler)
    thread = threading.Thread(target=server.serve_forever, args=(POLL_S,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def closed_port() -> int:
    """Return a port on 127.0.0.1 where nothing listens (connections are refused)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def silent_port() -> Iterator[int]:
    """Yield a port that accepts TCP connections (in the backlog) and never answers."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    try:
        yield sock.getsockname()[1]
    finally:
        sock.close()


@contextmanager
def grpc_server() -> Iterator[str]:
    """Yield the target of a gRPC server whose /fault.Fault/Abort aborts with the status named
    in the request, and whose /fault.Fault/Slow answers after SLOW_SECONDS."""
    from concurrent import futures

    import grpc

    def abort(request: bytes, context: grpc.ServicerContext) -> bytes:
        if request == RETRY_INFO_REQUEST:
            context.abort_with_status(quota_status_with_retry_info())
        context.abort(grpc.StatusCode[request.decode()], f"injected {request.decode()}")

    def slow(request: bytes, context: grpc.ServicerContext) -> bytes:
        time.sleep(SLOW_SECONDS)
        return b"late"

    handlers = {
        "Abort": grpc.unary_unary_rpc_method_handler(abort),
        "Slow": grpc.unary_unary_rpc_method_handler(slow),
    }
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler("fault.Fault", handlers),)
    )
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield f"127.0.0.1:{port}"
    finally:
        server.stop(grace=None)
