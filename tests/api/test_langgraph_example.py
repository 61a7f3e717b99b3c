"""docs/langgraph.md's example, run as it is written: a real LangGraph graph in its own process
calls a CRM stand-in (a real HTTP server answering 401 to the old key), reports its runs to a
live server, is interrupted by the escalation, and resumes with the operator's resolution once
the key was rotated in the agent's secret store; neither key is stored anywhere."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import pytest

from orchestrator.coordination.actions import do_resolve_review
from orchestrator.models import ApiToken, AuditEntry, ReviewItem, Run
from orchestrator.vocabulary import Channel

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True, serialized_rollback=True)]

ROOT = Path(__file__).resolve().parents[2]
OLD_KEY, ROTATED_KEY = "old-key-5c1d", "rotated-key-8e2f"


def example_code() -> str:
    text = (ROOT / "docs" / "langgraph.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert len(blocks) == 1, "the document holds one runnable example"
    return blocks[0]


class Crm(BaseHTTPRequestHandler):
    """Answers the rotated key with a row and any other key with a real 401."""

    def do_GET(self) -> None:
        key = parse_qs(urlparse(self.path).query).get("api_key", [""])[0]
        ok = key == ROTATED_KEY
        body = json.dumps({"rows": [{"account": "ACME", "tier": "gold"}]} if ok else {})
        self.send_response(200 if ok else 401)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body.encode())

    def log_message(self, *args: object) -> None:
        pass


def test_the_langgraph_example_interrupts_and_resumes_with_the_resolution(
    live_server, postgres, operator, tmp_path
):
    crm = ThreadingHTTPServer(("127.0.0.1", 0), Crm)
    threading.Thread(target=crm.serve_forever, daemon=True).start()
    _, secret = ApiToken.issue("crm-agent")
    script = tmp_path / "langgraph_example.py"
    script.write_text(example_code())
    key_file = tmp_path / "crm-key"
    key_file.write_text(OLD_KEY)
    env = os.environ | {
        "FAILSIGHT_URL": live_server.url,
        "FAILSIGHT_TOKEN": secret,
        "CRM_URL": f"http://127.0.0.1:{crm.server_address[1]}/api/accounts",
        "CRM_KEY_FILE": str(key_file),
        "PYTHONPATH": str(ROOT),
        "XDG_CACHE_HOME": str(tmp_path),
    }
    agent = subprocess.Popen(
        [sys.executable, str(script)], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    try:
        deadline = time.monotonic() + 60
        while not ReviewItem.objects.exists():
            assert agent.poll() is None, agent.stdout.read().decode()
            assert time.monotonic() < deadline, "the graph never escalated"
            time.sleep(0.2)
        item = ReviewItem.objects.get()
        time.sleep(0.5)  # the graph is waiting on it now
        key_file.write_text(ROTATED_KEY)  # the operator rotates the key in the store
        do_resolve_review(
            item,
            operator,
            "retry",
            channel=Channel.DASHBOARD,
            note="rotated the CRM key in the vault",
        )
        output, _ = agent.communicate(timeout=60)
    finally:
        if agent.poll() is None:
            agent.kill()
        crm.shutdown()
        crm.server_close()
    text = output.decode()
    assert agent.returncode == 0, text
    assert f"/review/{item.pk}/" in text and "'tier': 'gold'" in text
    first, second = Run.objects.order_by("pk")
    assert (first.status, first.failure_type, first.decision) == (
        "escalated",
        "auth_failure",
        "escalate",
    )
    assert (second.status, second.attempted) == ("succeeded", {"account": "ACME"})
    assert "api_key=[Filtered]" in first.detail
    item.refresh_from_db()
    assert item.delivered_via == "ack" and item.delivered_at is not None
    kept = repr([list(Run.objects.values()), list(ReviewItem.objects.values())])
    kept += repr(list(AuditEntry.objects.values()))
    assert OLD_KEY not in kept and ROTATED_KEY not in kept
