"""Private servers for tests that stop, kill or restart them: a PostgreSQL cluster, a Redis
server and the app's own processes, on free ports of this machine.

The machine's shared PostgreSQL and Redis serve every test run at once and are never touched:
a test that needs a database or a broker to fail starts its own here and removes it afterwards.
`benchmarks/chaos.py` uses the same helpers.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import signal
import socket
import string
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx

ROOT = Path(__file__).resolve().parent.parent
VENV_BIN = Path(sys.executable).parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_until(check: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.1)
    raise TimeoutError(f"timed out after {timeout} s waiting for {what}")


def listening(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def postgres_bin() -> Path | None:
    """The folder of PostgreSQL's server programs (initdb, pg_ctl), if installed."""
    found = shutil.which("pg_ctl")
    if found:
        return Path(found).resolve().parent
    versions = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
    return Path(versions[-1]).parent if versions else None


def available() -> bool:
    return postgres_bin() is not None and shutil.which("redis-server") is not None


def _as_postgres(cmd: list[str]) -> list[str]:
    # initdb and the server refuse to run as root: run them as the `postgres` system user.
    return ["runuser", "-u", "postgres", "--", *cmd] if os.geteuid() == 0 else cmd


@dataclass
class PrivatePostgres:
    """A throwaway cluster: trust auth on 127.0.0.1, no fsync (it need not survive the machine
    crashing, only its own server crashing: every commit still reaches the WAL first)."""

    port: int = field(default_factory=free_port)
    root: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="failsight-pg-")))

    @property
    def data(self) -> Path:
        return self.root / "data"

    def url(self, database: str = "postgres") -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/{database}"

    def _run(self, *args: str, timeout: float = 120) -> None:
        done = subprocess.run(
            _as_postgres([str(postgres_bin() / args[0]), *args[1:]]),
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if done.returncode:
            raise RuntimeError(f"{args[0]} failed: {done.stdout}{done.stderr}")

    def init(self) -> PrivatePostgres:
        if os.geteuid() == 0:
            shutil.chown(self.root, "postgres", "postgres")
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "-A", "trust", "--no-sync")
        return self.start()

    def start(self) -> PrivatePostgres:
        options = (
            f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off "
            "-c full_page_writes=off -c max_connections=100"
        )
        log = self.root / "server.log"
        self._run("pg_ctl", "-D", str(self.data), "-o", options, "-l", str(log), "-w", "start")
        return self

    def stop(self, mode: str = "fast") -> None:
        """Stop the server; `immediate` is a crash (no clean shutdown, connections cut)."""
        with contextlib.suppress(RuntimeError):
            self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "stop")

    def restart(self, mode: str = "fast") -> None:
        self.stop(mode)
        self.start()

    def create_database(self, name: str) -> str:
        import psycopg

        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def remove(self) -> None:
        self.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)


@dataclass
class PrivateRedis:
    """A Redis server that keeps nothing on disk: a restart loses every queued message."""

    port: int = field(default_factory=free_port)
    root: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="failsight-redis-")))
    proc: subprocess.Popen | None = None

    def url(self, db: int = 0) -> str:
        return f"redis://127.0.0.1:{self.port}/{db}"

    def start(self) -> PrivateRedis:
        cmd = ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", ""]
        cmd += ["--appendonly", "no", "--dir", str(self.root), "--loglevel", "warning"]
        self.proc = subprocess.Popen(
            cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
        )
        wait_until(lambda: listening(self.port), 15, "the private Redis to listen")
        return self

    def kill(self) -> None:
        """SIGKILL: what the server held in memory (queued and unacknowledged tasks) is gone."""
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=10)

    def restart(self) -> None:
        self.kill()
        self.start()

    def remove(self) -> None:
        self.kill()
        shutil.rmtree(self.root, ignore_errors=True)


def manage(env: dict[str, str], *args: str, timeout: float = 300) -> str:
    done = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if done.returncode:
        raise RuntimeError(f"manage.py {' '.join(args)} failed:\n{done.stdout}{done.stderr}")
    return done.stdout.strip()


@dataclass
class Process:
    """A long-running command in a session (process group) of its own, logging to a file."""

    name: str
    command: str
    env: dict[str, str]
    log: Path
    proc: subprocess.Popen | None = None

    def start(self) -> Process:
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                ["bash", "-c", self.command],
                cwd=ROOT,
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        return self

    def text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Signal the whole group: the main process and every child (a worker's pool too)."""
        if self.proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, sig)
        if sig == signal.SIGKILL:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=10)

    def stop(self, grace: float = 10) -> None:
        if self.proc is None:
            return
        self.kill(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=grace)
        self.kill(signal.SIGKILL)


