"""A corpus case and what every family's cases share: the failing call's shape, the
services of the machine some cases call, and the helpers that make a call."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from typing import Any

from classifier import FailureCategory
from tests.classifier import protocol_faults
from tests.classifier.faults import FaultEnv

T = FailureCategory

TIMEOUT_S = 0.3

# The machine's services some cases call, by the name require_service reports.
POSTGRES, MARIADB, RABBITMQ = "PostgreSQL", "MariaDB", "RabbitMQ"
PRIVATE_POSTGRES = "a PostgreSQL installation (initdb) for a private cluster"

# Who raised the exception, for the benchmark's per-group figures: a client library, the
# standard library or the interpreter itself, or an agent's own wrapper around a library's.
LIBRARY, BUILTINS, WRAPPED = "library", "builtins", "wrapped"

Call = Callable[[], object]
Prepare = Callable[[FaultEnv], AbstractContextManager[Call]]


_PORTS = {POSTGRES: 5432, MARIADB: 3306, RABBITMQ: 5672}


def service_available(needs: str) -> bool:
    """Return whether the service a case needs is here: listening, or installed (initdb)."""
    if needs == PRIVATE_POSTGRES:
        return protocol_faults.postgres_binaries() is not None
    return protocol_faults.listening(_PORTS[needs])


def caught(call: Call) -> BaseException:
    """Return the exception `call` raises."""
    try:
        call()
    except BaseException as exc:
        return exc
    raise AssertionError("the call did not raise")


@dataclass(frozen=True)
class Case:
    """One corpus entry: how to make the failing call, and what classify must say about it."""

    name: str
    prepare: Prepare
    category: FailureCategory
    expect: dict[str, Any] = field(default_factory=dict)
    group: str = LIBRARY
    needs: str | None = None  # a service of the machine the case calls (POSTGRES, ...)
    why: str = ""  # the rationale, in one line, where the name alone does not give it

    def __str__(self) -> str:
        return self.name

    def produce(self, env: FaultEnv) -> BaseException:
        """Return the exception the case's call raises against `env`."""
        with self.prepare(env) as call:
            return caught(call)


def scenario_url(env: FaultEnv, path: str) -> str:
    """Return a scenario's URL, or `path` with the refused and silent ports filled in."""
    return path.format(closed=env.closed, silent=env.silent) if "{" in path else env.at(path)


def raising(factory: Callable[[], BaseException]) -> Prepare:
    """Return a Prepare whose call raises what `factory` makes (an in-process failure)."""

    @contextmanager
    def prepare(env: FaultEnv) -> Iterator[Call]:
        def call() -> None:
            raise factory()

        yield call

    return prepare


def calling(make: Callable[[FaultEnv], Call]) -> Prepare:
    """Return a Prepare for a call that needs nothing made beforehand."""

    @contextmanager
    def prepare(env: FaultEnv) -> Iterator[Call]:
        yield make(env)

    return prepare
