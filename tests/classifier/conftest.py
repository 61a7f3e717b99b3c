"""Fixtures for the classifier's corpus: a local fault-injecting HTTP server and gRPC server, a
refused port and a silent port, all on 127.0.0.1 and started once per session."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from tests.classifier import faults


@dataclass(frozen=True)
class FaultEnv:
    """Where the faults live: the HTTP server's base URL, gRPC target, refused and silent ports."""

    url: str
    grpc: str
    closed: int
    silent: int

    def at(self, scenario: str) -> str:
        """Return the URL of an HTTP scenario."""
        return f"{self.url}/s/{scenario}"


@pytest.fixture(scope="session")
def faults_env() -> Iterator[FaultEnv]:
    with (
        faults.http_server() as url,
        faults.grpc_server() as target,
        faults.silent_port() as silent,
    ):
        yield FaultEnv(url=url, grpc=target, closed=faults.closed_port(), silent=silent)
