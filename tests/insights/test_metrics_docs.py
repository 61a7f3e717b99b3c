"""The Grafana dashboard and the Prometheus alert rules in docs/: well-formed, and every PromQL
expression in them names only metrics /metrics exposes."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from django.urls import reverse

from insights.slo import FAST, SHORT_WINDOWS, SLOW

from .metrics_history import parse

DOCS = Path(__file__).resolve().parents[2] / "docs"
DASHBOARD = DOCS / "grafana" / "failsight.json"
ALERTS = DOCS / "prometheus" / "alerts.yml"
KEYWORDS = {"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring"}
KEYWORDS |= {"group_left", "group_right", "inf", "nan"}
SUFFIXES = {"counter": ("_total",), "gauge": ("",), "histogram": ("_bucket", "_sum", "_count")}


@pytest.fixture
def exposed(admin_client) -> set[str]:
    """Every sample name /metrics serves, even from an empty database (families are always
    described)."""
    text = admin_client.get(reverse("metrics")).content.decode()
    return {f.name + suffix for f in parse(text).values() for suffix in SUFFIXES[f.type]}


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects: identifiers outside strings, label matchers,
    ranges, grouping clauses and numbers that are neither functions nor keywords."""
    expr = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    expr = re.sub(r"\{[^}]*\}|\[[^\]]*\]", " ", expr)
    expr = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", expr)
    expr = re.sub(r"\b\d[\w.]*", " ", expr)  # numbers and durations
    names = set()
    for match in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", expr):
        follows = expr[match.end() :].lstrip()[:1]
        word = match.group()
        if follows != "(" and word.lower() not in KEYWORDS:
            names.add(word)
    return names


def test_metric_names_are_read_from_promql_as_prometheus_would():
    expr = (
        'histogram_quantile(0.95, sum by (le, source) (rate(a_bucket{source=~"x|y"}[5m])))'
        ' / on (source) group_left b_total{le="1"} and bool c offset 5m'
    )
    assert metric_names(expr) == {"a_bucket", "b_total", "c"}


def dashboard_queries(model: dict[str, Any]) -> list[str]:
    queries = [t["expr"] for p in model["panels"] for t in p.get("targets", [])]
    for variable in model["templating"]["list"]:
        if variable["type"] == "query":
            found = re.fullmatch(r"label_values\((\w+),\s*\w+\)", variable["query"]["query"])
            assert found, variable
            queries.append(found.group(1))
    return queries


def test_the_grafana_dashboard_is_a_dashboard_model(db):
    model = json.loads(DASHBOARD.read_text())
    assert model["title"] and model["uid"] and model["schemaVersion"] >= 36
    ids = [p["id"] for p in model["panels"]]
    assert len(ids) == len(set(ids))
    for panel in model["panels"]:
        assert {"h", "w", "x", "y"} <= set(panel["gridPos"]), panel["title"]
        assert panel["gridPos"]["x"] + panel["gridPos"]["w"] <= 24, panel["title"]
        if panel["type"] != "row":
            refs = [t["refId"] for t in panel["targets"]]
            assert refs and len(refs) == len(set(refs)), panel["title"]
            assert panel["datasource"]["uid"] == "${datasource}", panel["title"]


def test_the_dashboard_queries_only_metrics_that_are_exposed(exposed):
    model = json.loads(DASHBOARD.read_text())
    used = set()
    for expr in dashboard_queries(model):
        names = metric_names(expr)
        assert names, expr
        assert names <= exposed, (expr, names - exposed)
        used |= names
    # Every kind of figure /metrics serves has a panel.
    for name in (
        "failsight_run_duration_seconds_bucket",
        "failsight_ingest_latency_seconds_bucket",
        "failsight_decision_latency_seconds_bucket",
        "failsight_review_time_to_claim_seconds_bucket",
        "failsight_review_time_to_resolve_seconds_bucket",
        "failsight_webhook_delivery_seconds_bucket",
        "failsight_webhook_delivery_attempts_count",
        "failsight_decisions_total",
        "failsight_webhook_failures_total",
        "failsight_scrubbed_fields_total",
        "failsight_slo_burn_rate",
    ):
        assert name in used, name


def test_the_alert_rules_are_multi_window_burn_rates_on_exposed_metrics(exposed):
    rules = [r for group in yaml.safe_load(ALERTS.read_text())["groups"] for r in group["rules"]]
    for rule in rules:
        assert {"alert", "expr", "labels", "annotations"} <= set(rule), rule
        assert rule["labels"]["severity"] in ("page", "ticket")
        names = metric_names(rule["expr"])
        assert names and names <= exposed, (rule["alert"], names - exposed)
    burns = {r["alert"]: r["expr"] for r in rules if "failsight_slo_burn_rate" in r["expr"]}
    windows = {
        alert: set(re.findall(r'window="(\d+m)"\}\s*>=\s*([\d.]+)', expr))
        for alert, expr in burns.items()
    }
    # The built-in pairs, on windows /metrics serves a burn rate for.
    pairs = {
        frozenset({(f"{long}m", rate), (f"{short}m", rate)}) for long, short, rate in (FAST, SLOW)
    }
    assert {frozenset((w, float(r)) for w, r in found) for found in windows.values()} == pairs
    served = {f"{minutes}m" for minutes in SHORT_WINDOWS}
    assert {w for found in windows.values() for w, _ in found} <= served
