"""`python manage.py launch` (what `make run` calls): the whole product, live, on one machine.

1. Migrates (SQLite unless DATABASE_URL says otherwise), creates a local admin (its password printed
   once, on creation), and prints an API token for local agents and a METRICS_TOKEN for /metrics
   (unless one is set): both kept in the data folder (`demo.credentials`), the same at every
   launch; a token replaced is revoked, and the launch says so.
2. Starts the fault-injecting provider (`demo.provider`) on a free port of 127.0.0.1, a real Celery
   worker with an embedded beat (kombu's filesystem broker unless CELERY_BROKER_URL says otherwise)
   whose subagents call that provider over HTTP (`demo.http_sources`), and the web server.
3. Runs a stream of research workflows (`demo.workload`: a short tour that shows every failure type,
   then a seeded random stream), printing a one-line live summary, and one external agent in its
   own process (`demo.agent`, on a token of its own) that coordinates its own workflows through
   `AgentClient` only, and acts on the resolutions of its escalations.
4. Stops cleanly on Ctrl-C, SIGTERM or after `--duration` seconds: no new workflows, then the
   agent, the web server, the worker (a warm shutdown: running tasks finish) and the provider, in
   that order. `make run` execs this command, so a signal sent to make reaches it (make itself
   passes on a SIGTERM only; a SIGINT it holds while it waits for us is seen in /proc).

Each child runs in its own session (a terminal's Ctrl-C reaches only us, so we choose the order)
and is told by the kernel to stop if we die without cleaning up. Secrets reach children in their
environment, never on a command line (`ps` shows those to everyone). Logs go to var/log/.

The worker (and the beat inside it) and the agent are supervised: when one exits on its own it
is started again, after 1 s, then twice as long each time it exits again soon after starting (at
most 30 s), and each restart is printed. A worker that lives on but consumes nothing (messages
wait while it received none for WORKER_MAX_WAIT_SECONDS: `orchestrator.liveness`) is stopped and
started again the same way. The web server or the provider stopping ends the launch.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import random
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import httpx
from django.conf import settings
from django.contrib.auth.models import Group, User
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import DatabaseError, connections
from django.utils import timezone

from demo.credentials import Issued, LocalCredentials
from demo.prices import seed_prices
from orchestrator import liveness
from orchestrator.coordination import registry

ADMIN_USERNAME = "admin"
LAUNCH_TOKEN_NAME = "local-agent (make run)"
AGENT_TOKEN_NAME = "crm-agent (make run)"
DEMO_SOURCES = "demo.http_sources"
STOP_GRACE_SECONDS = 20
RESTART_WAITS = (1.0, 30.0)  # seconds before a supervised child starts again: first, longest
RESTART_STABLE_SECONDS = 60  # a child that ran this long before exiting gets the first wait
AGENT_TOKEN_ENV = "FAILSIGHT_AGENT_TOKEN"
WORKER_NAME = f"worker@{socket.gethostname()}"  # the Procfile's default `-n worker@%h`
LIVENESS_CHECK_SECONDS = 5
# Signals a make waiting for us blocks while it waits; a terminal's Ctrl-C reaches us directly.
MAKE_STOP_SIGNALS = (signal.SIGINT, signal.SIGHUP, signal.SIGQUIT)


try:
    _LIBC: Any = ctypes.CDLL(None)
except OSError:  # pragma: no cover - not Linux
    _LIBC = None


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    """Ask Linux to SIGTERM this child if the launcher dies without stopping it (no orphans)."""
    if _LIBC is not None and hasattr(_LIBC, "prctl"):
        _LIBC.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


@dataclass
class Child:
    name: str
    proc: subprocess.Popen
    log: Path
    out: IO[Any] = field(repr=False)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> None:
        if self.alive():
            # The child alone, not its process group: a Celery worker's pool processes must be
            # stopped by the worker (a warm shutdown lets running tasks finish). Killed beside
            # it, a pool process dies holding the pool's queue lock and the worker hangs on it
            # at exit for 10-20 s before the grace period ends in a SIGKILL.
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=STOP_GRACE_SECONDS)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
        # The worker's pool children share its process group: make sure none outlived it.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.out.close()

    def tail(self, lines: int = 15) -> str:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return "\n".join(text.splitlines()[-lines:])


@dataclass
class Restart:
    """How to start a supervised child again, and when."""

    cmd: list[str]
    env: dict[str, str]
    started: float = field(default_factory=time.monotonic)
    wait: float = RESTART_WAITS[0]
    due: float | None = None
    count: int = 0

    def schedule(self, now: float) -> float:
        """Set when to start again and return the wait: the first one after a run that lasted
        (or the first exit), twice the last one after a run cut short, so that a worker that
        cannot start (a bad setting, a database refusing it) is not restarted in a tight loop."""
        lasted = now - self.started >= RESTART_STABLE_SECONDS
        first, longest = RESTART_WAITS
        self.wait = first if lasted or not self.count else min(2 * self.wait, longest)
        self.due = now + self.wait
        return self.wait


class Command(BaseCommand):
    help = "Bring up the provider, a worker, the web server and a live workload on 127.0.0.1."

    def add_arguments(self, parser: CommandParser) -> None:
        env = os.environ.get
        parser.add_argument(
            "--addr",
            default=env("LAUNCH_ADDR", "127.0.0.1:8000"),
            help="HOST:PORT the web server listens on",
        )
        parser.add_argument("--port", type=int, help="Listen on this port (of --addr's host)")
        parser.add_argument(
            "--duration",
            type=float,
            default=float(env("LAUNCH_DURATION", "0")),
            help="Stop by itself after this many seconds (0: run until Ctrl-C).",
        )
        parser.add_argument(
            "--seed",
            type=int,
            default=int(env("FAILSIGHT_DEMO_SEED", "1")),
            help="Seed of the workload and of the provider's fault mix.",
        )
        parser.add_argument(
            "--every",
            type=float,
            default=float(env("FAILSIGHT_DEMO_EVERY", "10")),
            help="Seconds between two workflows of the stream (0: the tour only).",
        )
        parser.add_argument("--no-worker", action="store_true", help="Do not start a worker")
        parser.add_argument(
            "--no-demo", action="store_true", help="No provider and no workload: serve only"
        )

    def handle(self, *args: Any, **opts: Any) -> None:
        self.stop = threading.Event()
        # First, whatever was inherited: a script's background job (`make run &`) starts with
        # SIGINT ignored, and a signal mask survives exec; both would leave Ctrl-C unheard.
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, lambda *_: self.stop.set())
        self.children: list[Child] = []
        self.restarts: dict[str, Restart] = {}  # supervised children, by name
        self.failed = ""
        self.log_dir = Path(settings.VAR_DIR) / "log"
        self.log_dir.mkdir(parents=True, exist_ok=True)
        demo = not opts["no_demo"]
        addr = _listen_addr(opts["addr"], opts["port"])
        _check_free(addr)
        threading.Thread(target=self._watch_make, daemon=True).start()
        call_command("migrate", interactive=False, verbosity=0)
        self.stdout.write(self.style.SUCCESS("Database migrated: " + _db_label()))
        self.started_at = timezone.now()
        if demo and (added := seed_prices()):
            self.stdout.write(f"Prices      {added} demonstration prices added to the price table")
        password = self._bootstrap_admin()
        self.credentials = LocalCredentials(Path(settings.VAR_DIR))
        token = self.credentials.api_token("api", LAUNCH_TOKEN_NAME, note="launch")
        metrics = os.environ.get("METRICS_TOKEN") or self.credentials.secret("metrics")
        env = os.environ.copy() | {"METRICS_TOKEN": metrics}
        if self.stop.is_set():  # interrupted while migrating: nothing started yet
            self.stdout.write("Stopped before starting anything.")
            return
        try:
            if demo:
                env |= self._start_provider(opts["seed"])
            if not opts["no_worker"]:
                self._start_worker(env)
            self._start_web(addr, env)
            if demo:
                self._start_agent(addr, opts["seed"])
            self._banner(addr, password, token, metrics)
            if demo:
                self.stdout.write(
                    "Workload    a tour of every failure type, then a seeded stream of research "
                    "workflows. Ctrl-C stops everything.\n"
                )
            self._run(opts, demo)
        finally:
            self._shutdown()
        if self.failed:
            raise CommandError(self.failed)

    # -----------------------------------------------------------------------------------------
    # Bootstrap

    def _bootstrap_admin(self) -> str | None:
        if User.objects.filter(username=ADMIN_USERNAME).exists():
            return None
        password = secrets.token_urlsafe(12)
        user = User.objects.create_superuser(ADMIN_USERNAME, password=password)
        user.groups.add(*Group.objects.filter(name__in=["operators", "policy editors"]))
        return password

    def _watch_make(self) -> None:
        """Stop when the make that execs us got a signal meant for it alone: GNU make does not
        pass a SIGINT on to its recipe, it blocks the signal and waits for the recipe to end."""
        parent = os.getppid()
        status = Path(f"/proc/{parent}/status")
        try:
            if status.with_name("comm").read_text().strip() not in ("make", "gmake"):
                return
        except OSError:
            return
        if _ignores(status, signal.SIGINT):
            self.stderr.write(
                "make ignores SIGINT (started in the background of a script): a SIGINT sent "
                "to make is lost. Stop with SIGTERM to make, or SIGINT to the launcher "
                f"({os.getpid()})."
            )
        wanted = sum(1 << (s - 1) for s in MAKE_STOP_SIGNALS)
        while not self.stop.wait(0.25):
            try:
                lines = status.read_text().splitlines()
                blocked = int(next(x for x in lines if x.startswith("SigBlk:")).split()[1], 16)
            except (OSError, ValueError, StopIteration, IndexError):
                return
            if blocked & wanted or os.getppid() != parent:
                self.stderr.write("make was interrupted: stopping.")
                self.stop.set()
                return

    # -----------------------------------------------------------------------------------------
    # Children

    def _spawn(self, name: str, cmd: list[str], env: dict[str, str]) -> Child:
        log = self.log_dir / f"{name}.log"
        out = log.open("a", encoding="utf-8")
        out.write(f"\n--- {time.strftime('%Y-%m-%d %H:%M:%S')} {' '.join(cmd)}\n")
        out.flush()
        proc = subprocess.Popen(
            cmd,
            cwd=settings.BASE_DIR,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE if name == "provider" else out,
            stderr=out,
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )
        child = Child(name, proc, log, out)
        self.children.append(child)
        return child

    def _start_provider(self, seed: int) -> dict[str, str]:
        log = str(self.log_dir / "provider-requests.jsonl")
        cmd = [sys.executable, "-m", "demo.provider", "--seed", str(seed), "--log", log]
        child = self._spawn("provider", cmd, os.environ.copy())
        line = child.proc.stdout.readline().decode().strip() if child.proc.stdout else ""
        if not line.startswith("listening on "):
            raise CommandError(f"The demo provider did not start:\n{child.tail()}")
        url = line.removeprefix("listening on ")
        self.provider_url = url
        # This process starts workflows and asks the registry which sources a capability has.
        settings.FAILSIGHT_SOURCE_MODULES = [DEMO_SOURCES]
        registry.use_registry(None)
        self.stdout.write(f"Fault-injecting provider on {url} (seed {seed})")
        return {"FAILSIGHT_PROVIDER_URL": url, "FAILSIGHT_SOURCE_MODULES": DEMO_SOURCES}

    def _start_worker(self, env: dict[str, str]) -> None:
        cmd = [sys.executable, "-m", "celery", "-A", "config", "worker", "-B"]
        cmd += ["--loglevel", "INFO", "--concurrency", "2"]
        cmd += ["--without-mingle", "--without-gossip", "-n", "worker@%h"]  # see the Procfile
        if settings.CELERY_BROKER_URL.startswith("filesystem://"):
            # Nothing listens to heartbeats on this broker (orchestrator.workers says why).
            cmd.append("--without-heartbeat")
        cmd += ["--schedule", settings.CELERY_BEAT_SCHEDULE_FILENAME]
        self._spawn("worker", cmd, env)
        self.restarts["worker"] = Restart(cmd, env)
        self.stdout.write(f"Celery worker with beat on {_broker_label()}")

    def _start_web(self, addr: str, env: dict[str, str]) -> None:
        """The web server as shipped (`config.serve`, as the Procfile's `web`) on `addr`."""
        host, _, port = addr.rpartition(":")
        child = self._spawn("web", [sys.executable, "-m", "config.serve"], env | {"BIND": addr})
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and child.alive() and not self.stop.is_set():
            with contextlib.suppress(OSError), socket.create_connection((host, int(port)), 0.5):
                return
            time.sleep(0.2)
        if not self.stop.is_set():
            raise CommandError(f"The web server did not start on {addr}:\n{child.tail()}")

    def _start_agent(self, addr: str, seed: int) -> None:
        """One external agent in its own process (`demo.agent`), on its own token: its
        escalations wait in the review queue beside the built-in coordinator's."""
        issued = self.credentials.api_token(
            "agent", AGENT_TOKEN_NAME, note="launch: the external agent"
        )
        cmd = [sys.executable, "-m", "demo.agent", "--url", f"http://{addr}"]
        cmd += ["--provider", self.provider_url, "--seed", str(seed)]
        env = os.environ.copy() | {AGENT_TOKEN_ENV: issued.secret}
        self._spawn("agent", cmd, env)
        self.restarts["agent"] = Restart(cmd, env)
        self.stdout.write("External agent (crm-agent, its own coordinator) on the API")

    def _banner(self, addr: str, password: str | None, token: Issued, metrics: str) -> None:
        w, ok = self.stdout.write, self.style.SUCCESS
        w(ok(f"\nDashboard   http://{addr}/") + '   (another port: make run ARGS="--port N")')
        if password:
            w(ok(f"Log in as   {ADMIN_USERNAME} / {password}   (shown once)"))
        else:
            w(
                f"Log in as   {ADMIN_USERNAME} (password printed at first launch; "
                "`manage.py changepassword admin` resets it)"
            )
        w(ok(f"API token   {token.secret}   (for agents: Authorization: Bearer …)"))
        w(f"            {_token_story(token, self.credentials.path)}")
        if os.environ.get("METRICS_TOKEN"):
            w(f"Metrics     http://{addr}/metrics   (Bearer: your METRICS_TOKEN)")
        else:
            w(ok(f"Metrics     http://{addr}/metrics   (Authorization: Bearer {metrics})"))
        w(f"API docs    http://{addr}/api/v1/docs   ·   admin http://{addr}/admin/")
        w(f"Logs        {self.log_dir}/")

    # -----------------------------------------------------------------------------------------
    # The live loop

    def _run(self, opts: dict[str, Any], demo: bool) -> None:
        from demo import workload

        rng = random.Random(opts["seed"])
        started = time.monotonic()
        next_flow = started + opts["every"]
        next_line = started
        next_liveness = started + LIVENESS_CHECK_SECONDS
        tty = self.stdout.isatty()
        tour = demo
        while not self.stop.is_set():
            now = time.monotonic()
            if opts["duration"] and now - started >= opts["duration"]:
                break
            dead = [c for c in self.children if not c.alive()]
            if lost := [c for c in dead if c.name not in self.restarts]:
                self.failed = f"The {lost[0].name} stopped unexpectedly:\n{lost[0].tail()}"
                break
            for child in dead:
                self._restart(child, now)
            if now >= next_liveness:
                next_liveness = now + LIVENESS_CHECK_SECONDS
                self._check_consuming()
            try:
                if tour:
                    workload.start_tour()
                    tour = False
                if demo and opts["every"] > 0 and now >= next_flow:
                    next_flow = now + opts["every"]
                    workload.start_random(rng)
                if now >= next_line:
                    next_line = now + (2 if tty else 10)
                    self._live_line(tty, workload.summary() if demo else "")
            except DatabaseError as exc:  # the workload and the line wait; the children go on
                self.stderr.write(f"\nThe database failed ({exc}); trying again shortly.")
                connections.close_all()
            self.stop.wait(0.25)
        if tty:
            self.stdout.write("")

    def _restart(self, child: Child, now: float) -> None:
        """Start a supervised child that exited again once its wait is over, saying so."""
        plan = self.restarts[child.name]
        if plan.due is None:
            wait = plan.schedule(now)
            self.stderr.write(
                f"The {child.name} exited (code {child.proc.returncode}); "
                f"starting it again in {wait:.0f} s. Its log: {child.log}"
            )
        elif now >= plan.due:
            child.stop()  # whatever it left behind in its process group, and its log file
            self.children.remove(child)
            self._spawn(child.name, plan.cmd, plan.env)
            plan.started, plan.due, plan.count = now, None, plan.count + 1
            self.stderr.write(f"The {child.name} started again (restart {plan.count})")

    def _check_consuming(self) -> None:
        """Stop a worker that lives on but consumes nothing: the supervision starts it again."""
        worker = next((c for c in self.children if c.name == "worker" and c.alive()), None)
        plan = self.restarts.get("worker")
        # A worker younger than the bound is still starting: its pulse may be its predecessor's.
        if (
            worker is None
            or not plan
            or time.monotonic() - plan.started < settings.WORKER_MAX_WAIT_SECONDS
        ):
            return
        try:
            verdicts = liveness.judge([WORKER_NAME], settings.WORKER_MAX_WAIT_SECONDS)
        except DatabaseError:
            connections.close_all()
            return  # judged again at the next check, once the database answers
        stalled = [v for v in verdicts or [] if v.stalled]
        if not stalled:
            return
        self.stderr.write(
            f"\nThe worker is not consuming: {stalled[0].describe(timezone.now())}; stopping it."
        )
        worker.stop()  # a warm shutdown first: its running tasks finish; then it is restarted

    def _live_line(self, tty: bool, text: str) -> None:
        if not text:
            return
        text += self._provider_stats()
        if tty:
            self.stdout.write("\r\033[K" + text, ending="")
            self.stdout.flush()
        else:
            self.stdout.write(time.strftime("%H:%M:%S ") + text)

    def _provider_stats(self) -> str:
        url = getattr(self, "provider_url", "")
        if not url:
            return ""
        try:
            stats = httpx.get(f"{url}/v1/stats", timeout=1).json()
        except (httpx.HTTPError, ValueError):
            return ""
        if not isinstance(stats, dict):
            return ""
        return (
            f" · provider {stats.get('requests', 0)} calls, "
            f"{stats.get('status:429', 0)} rate limits, "
            f"{stats.get('early_repeats', 0)} repeats before Retry-After"
        )

    def _shutdown(self) -> None:
        from demo import workload

        order = {"agent": 0, "web": 1, "worker": 2, "provider": 3}
        for child in sorted(self.children, key=lambda c: order.get(c.name, 9)):
            child.stop()
        self.stdout.write(
            self.style.SUCCESS("Stopped: agent, web server, worker and provider are down.")
        )
        # The last line: where the run ended, the queue a person has to look at, what it cost.
        with contextlib.suppress(Exception):
            since = getattr(self, "started_at", None) or timezone.now()
            self.stdout.write(f"Final: {workload.summary()} · {workload.figures(since)}")


def _ignores(status: Path, signum: int) -> bool:
    """Whether the process of this /proc status ignores `signum`."""
    try:
        lines = status.read_text().splitlines()
        ignored = int(next(x for x in lines if x.startswith("SigIgn:")).split()[1], 16)
    except (OSError, ValueError, StopIteration, IndexError):
        return False
    return bool(ignored & (1 << (signum - 1)))


def _listen_addr(addr: str, port: int | None) -> str:
    host, sep, old = addr.rpartition(":")
    if not sep or not old.isdigit():
        raise CommandError(f"--addr wants HOST:PORT, not {addr!r}")
    return f"{host}:{port}" if port is not None else addr


def _check_free(addr: str) -> None:
    """Refuse a port another server listens on (the readiness check would take it for ours)."""
    host, _, port = addr.rpartition(":")
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, int(port)))
        except OSError as exc:
            raise CommandError(
                f"Cannot listen on {addr} ({exc.strerror}). Another port: "
                f'make run ARGS="--port {int(port) + 1}"'
            ) from None


def _token_story(token: Issued, kept_in: Path) -> str:
    if token.kept:
        return f"(the same at every launch: kept in {kept_in})"
    if token.revoked:
        return f"(new: the previous one, {', '.join(h + '…' for h in token.revoked)}, is revoked)"
    if token.lost:
        return f"(new: the one kept in {kept_in} was revoked, or is of another database)"
    return f"(new, kept in {kept_in} for the next launches)"


def _db_label() -> str:
    db = settings.DATABASES["default"]
    return f"{db['ENGINE'].rsplit('.', 1)[-1]} {db['NAME']}"


def _broker_label() -> str:
    url = settings.CELERY_BROKER_URL
    return "kombu's filesystem broker (var/broker)" if url.startswith("filesystem") else url
