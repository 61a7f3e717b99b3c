"""Exports: the runs list's filters as CSV and JSON Lines, streamed over keyset pages; a
workflow's coverage report as JSON and Markdown."""

from __future__ import annotations

import csv
import io
import json

from django.urls import reverse

from orchestrator.analytics import export
from orchestrator.models import Run

from .conftest import make_failure, make_run, make_workflow

EXPORT = reverse("dashboard:runs_export")


def _body(response) -> str:
    assert response.streaming
    return b"".join(response.streaming_content).decode()


def test_the_runs_filter_exports_as_csv_every_matching_run(operator_client, monkeypatch):
    monkeypatch.setattr(export, "EXPORT_BATCH", 2)  # several keyset pages
    failures = [make_failure("timeout", source="news_api") for _ in range(5)]
    make_run(source="news_api")
    make_failure("timeout", source="web_search")
    response = operator_client.get(EXPORT, {"source": "news", "status": "failed"})
    assert response["Content-Type"].startswith("text/csv")
    assert "attachment" in response["Content-Disposition"]
    rows = list(csv.DictReader(io.StringIO(_body(response))))
    assert [int(r["id"]) for r in rows] == sorted((r.pk for r in failures), reverse=True)
    assert {r["failure_type"] for r in rows} == {"timeout"}


def test_json_lines_carry_one_object_per_run(operator_client):
    run = make_failure("rate_limited", retry_after=2.5, detail="slow down")
    lines = _body(operator_client.get(EXPORT, {"format": "jsonl"})).splitlines()
    (item,) = [json.loads(line) for line in lines]
    assert item["id"] == run.pk and item["retry_after"] == 2.5 and item["detail"] == "slow down"


def test_a_formula_in_an_agents_text_is_not_a_formula_in_the_csv(operator_client):
    make_failure("timeout", detail='=HYPERLINK("http://evil")')
    rows = list(csv.DictReader(io.StringIO(_body(operator_client.get(EXPORT)))))
    assert rows[0]["detail"].startswith("'=")


def test_an_unusable_filter_or_format_is_refused(operator_client):
    assert operator_client.get(EXPORT, {"status": "nope"}).status_code == 400
    assert operator_client.get(EXPORT, {"format": "xlsx"}).status_code == 400


def test_the_export_never_loads_the_whole_set_at_once(db, monkeypatch):
    monkeypatch.setattr(export, "EXPORT_BATCH", 3)
    for _ in range(7):
        make_run()
    seen = []
    original = export.keyset.beyond

    def spy(*args, **kwargs):
        seen.append(args[1])
        return original(*args, **kwargs)

    monkeypatch.setattr(export.keyset, "beyond", spy)
    rows = list(export.iter_runs(Run.objects.all()))
    assert len(rows) == 7 and len(seen) == 2  # three pages: the first, then two after a key


def test_a_workflows_coverage_downloads_as_json_and_markdown(operator_client):
    wf = make_workflow(topics=["film", "music|jazz"])
    make_run(workflow=wf, topic="film", source="web_search")
    make_run(workflow=wf, topic="film", source="news_api")
    make_failure("timeout", workflow=wf, topic="music|jazz", source="web_search")
    url = reverse("dashboard:workflow_coverage_export", args=[wf.pk, "json"])
    report = json.loads(operator_client.get(url).content)
    assert report["coverage"]["film"]["verdict"] == "well_supported"
    assert report["coverage"]["music|jazz"]["verdict"] == "gap"
    md = operator_client.get(reverse("dashboard:workflow_coverage_export", args=[wf.pk, "md"]))
    text = md.content.decode()
    assert md["Content-Type"].startswith("text/markdown")
    assert "| film | well\\_supported |" in text
    assert "| music\\|jazz | gap |" in text and "web\\_search: timeout" in text
    bad = reverse("dashboard:workflow_coverage_export", args=[wf.pk, "pdf"])
    assert operator_client.get(bad).status_code == 404


def test_the_api_streams_the_same_export_with_a_token(client, api_token, auth_headers):
    token = api_token[0]
    run = make_failure("timeout", source="news_api", token=token)
    make_run(source="web_search", token=token)
    make_failure("timeout", source="news_api")  # not this token's work: not in its export
    response = client.get(
        "/api/v1/runs/export", {"format": "jsonl", "source": "news_api"}, **auth_headers
    )
    assert response.status_code == 200 and response.streaming
    assert [json.loads(x)["id"] for x in _body(response).splitlines()] == [run.pk]
    refused = client.get("/api/v1/runs/export", {"format": "xml"}, **auth_headers)
    assert refused.status_code == 422 and refused.json()["status"] == "error"
    assert client.get("/api/v1/runs/export").status_code == 401
