"""The chaos suite: real worker, beat and web processes on a private PostgreSQL and Redis, through
10 SIGKILLs of the whole worker at random (seeded) moments of live workflows, a PostgreSQL restart
mid-workflow, a Redis restart that loses its data and a broker outage during POST /workflows.

The run is `benchmarks/chaos.py` at a small size (the same code the benchmark runs at a larger
one), in a subprocess of its own because it points Django at its own database: this module reads
the figures it writes and checks each promise. The servers are private (started on free ports and
removed afterwards): the machine's shared PostgreSQL and Redis are never touched. It is also the
benchmark's smoke test: what it prints (the load average, a row per scenario, the invariants) is
checked too.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from typing import Any

import pytest

from tests.conftest import require_service
from tests.services import ROOT, available

# Serial: each scenario's bound is measured against this run's own fault-free pace, which a
# test running beside it would change halfway.
pytestmark = [pytest.mark.slow, pytest.mark.serial, pytest.mark.timeout(900)]

SEED = 13
KILLS = 10


@pytest.fixture(scope="module")
def chaos(tmp_path_factory) -> dict[str, Any]:
    require_service(available(), "PostgreSQL's server programs and redis-server")
    out = tmp_path_factory.mktemp("chaos") / "figures.json"
    command = [sys.executable, str(ROOT / "benchmarks" / "chaos.py"), "--workflows", "16"]
    command += ["--kills", str(KILLS), "--seed", str(SEED), "--json", str(out)]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=840)
    print(done.stdout)
    assert out.exists(), done.stdout[-4000:] + done.stderr[-4000:]
    return json.loads(out.read_text()) | {"printed": done.stdout}


def settled_in_time(figures: dict[str, Any], name: str) -> dict[str, Any]:
    scenario = figures["scenarios"][name]
    assert scenario["workflows"] > 0
    assert scenario["settle_seconds"] <= scenario["bound_seconds"], scenario
    return scenario


def test_ten_sigkills_of_the_whole_worker_leave_every_workflow_settled(chaos):
    scenario = settled_in_time(chaos, "sigkill")
    assert scenario["faults"] == KILLS
    assert sum(scenario["notes"]["live_at_each_kill"]) > 0  # the kills hit live workflows


def test_a_postgresql_restart_mid_workflow_strands_nothing(chaos):
    scenario = settled_in_time(chaos, "postgres")
    assert scenario["notes"]["live_at_fault"] > 0


def test_a_redis_restart_that_loses_its_data_loses_no_work(chaos):
    scenario = settled_in_time(chaos, "redis")
    assert scenario["notes"]["live_at_fault"] > 0


def test_a_broker_outage_during_post_workflows_delays_them_and_never_fails_them(chaos):
    scenario = settled_in_time(chaos, "broker")
    notes = scenario["notes"]
    # Each first attempt answered 201 within the client's timeout: none waited for the broker.
    assert notes["posts_answered_201_at_once"] == notes["posts"] == scenario["workflows"]
    assert notes["retries_answered_same_workflow"] == notes["posts"]  # no duplicate


def test_afterwards_nothing_is_running_over_executed_lost_or_counted_wrong(chaos):
    figures = chaos["invariants"]
    assert figures["workflows"] == sum(s["workflows"] for s in chaos["scenarios"].values())
    assert figures["unsettled_workflows"] == 0
    assert figures["runs_left_running"] == 0 and figures["runs_left_queued"] == 0
    assert figures["runs_executed_beyond_deliveries"] == 0
    assert figures["reports_accepted"] > 0 and figures["accepted_reports_lost"] == 0
    assert figures["duplicate_runs_per_key"] == 0
    assert figures["duplicate_workflows_per_key"] == 0
    assert figures["tile_groups"] > 0 and figures["tile_counts_unequal_to_raw"] == 0
    assert figures["outbox_messages_left"] == 0


def test_the_benchmark_prints_the_load_a_row_per_scenario_and_zero_invariants(chaos):
    out = chaos["printed"]
    assert re.search(r"load average \(1, 5, 15 min\) before: [\d.]+, [\d.]+, [\d.]+", out)
    rows = re.findall(
        r"^(baseline|sigkill|postgres|redis|broker)\s+(\d+)\s+(\d+)\s+[\d.]+ s", out, re.M
    )
    assert [row[0] for row in rows] == ["baseline", "sigkill", "postgres", "redis", "broker"]
    invariants = out.split("invariants (each must be 0):", 1)[1].split("context:", 1)[0]
    counts = re.findall(r"^\s+([a-z ]+?)\s+(\d+)$", invariants, re.M)
    assert len(counts) == 8 and all(n == "0" for _, n in counts), invariants
