"""The web server as shipped: granian serving `config.web` over ASGI (`python -m config.serve`).

One event loop per process reads every request (head and body) and applies the admission; only
an admitted request with its whole body takes one of `config.web`'s threads. docs/configuration.md
lists the variables, docs/deployment.md why this server."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass

from django.core.exceptions import ImproperlyConfigured

from config.settings import env_bool, env_int, env_str


@dataclass(frozen=True)
class Serving:
    host: str
    port: int
    processes: int
    threads: int
    queue_ms: int
    long_polls: int
    header_timeout_ms: int
    body_timeout_ms: int
    backlog: int
    access_log: bool

    @property
    def waiting(self) -> int:
        """How many requests of a process may wait for a work slot; more are refused at once."""
        return 2 * self.threads

    @property
    def connections(self) -> int:
        """granian's `--backpressure`: requests in flight in a process, a slow client's included
        (each a coroutine); more wait unaccepted in the kernel's backlog."""
        return max(self.backlog, 1024)

    def command(self, app: str = "config.web:application") -> list[str]:
        command = [sys.executable, "-m", "granian", "--interface", "asgi", app]
        command += ["--host", self.host, "--port", str(self.port)]
        command += ["--workers", str(self.processes), "--loop", "uvloop"]
        command += ["--backpressure", str(self.connections), "--backlog", str(self.backlog)]
        command += ["--http", "1", "--http1-header-read-timeout", str(self.header_timeout_ms)]
        # A stop lets requests in flight finish for 10 s (a long poll may take 30), then kills.
        command += ["--no-ws", "--respawn-failed-workers", "--workers-kill-timeout", "10"]
        if self.access_log:
            command.append("--access-log")
        return command


def from_env() -> Serving:
    host, _, port = env_str("BIND", "127.0.0.1:8000").rpartition(":")
    if not host or not port.isdigit():
        raise ImproperlyConfigured(f"BIND={host}:{port} is not HOST:PORT")
    return Serving(
        host=host.strip("[]"),
        port=int(port),
        processes=env_int("WEB_CONCURRENCY", 2, minimum=1),
        threads=env_int("WEB_THREADS", 8, minimum=1),
        queue_ms=env_int("WEB_QUEUE_MS", 100),
        long_polls=env_int("WEB_LONG_POLLS", 32),
        header_timeout_ms=env_int("WEB_HEADER_TIMEOUT_MS", 5000, minimum=1),
        body_timeout_ms=env_int("WEB_BODY_TIMEOUT_MS", 10_000, minimum=1),
        backlog=env_int("WEB_BACKLOG", 1024, minimum=128),
        access_log=env_bool("WEB_ACCESS_LOG", True),
    )


def main() -> None:
    command = from_env().command()
    os.execv(command[0], command)


if __name__ == "__main__":
    main()
