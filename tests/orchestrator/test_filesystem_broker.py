"""The embedded broker (kombu's filesystem transport) never shows a half-written message."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from kombu import Connection

from config import broker

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def connection(tmp_path):
    folders = {"data_folder_in": str(tmp_path), "data_folder_out": str(tmp_path)}
    options = folders | {"control_folder": str(tmp_path / "control")}
    with Connection("filesystem://", transport=broker.Transport, transport_options=options) as c:
        yield c


def test_the_celery_app_uses_the_atomic_transport_on_the_filesystem_broker(tmp_path):
    # In a fresh interpreter: this session's own broker may be Redis (CI).
    env = {k: v for k, v in os.environ.items() if not k.startswith("CELERY_")}
    env |= {"CELERY_BROKER_URL": "filesystem://", "FAILSIGHT_VAR_DIR": str(tmp_path)}
    code = (
        "import django; django.setup()\n"
        "from config.celery import app\n"
        "with app.connection_for_write() as c: print(type(c.transport).__module__)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "config.broker"


def test_a_message_is_unseen_by_consumers_until_it_is_complete(connection, tmp_path, monkeypatch):
    channel = connection.default_channel
    seen_before_rename = []
    real_replace = os.replace

    def replace(src, dst):
        # The moment a consumer could list the folder: nothing matches the queue yet, and the
        # file that will be renamed is already whole.
        queue_files = [n for n in os.listdir(tmp_path) if n.partition(".")[2] == "jobs.msg"]
        seen_before_rename.append((queue_files, os.path.getsize(src)))
        with pytest.raises(Exception) as empty:
            channel._get("jobs")
        assert type(empty.value).__name__ == "Empty"
        real_replace(src, dst)

    monkeypatch.setattr(broker.os, "replace", replace)
    channel._put("jobs", {"body": "hello", "n": 1})
    [(queue_files, size)] = seen_before_rename
    assert queue_files == [] and size > 0
    assert channel._get("jobs") == {"body": "hello", "n": 1}
    assert not [n for n in os.listdir(tmp_path) if n.endswith(broker.PARTIAL_SUFFIX)]