def start_web(env: dict[str, str], log: Path, **settings: str) -> tuple[Process, str]:
    """Start the web server as shipped (the Procfile's `web`: `config.serve`) on a free port,
    with `settings` on top of `env`; return it and its base URL once it answers."""
    port = free_port()
    env = env | {"BIND": f"127.0.0.1:{port}", **settings}
    process = Process("web", procfile()["web"], env, log).start()
    return process, web_url(process, port)


def web_url(process: Process, port: int, timeout: float = 60) -> str:
    """The base URL of a web server started on `port`, once it answers there."""
    url = f"http://127.0.0.1:{port}"

    def answers() -> bool:
        if process.proc is not None and process.proc.poll() is not None:
            raise RuntimeError(f"{process.name} exited:\n{process.text()[-3000:]}")
        with contextlib.suppress(httpx.HTTPError):
            return httpx.get(f"{url}/api/v1/ready-check", timeout=2).status_code > 0
        return False

    wait_until(answers, timeout, "the web server to answer")
    return url


def procfile() -> dict[str, str]:
    """The Procfile's commands by process type (the way production runs them)."""
    entries = {}
    for line in (ROOT / "Procfile").read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            name, _, command = line.partition(":")
            entries[name.strip()] = command.strip()
    return entries


def app_env(database_url: str, broker_url: str, cache_url: str, var: Path) -> dict[str, str]:
    """The environment of the app's processes (DEBUG off) on these servers."""
    return os.environ | {
        "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}",
        "DATABASE_URL": database_url,
        "CELERY_BROKER_URL": broker_url,
        "CACHE_URL": cache_url,
        "DEBUG": "0",
        "SECRET_KEY": "test-only-secret-" + "k" * 48,
        "ALLOWED_HOSTS": "127.0.0.1,localhost",
        "FAILSIGHT_VAR_DIR": str(var),
        "LOG_LEVEL": "WARNING",
    }


def bench_database_url(suffix: str) -> str | None:
    """A benchmark smoke test's own database: DATABASE_URL's name with `suffix`, on the same
    server (two checkouts sharing one PostgreSQL never load into each other's database), and the
    pytest-xdist worker's name (each worker may run a module's fixture); None when DATABASE_URL
    is not PostgreSQL."""
    url = os.environ.get("DATABASE_URL", "")
    if not url.startswith(("postgres://", "postgresql://")):
        return None
    parts = urlsplit(url)
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    name = parts.path.strip("/") + suffix + (f"_{worker}" if worker else "")
    return urlunsplit(parts._replace(path=f"/{name}"))


NGINX_TEMPLATE = ROOT / "deploy" / "nginx" / "failsight.conf.template"


def nginx_bin() -> str | None:
    """Debian's nginx (scripts/ensure-nginx installs it), if installed."""
    return shutil.which("nginx") or next(
        (path for path in ("/usr/sbin/nginx",) if os.access(path, os.X_OK)), None
    )


@dataclass
class PrivateNginx:
    """nginx with the shipped config (deploy/nginx/failsight.conf.template) in front of an app
    server, on a free port, with its prefix, temp folders and logs in a folder of its own."""

    upstream: str
    static_root: Path
    port: int = field(default_factory=free_port)
    root: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="failsight-nginx-")))
    proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def error_log(self) -> Path:
        return self.root / "error.log"

    def site(self) -> str:
        """The shipped file rendered as envsubst renders it, with this instance's values."""
        values = {
            "FAILSIGHT_LISTEN": f"127.0.0.1:{self.port}",
            "FAILSIGHT_UPSTREAM": self.upstream,
            "FAILSIGHT_SERVER_NAME": "127.0.0.1",
            "FAILSIGHT_STATIC_ROOT": str(self.static_root),
        }
        # safe_substitute leaves nginx's own $variables as they are, as envsubst with a list does.
        return string.Template(NGINX_TEMPLATE.read_text()).safe_substitute(values)

    def main_config(self) -> str:
        """What Debian's /etc/nginx/nginx.conf sets around conf.d, with this folder's paths."""
        temp = "\n".join(
            f"    {kind}_temp_path {self.root / kind};"
            for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
        )
        # As root, workers would run as `nobody`, which cannot enter pytest's private folders.
        user = "user root;\n" if os.geteuid() == 0 else ""
        return (
            f"{user}worker_processes 1;\npid {self.root / 'nginx.pid'};\n"
            f"error_log {self.error_log} info;\nevents {{ worker_connections 512; }}\n"
            f"http {{\n    include /etc/nginx/mime.types;\n"
            f"    default_type application/octet-stream;\n{temp}\n"
            f"    access_log {self.root / 'access.log'};\n"
            f"    include {self.root / 'failsight.conf'};\n}}\n"
        )

    def start(self) -> PrivateNginx:
        binary = nginx_bin()
        if binary is None:
            raise RuntimeError("nginx is not installed (scripts/ensure-nginx installs it)")
        (self.root / "failsight.conf").write_text(self.site())
        (self.root / "nginx.conf").write_text(self.main_config())
        command = [binary, "-p", str(self.root), "-c", str(self.root / "nginx.conf")]
        command += ["-e", str(self.error_log), "-g", "daemon off;"]
        with (self.root / "stderr.log").open("ab") as out:
            self.proc = subprocess.Popen(
                command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )

        def up() -> bool:
            if self.proc is not None and self.proc.poll() is not None:
                log = (self.root / "stderr.log").read_text() + self.error_log.read_text()
                raise RuntimeError(f"nginx exited:\n{log[-3000:]}")
            return listening(self.port)

        wait_until(up, 30, "nginx to listen")
        return self

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGQUIT)  # graceful: answers in flight are finished
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)

    def remove(self) -> None:
        self.stop()


