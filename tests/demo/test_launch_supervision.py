"""`manage.py launch` (what `make run` calls) supervises its children and heeds the signals sent
to `make run`.

The worker is SIGKILLed with its whole process group (main process and pool, as an OOM kill or a
crash leaves it); the launcher must say so, start a new worker after a short wait, and that
worker must take work: its embedded beat's sweeps run in it. A SIGINT sent to make alone (which
make does not pass on) must stop the launcher promptly. Runs on the embedded defaults (SQLite,
kombu's filesystem broker) like the main job's own test, whose helpers it uses.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import sys
import time
from pathlib import Path

import pytest
from celery import Celery

from tests.conftest import require_service
from tests.demo.test_main_job import Launch, assert_no_orphans, command_line, finish, launch
from tests.services import PrivateRedis

pytestmark = pytest.mark.slow


def worker_pids(handle: Launch) -> list[int]:
    """The launcher's Celery worker main processes (its pool processes are their children)."""
    found = []
    for pid in handle.processes():
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            parent = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError):
            continue
        if parent == handle.proc.pid and b"celery" in cmdline and b"worker" in cmdline:
            found.append(pid)
    return found


def wait_for(check, timeout: float, what: str, handle: Launch):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := check():
            return value
        time.sleep(0.2)
    pytest.fail(f"timed out waiting for {what}:\n{handle.output}\n{handle.logs()}")


def test_a_killed_worker_is_started_again_and_takes_work(tmp_path):
    handle = launch(tmp_path, "--no-demo")
    worker_log = tmp_path / "log" / "worker.log"
    try:
        handle.wait_for_line(r"Dashboard\s+http://", 120)
        (first,) = wait_for(lambda: worker_pids(handle), 30, "the worker", handle)
        wait_for(lambda: "ready." in worker_log.read_text(), 90, "the worker to be ready", handle)

        os.killpg(first, signal.SIGKILL)
        handle.wait_for_line(r"The worker exited \(code -9\); starting it again in 1 s", 30)
        handle.wait_for_line(r"The worker started again \(restart 1\)", 30)
        (second,) = wait_for(lambda: worker_pids(handle), 30, "a new worker", handle)
        assert second != first

        def took_work_after_restart() -> bool:
            after = worker_log.read_text(errors="replace").rsplit("\n--- ", 1)[-1]
            return "ready." in after and bool(re.search(r"Task \S+ succeeded", after))

        wait_for(took_work_after_restart, 90, "the new worker to run a task", handle)
        assert handle.proc.poll() is None  # the launch goes on
        handle.proc.send_signal(signal.SIGINT)
        assert finish(handle, 60) == 0, handle.output + handle.logs()
    finally:
        if handle.proc.poll() is None:
            handle.proc.kill()
    assert "stopped unexpectedly" not in handle.output
    assert "Stopped:" in handle.output
    assert_no_orphans(handle)


