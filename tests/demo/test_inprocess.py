"""The in-process demonstration sources: their call log is a test aid that never fails a call."""

from __future__ import annotations

from demo import inprocess


def test_a_call_log_that_cannot_be_written_does_not_fail_the_call(monkeypatch, tmp_path):
    monkeypatch.setenv("FAILSIGHT_DEMO_CALL_LOG", str(tmp_path))  # a folder: open() fails
    results = inprocess._source("news_api")({"topic": "film", "faults": {}}, [])
    assert len(results) == 3
