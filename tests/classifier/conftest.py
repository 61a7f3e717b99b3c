"""Fixtures for the classifier's corpus: a local fault-injecting HTTP server and gRPC server, a
refused port and a silent port, all on 127.0.0.1 and started once per session."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.classifier.faults import FaultEnv, running


@pytest.fixture(scope="session")
def faults_env() -> Iterator[FaultEnv]:
    with running() as env:
        yield env
