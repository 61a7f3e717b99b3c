"""Validation libraries, task runners and builtins; causes kept in containers (exception
groups, a retry library's last attempt); an agent's own wrappers around a library's
exception."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from tests.classifier.corpus.apis import boto_call
from tests.classifier.corpus.cases import (
    BUILTINS,
    TIMEOUT_S,
    WRAPPED,
    Call,
    Case,
    Prepare,
    T,
    calling,
    raising,
)
from tests.classifier.corpus.http_clients import httpx_get, urllib_get
from tests.classifier.faults import FaultEnv

# --- validation libraries, task runners, builtins -----------------------------------------------


@contextmanager
def _pydantic(env: FaultEnv) -> Iterator[Call]:
    import pydantic

    class Query(pydantic.BaseModel):
        text: str
        limit: int

    yield lambda: Query.model_validate({"text": 3, "limit": "many"})


def _jsonschema(env: FaultEnv) -> Call:
    import jsonschema

    schema = {"type": "object", "required": ["query"]}
    return lambda: jsonschema.validate({"q": 1}, schema)


def _celery_soft() -> BaseException:
    from celery.exceptions import SoftTimeLimitExceeded

    return SoftTimeLimitExceeded("soft time limit")


def _celery_hard() -> BaseException:
    from billiard.exceptions import TimeLimitExceeded

    return TimeLimitExceeded(30.0)


def _socket_refused(env: FaultEnv) -> Call:
    return lambda: socket.create_connection(("127.0.0.1", env.closed), timeout=1)


def _socket_timeout(env: FaultEnv) -> Call:
    def call() -> None:
        with socket.create_connection(("127.0.0.1", env.silent), timeout=0.1) as sock:
            sock.recv(1)

    return call


def _broken_pipe(env: FaultEnv) -> Call:
    def call() -> None:
        left, right = socket.socketpair()
        right.close()
        with left:
            for _ in range(100):
                left.sendall(b"x" * 65536)

    return call


def _missing_file(env: FaultEnv) -> Call:
    return lambda: open("/nonexistent/classifier-corpus.txt")


def _asyncio_timeout(env: FaultEnv) -> Call:
    return lambda: asyncio.run(asyncio.wait_for(asyncio.sleep(1), 0.01))


def _futures_timeout(env: FaultEnv) -> Call:
    from concurrent.futures import Future

    return lambda: Future().result(timeout=0.01)


OTHERS = [
    Case(
        "pydantic: ValidationError is invalid_input",
        _pydantic,
        T.INVALID_INPUT,
        {"exception_type": "pydantic_core._pydantic_core.ValidationError"},
    ),
    Case("jsonschema: ValidationError is invalid_input", calling(_jsonschema), T.INVALID_INPUT),
    Case("celery: soft time limit is timeout", raising(_celery_soft), T.TIMEOUT),
    Case("billiard: hard time limit is timeout", raising(_celery_hard), T.TIMEOUT),
    Case(
        "socket: ConnectionRefusedError is transient",
        calling(_socket_refused),
        T.TRANSIENT,
        group=BUILTINS,
    ),
    Case("socket: socket.timeout is timeout", calling(_socket_timeout), T.TIMEOUT, group=BUILTINS),
    Case(
        "socket: BrokenPipeError is transient", calling(_broken_pipe), T.TRANSIENT, group=BUILTINS
    ),
    Case(
        "open: FileNotFoundError is resource_missing",
        calling(_missing_file),
        T.RESOURCE_MISSING,
        group=BUILTINS,
    ),
    # Root bypasses file modes, so the filesystem cannot be made to refuse us here.
    Case(
        "PermissionError is auth_failure",
        raising(lambda: PermissionError(13, "Permission denied")),
        T.AUTH_FAILURE,
        group=BUILTINS,
    ),
    Case(
        "asyncio.wait_for timeout is timeout",
        calling(_asyncio_timeout),
        T.TIMEOUT,
        group=BUILTINS,
    ),
    Case(
        "concurrent.futures timeout is timeout",
        calling(_futures_timeout),
        T.TIMEOUT,
        group=BUILTINS,
    ),
]


# --- causes kept in containers: exception groups, a retry library's last attempt ----------------


def _task_group(env: FaultEnv) -> Call:
    """Two searches in an asyncio.TaskGroup: one fails with a 404, the other is cancelled."""
    import httpx

    url = env.at("status-404")

    async def search(client: httpx.AsyncClient) -> None:
        (await client.get(url)).raise_for_status()

    async def main() -> None:
        # The 404 is the point: a loaded machine must not turn it into a timeout.
        async with httpx.AsyncClient(timeout=5) as client, asyncio.TaskGroup() as group:
            group.create_task(search(client))
            group.create_task(asyncio.sleep(5))

    return lambda: asyncio.run(main())


def _all_errors(env: FaultEnv) -> Call:
    return lambda: socket.create_connection(("127.0.0.1", env.closed), 1, all_errors=True)


def _tenacity(path: str, attempts: int = 2) -> Prepare:
    @contextmanager
    def prepare(env: FaultEnv) -> Iterator[Call]:
        import httpx
        import tenacity

        url = env.at(path)
        with httpx.Client(timeout=TIMEOUT_S) as client:
            retrying = tenacity.Retrying(
                stop=tenacity.stop_after_attempt(attempts), wait=tenacity.wait_none()
            )
            yield lambda: retrying(lambda: client.get(url).raise_for_status())

    return prepare


CONTAINERS = [
    Case(
        "asyncio.TaskGroup: an ExceptionGroup around an httpx 404 is resource_missing",
        calling(_task_group),
        T.RESOURCE_MISSING,
        {"exception_type": "httpx.HTTPStatusError", "status_code": 404},
        why="the group's member decides; the cancelled sibling adds nothing",
    ),
    Case(
        "socket.create_connection(all_errors=True): an ExceptionGroup of refusals is transient",
        calling(_all_errors),
        T.TRANSIENT,
        {"exception_type": "builtins.ConnectionRefusedError"},
        group=BUILTINS,
        why="Python 3.11 keeps one error per address in a group",
    ),
    Case(
        "tenacity: RetryError after two 503s is server_fault (its last attempt decides)",
        _tenacity("status-503"),
        T.SERVER_FAULT,
        {"status_code": 503, "exception_type": "httpx.HTTPStatusError"},
        why="RetryError says nothing; its last attempt does",
    ),
    Case(
        "tenacity: RetryError after two 404s is resource_missing, not retryable",
        _tenacity("status-404"),
        T.RESOURCE_MISSING,
        {"retryable": False},
        why="retrying more would not find the page",
    ),
]


# --- an agent's own wrappers around a library's exception ---------------------------------------


class ToolError(Exception):
    """What an agent's tool wrapper raises: no signal of its own."""