def parent_of(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def end(handle: Launch, launcher: int = 0) -> None:
    """Whatever a test left running: make (or the launcher), and a launcher under make."""
    if handle.proc.poll() is None:
        handle.proc.kill()
    if launcher and launcher in handle.processes():
        os.kill(launcher, signal.SIGTERM)  # its children follow it


def test_a_sigint_sent_to_make_run_alone_stops_the_launcher_promptly(tmp_path):
    require_service(shutil.which("make") is not None, "make")
    # The checkout's Makefile, with this interpreter and no install step.
    cmd = ["make", "-s", "run", "STAMP=", f"PY={sys.executable}", "ARGS=--every 0"]
    handle = launch(tmp_path, cmd=cmd)
    launcher = 0
    try:
        handle.wait_for_line(r"Dashboard\s+http://", 120)
        (launcher,) = [pid for pid in handle.processes() if "manage.py launch" in command_line(pid)]
        assert parent_of(launcher) == handle.proc.pid, "a shell stands between make and it"
        handle.proc.send_signal(signal.SIGINT)  # make's pid only, not its process group
        sent = time.monotonic()
        finish(handle, 40)
        took = time.monotonic() - sent
    finally:
        end(handle, launcher)
    assert "make was interrupted: stopping." in handle.output
    assert "Stopped: agent, web server, worker and provider are down." in handle.output
    assert took < 30, f"{took:.0f} s"
    assert_no_orphans(handle)


def test_a_worker_that_stops_consuming_is_stopped_and_started_again(tmp_path, monkeypatch):
    """The worker's consumer is cancelled through Celery's remote control (on for this test
    only): its process lives on, its beat sends on, and it takes nothing. The launcher must see
    the messages wait while the worker receives none, and replace it within a minute."""
    require_service(shutil.which("redis-server") is not None, "redis-server")
    redis = PrivateRedis().start()
    env = {
        "CELERY_BROKER_URL": redis.url(0),
        "CELERY_TASK_DEFAULT_QUEUE": "celery",
        "CELERY_WORKER_REMOTE_CONTROL": "1",
        "WORKER_MAX_WAIT_SECONDS": "15",
    }
    handle = launch(tmp_path, "--no-demo", env=env)
    worker_log = tmp_path / "log" / "worker.log"
    try:
        handle.wait_for_line(r"Dashboard\s+http://", 120)
        (first,) = wait_for(lambda: worker_pids(handle), 30, "the worker", handle)
        wait_for(lambda: "ready." in worker_log.read_text(), 90, "the worker to be ready", handle)
        wait_for(
            lambda: re.search(r"Task \S+ succeeded", worker_log.read_text()), 60, "a task", handle
        )

        # Celery reads CELERY_BROKER_URL (this suite's broker) before its own broker argument.
        monkeypatch.setenv("CELERY_BROKER_URL", redis.url(0))
        replies = Celery().control.cancel_consumer(
            "celery", destination=[f"worker@{socket.gethostname()}"], reply=True, timeout=10
        )
        assert replies, "the worker did not answer the remote control"
        frozen = time.monotonic()
        assert first in worker_pids(handle)  # alive, consuming nothing

        handle.wait_for_line(r"The worker is not consuming: .* NOT CONSUMING since", 75)
        handle.wait_for_line(r"The worker started again \(restart 1\)", 60)
        replaced = time.monotonic() - frozen
        (second,) = wait_for(lambda: worker_pids(handle), 30, "a new worker", handle)
        assert second != first
        print(f"replaced {replaced:.1f} s after its consumer stopped")
        assert replaced < 60, f"replaced {replaced:.0f} s after its consumer stopped"

        def took_work_after_restart() -> bool:
            after = worker_log.read_text(errors="replace").rsplit("\n--- ", 1)[-1]
            return "ready." in after and bool(re.search(r"Task \S+ succeeded", after))

        wait_for(took_work_after_restart, 90, "the new worker to run a task", handle)
        handle.proc.send_signal(signal.SIGINT)
        assert finish(handle, 60) == 0, handle.output + handle.logs()
    finally:
        if handle.proc.poll() is None:
            handle.proc.kill()
        redis.remove()
    assert_no_orphans(handle)


def signals_as_in_a_scripts_background_job() -> None:  # in the child between fork and exec
    """SIGINT ignored, as `make run &` in a non-interactive shell starts it, and blocked (a signal
    mask survives exec too)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})


def test_make_run_in_a_scripts_background_still_stops_on_sigint(tmp_path):
    require_service(shutil.which("make") is not None, "make")
    cmd = ["make", "-s", "run", "STAMP=", f"PY={sys.executable}", "ARGS=--no-demo"]
    handle = launch(tmp_path, cmd=cmd, preexec_fn=signals_as_in_a_scripts_background_job)
    launcher = 0
    try:
        handle.wait_for_line(r"Dashboard\s+http://", 120)
        (launcher,) = [pid for pid in handle.processes() if "manage.py launch" in command_line(pid)]
        # make keeps SIGINT ignored and cannot pass it on: the launcher says where to send it.
        assert f"SIGINT to the launcher ({launcher})" in handle.output
        os.kill(launcher, signal.SIGINT)
        finish(handle, 40)
    finally:
        end(handle, launcher)
    assert "Stopped: agent, web server, worker and provider are down." in handle.output
    assert_no_orphans(handle)


def test_the_launcher_heeds_sigint_whatever_it_inherited(tmp_path):
    handle = launch(tmp_path, "--no-demo", preexec_fn=signals_as_in_a_scripts_background_job)
    try:
        handle.wait_for_line(r"Dashboard\s+http://", 120)
        handle.proc.send_signal(signal.SIGINT)
        assert finish(handle, 40) == 0, handle.output + handle.logs()
    finally:
        end(handle)
    assert "Stopped: agent, web server, worker and provider are down." in handle.output
    assert_no_orphans(handle)