# The scripts themselves: the wrappers on PATH switch to the `rabbitmq` user and its settings.
RABBITMQ_BIN = Path("/usr/lib/rabbitmq/bin")


def rabbitmq_bin(name: str) -> str:
    own = RABBITMQ_BIN / name
    return str(own) if own.exists() else (shutil.which(name) or name)


def rabbitmq_available() -> bool:
    return shutil.which(rabbitmq_bin("rabbitmq-server")) is not None


@dataclass
class PrivateRabbitMQ:
    """A RabbitMQ node of its own (its name, ports, data and Erlang cookie in a temporary folder;
    no plugins): an outage stops its application, which closes every connection and the
    listener, and starts it again; the Erlang VM and the durable queues' messages stay."""

    port: int = field(default_factory=free_port)
    dist_port: int = field(default_factory=free_port)
    root: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="failsight-rmq-")))
    proc: subprocess.Popen | None = None

    @property
    def node(self) -> str:
        return f"fs-{self.port}@localhost"

    def url(self) -> str:
        return f"amqp://guest:guest@127.0.0.1:{self.port}//"

    def env(self) -> dict[str, str]:
        (self.root / "plugins").touch()
        conf = self.root / "rabbitmq.conf"
        conf.write_text(f"listeners.tcp.local = 127.0.0.1:{self.port}\nloopback_users = none\n")
        return os.environ | {
            "HOME": str(self.root),  # its own Erlang cookie
            "RABBITMQ_CONF_ENV_FILE": "/dev/null",  # not the machine's node's settings
            "RABBITMQ_CONFIG_FILE": str(conf),
            "RABBITMQ_NODENAME": self.node,
            "RABBITMQ_NODE_PORT": str(self.port),
            "RABBITMQ_DIST_PORT": str(self.dist_port),
            "RABBITMQ_MNESIA_BASE": str(self.root / "mnesia"),
            "RABBITMQ_LOG_BASE": str(self.root / "log"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(self.root / "plugins"),
            "ERL_EPMD_ADDRESS": "127.0.0.1",
        }

    def start(self) -> PrivateRabbitMQ:
        with (self.root / "server.log").open("ab") as out:
            self.proc = subprocess.Popen(
                [rabbitmq_bin("rabbitmq-server")],
                env=self.env(),
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        wait_until(lambda: listening(self.port), 120, "the private RabbitMQ to listen")
        return self

    def ctl(self, *args: str) -> None:
        done = subprocess.run(
            [rabbitmq_bin("rabbitmqctl"), "-n", self.node, *args],
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=120,
        )
        if done.returncode:
            raise RuntimeError(f"rabbitmqctl {' '.join(args)} failed: {done.stdout}{done.stderr}")

    def stop_app(self) -> None:
        self.ctl("stop_app")

    def start_app(self) -> None:
        self.ctl("start_app")
        wait_until(lambda: listening(self.port), 60, "the private RabbitMQ to listen again")

    def remove(self) -> None:
        with contextlib.suppress(RuntimeError, subprocess.TimeoutExpired):
            self.ctl("stop")
        if self.proc is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=10)
        shutil.rmtree(self.root, ignore_errors=True)
