"""A batch's scrubbing (`pipeline.scrub_all`: one look at all its reports, halves looked at
again) leaves each report exactly as scrubbing it alone does: the same values, the same count,
whichever of a batch's reports hold a secret (gitleaks' examples and the layered shapes, placed
in text, in a key, in a name, in the idempotency key), and nothing else changed."""

from __future__ import annotations

import copy
import random

import pytest

from classifier.scrub import FILTERED
from orchestrator.ingest import pipeline
from orchestrator.schemas import RunIn
from tests.classifier import shapes_corpus as corpus

pytestmark = pytest.mark.django_db

FORMS = [e["text"] for e in corpus.GITLEAKS] + [text for _, text, _ in corpus.LAYERED]
SHORT = [text for text in FORMS if len(text) <= 90 and "\n" not in text]


def clean(i: int) -> dict:
    return {
        "status": "error" if i % 3 else "ok",
        "agent": f"agent-{i % 4}",
        "source": "news_api",
        "topic": f"topic {i}",
        "attempted": {"operation": "search", "query": f"energy prices {i}"},
        "idempotency_key": f"batch-{i}",
        **(
            {
                "failure_type": "timeout",
                "detail": f"read timed out after {i} s",
                "partial_results": [{"url": f"https://example.org/{i}"}],
            }
            if i % 3
            else {"results": [{"title": "lorem ipsum dolor sit amet " * 3}]}
        ),
    }


def holding(body: dict, place: str, form: str) -> dict:
    body = copy.deepcopy(body)
    if place == "text":
        body["attempted"]["note"] = form
    elif place == "key":
        body["attempted"]["api_key"] = "s3cr3t-" + form[-12:]
    elif place == "name":
        body["topic"] = form
    else:
        body["idempotency_key"] = form
    return body


def scrubbed_alone(bodies: list[dict]) -> tuple[list[dict], list[int]]:
    runs = [RunIn.model_validate(b) for b in bodies]
    counts = [pipeline.scrub(r) for r in runs]
    return [r.model_dump() for r in runs], counts


def scrubbed_together(bodies: list[dict]) -> tuple[list[dict], list[int]]:
    runs = [RunIn.model_validate(b) for b in bodies]
    counts = pipeline.scrub_all(runs)
    return [r.model_dump() for r in runs], counts


@pytest.mark.parametrize("seed", range(6))
def test_a_batch_is_scrubbed_as_its_reports_are_alone(seed):
    rng = random.Random(seed)
    size = rng.choice([9, 40, 257])
    bodies = [clean(i) for i in range(size)]
    secret_at = rng.sample(range(size), k=rng.choice([1, 2, 5]))
    for i in secret_at:
        place = rng.choice(["text", "key", "name", "idempotency"])
        form = rng.choice(SHORT if place in ("name", "idempotency") else FORMS)
        bodies[i] = holding(bodies[i], place, form)
    together, counts = scrubbed_together(bodies)
    alone, expected = scrubbed_alone(bodies)
    assert counts == expected
    assert together == alone
    assert all(counts[i] > 0 for i in secret_at if FILTERED in str(alone[i]))
    untouched = [i for i in range(size) if i not in secret_at]
    assert all(counts[i] == 0 for i in untouched)
    assert [together[i] for i in untouched] == [
        RunIn.model_validate(bodies[i]).model_dump() for i in untouched
    ]


def test_a_clean_batch_is_looked_at_once_and_a_secret_costs_a_few_looks(monkeypatch):
    looks = []
    scrubber = pipeline.scrubbing.current()
    real = scrubber.holds_nothing
    monkeypatch.setattr(scrubber, "holds_nothing", lambda v: looks.append(len(v)) or real(v))
    bodies = [clean(i) for i in range(512)]
    scrubbed_together(bodies)
    assert len(looks) == 1
    looks.clear()
    bodies[300] = holding(bodies[300], "text", corpus.LAYERED[0][1])
    _, counts = scrubbed_together(bodies)
    assert counts[300] > 0 and sum(counts) == counts[300]
    assert len(looks) <= 2 * 7  # two halves a level, 512 down to 8