def _wrapped(inner: Prepare, wrapper: Callable[[], BaseException]) -> Prepare:
    """Return a Prepare whose call raises `wrapper()` from the exception `inner`'s call raises."""

    @contextmanager
    def prepare(env: FaultEnv) -> Iterator[Call]:
        with inner(env) as inner_call:

            def call() -> None:
                try:
                    inner_call()
                except Exception as exc:
                    raise wrapper() from exc

            yield call

    return prepare


AGENT_WRAPPERS = [
    Case(
        "agent: RuntimeError raised from a urllib 404 HTTPError is resource_missing",
        _wrapped(urllib_get("status-404"), lambda: RuntimeError("tool failed")),
        T.RESOURCE_MISSING,
        {"exception_type": "urllib.error.HTTPError", "signal": "status"},
        group=WRAPPED,
    ),
    Case(
        "agent: ToolError raised from an httpx read timeout is timeout",
        _wrapped(httpx_get("slow"), lambda: ToolError("search failed")),
        T.TIMEOUT,
        {"exception_type": "httpx.ReadTimeout", "signal": "type"},
        group=WRAPPED,
    ),
    Case(
        "agent: ToolError raised from a botocore throttle is rate_limited",
        _wrapped(boto_call("dynamodb", "ThrottlingException"), lambda: ToolError("lookup failed")),
        T.RATE_LIMITED,
        {"provider_code": "ThrottlingException", "status_code": 400},
        group=WRAPPED,
    ),
]
