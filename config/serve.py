"""The web server as shipped: granian serving `config.wsgi`, every setting of it in this module.

    python -m config.serve          # what the Procfile's `web`, `make run` and the tests run

granian (HTTP parsing, keep-alive and timeouts in Rust) hands each request to one of its Python
threads. In front of Django, `config.wsgi` admits WEB_THREADS requests per process at once; a
newcomer waits at most WEB_QUEUE_MS for one of them to finish, else it is answered 503 with
Retry-After at once (`orchestrator.api.overload.Admission`); a long poll gives its slot back
while it waits, up to WEB_LONG_POLLS at once. granian runs a thread for each of those and a few
more, so that the excess reaches the admission and is refused instead of waiting unseen.

| variable | default | what |
|---|---|---|
| `BIND` | `127.0.0.1:8000` | address and port to listen on |
| `WEB_CONCURRENCY` | `2` | processes (one per core) |
| `WEB_THREADS` | `8` | requests each process works on at once |
| `WEB_QUEUE_MS` | `100` | longest wait for a work slot before a 503 |
| `WEB_LONG_POLLS` | `32` | long polls (`?wait=S`) each process holds at once; more answer at once |
| `WEB_HEADER_TIMEOUT_MS` | `5000` | a client must send its request head within this |
| `WEB_BACKLOG` | `1024` | the kernel's queue of connections not yet accepted |
| `WEB_ACCESS_LOG` | `1` | one line per request on stdout |

Each value is read with the settings module's helpers (a bad one fails loudly).
"""

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
    backlog: int
    access_log: bool

    @property
    def waiting(self) -> int:
        """How many requests of a process may wait for a work slot; more are refused at once."""
        return 2 * self.threads

    @property
    def server_threads(self) -> int:
        """granian's Python threads per process: the working, the waiting for a slot, the long
        polls and a few to refuse."""
        return self.threads + self.waiting + self.long_polls + 8

    @property
    def connections(self) -> int:
        """Open connections per process granian accepts (its `--backpressure`, which counts
        connections, idle keep-alive ones included): the excess waits in the kernel's queue."""
        return max(self.backlog, 1024)

    def command(self, app: str = "config.wsgi:application") -> list[str]:
        """The granian command line serving `app` with these settings."""
        command = [sys.executable, "-m", "granian", "--interface", "wsgi", app]
        command += ["--host", self.host, "--port", str(self.port)]
        command += ["--workers", str(self.processes)]
        command += ["--blocking-threads", str(self.server_threads)]
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
        backlog=env_int("WEB_BACKLOG", 1024, minimum=128),
        access_log=env_bool("WEB_ACCESS_LOG", True),
    )


def main() -> None:
    command = from_env().command()
    os.execv(command[0], command)


if __name__ == "__main__":
    main()
