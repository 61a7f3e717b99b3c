"""Take the docs' screenshots (overview, a run detail, the review queue and an item, failure
groups, a workflow, the runs in flight, SLOs, switch efficacy) from demonstration data.

    .venv/bin/python scripts/screenshots.py [--out docs/screenshots]

Builds a throwaway SQLite database under var/, runs the main job on it for a while (`manage.py
launch --duration`: the fault-injecting provider, a real Celery worker and the workflow stream, as
`make run` does), folds the rollups and the failure groups, serves the dashboard on a free local
port and photographs it with Debian's headless Chromium.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import threading
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DB = ROOT / "var" / "screenshots.sqlite3"
CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
]
USER, PASSWORD = "operator", "screenshots-only-password"


def setup() -> None:
    DB.parent.mkdir(parents=True, exist_ok=True)
    DB.unlink(missing_ok=True)
    os.environ["DATABASE_URL"] = f"sqlite:///{DB}"
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"  # Playwright's loop shares this thread
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", interactive=False, verbosity=0)


def seed(seconds: float) -> None:
    """Run the demonstration (`manage.py launch`) on the screenshots' database for `seconds`."""
    from django.contrib.auth.models import Group, User
    from django.utils import timezone

    from insights.groups import fold
    from insights.stats import refresh_rollups

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = os.environ | {
        "FAILSIGHT_VAR_DIR": str(DB.parent / "screenshots"),
        "LAUNCH_ADDR": f"127.0.0.1:{port}",
    }
    cmd = [sys.executable, "manage.py", "launch", "--duration", str(seconds), "--seed", "7"]
    subprocess.run(cmd, cwd=ROOT, env=env, check=True, stdout=subprocess.DEVNULL)
    refresh_rollups(timezone.now() - timedelta(days=2))
    fold(timezone.now() - timedelta(days=2))
    agents_at_work()
    user = User.objects.create_user(USER, password=PASSWORD)
    user.groups.add(*Group.objects.filter(name__in=["operators", "policy editors"]))


def agents_at_work() -> None:
    """Runs an agent of its own framework reported `running` and has not finished yet (the demo's
    own runs are all finished when it stops): what the in-flight view shows."""
    from django.utils import timezone

    from orchestrator.models import ApiToken, Run

    token, _ = ApiToken.issue("research-team")
    now = timezone.now()
    work = [
        ("research-agent", "arxiv", "search", "quantum error correction", 41),
        ("research-agent", "news_api", "fetch", "AI in research", 17),
        ("writer-agent", "llm", "draft", "weekly digest", 6),
        ("triage-agent", "tickets", "classify", "payroll", 2),
    ]
    for agent, source, operation, topic, minutes in work:
        began = now - timedelta(minutes=minutes, seconds=13)
        Run.objects.create(
            agent=agent,
            source=source,
            operation=operation,
            topic=topic,
            status=Run.Status.RUNNING,
            created_at=began,
            started_at=began,
            token=token,
        )


def serve() -> str:
    from django.core.handlers.wsgi import WSGIHandler
    from django.core.servers.basehttp import ThreadedWSGIServer, WSGIRequestHandler

    class Quiet(WSGIRequestHandler):
        def log_message(self, *args):
            pass

    server = ThreadedWSGIServer(("127.0.0.1", 0), Quiet)
    server.set_app(WSGIHandler())
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_address[1]}"


def pick_run() -> int:
    from orchestrator.models import Run

    run = (
        Run.objects.filter(retry_of__isnull=False, partial_count__gt=0).first()
        or Run.objects.filter(retry_of__isnull=False, status="failed").first()
        or Run.objects.filter(status="failed").first()
    )
    return run.pk


def pick_review() -> int:
    """An open item of the back office tour (the one a newcomer is asked to resolve)."""
    from orchestrator.models import ReviewItem

    item = ReviewItem.objects.open().filter(run__topic="payroll").first()
    return (item or ReviewItem.objects.open().first() or ReviewItem.objects.first()).pk


def pick_workflow() -> int:
    from orchestrator.models import Workflow

    return Workflow.objects.filter(name__startswith="Tour: AI in research").get().pk


def shoot(base: str, out: Path) -> list[Path]:
    from playwright.sync_api import sync_playwright

    out.mkdir(parents=True, exist_ok=True)
    shots = [("overview.png", "/"), ("run-detail.png", f"/runs/{pick_run()}/")]
    shots.append(("review-queue.png", "/review/"))
    shots.append(("review-item.png", f"/review/{pick_review()}/"))
    shots.append(("failure-groups.png", "/groups/"))
    shots.append(("workflow.png", f"/workflows/{pick_workflow()}/"))
    shots.append(("in-flight.png", "/runs/in-flight/"))
    shots.append(("slos.png", "/slos/"))
    shots.append(("efficacy.png", "/efficacy/"))
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = browser.new_page(base_url=base, viewport={"width": 1440, "height": 1000})
        page.goto("/accounts/login/")
        page.fill("#id_username", USER)
        page.fill("#id_password", PASSWORD)
        page.click("button[type=submit]")
        page.wait_for_load_state("networkidle")
        taken = []
        for name, path in shots:
            page.goto(path)
            page.wait_for_load_state("networkidle")
            if name == "review-queue.png":  # one compact row opened, with the keyboard
                page.keyboard.press("j")
                page.keyboard.press("Enter")
                page.wait_for_load_state("networkidle")
            page.screenshot(path=str(out / name), full_page=True)
            taken.append(out / name)
        browser.close()
    return taken


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "screenshots")
    parser.add_argument("--seconds", type=float, default=90, help="How long the demo runs first")
    args = parser.parse_args()
    setup()
    seed(args.seconds)
    for path in shoot(serve(), args.out):
        print(f"wrote {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
