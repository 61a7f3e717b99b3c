"""Secrets in any shape (`classifier.scrub` with `classifier.token_rules`): gitleaks' own examples
of every rule they cover, the layered shapes (escaped JSON, command lines, XML, URL encoding,
base64, environment-style key names) and 50 look-alikes, under both engines: Python's `re` (the
client's) and RE2 (the server's)."""

from __future__ import annotations

import random

import pytest

from classifier.scrub import FILTERED, Scrubber, ScrubRules, pattern_error
from classifier.token_rules import TokenRules, go_to_python
from orchestrator.patterns import compile_re2, operator_pattern_error
from tests.classifier import shapes_corpus as corpus

ENGINES = {"python re": Scrubber(), "re2": Scrubber(None, compile_re2)}


def test_the_corpus_holds_at_least_150_forms_from_the_rule_sets_own_examples():
    assert len(corpus.GITLEAKS) >= 150
    assert len({e["rule"] for e in corpus.GITLEAKS}) >= 100
    assert all(e["from"].startswith("gitleaks cmd/generate/config/rules/") for e in corpus.GITLEAKS)


@pytest.mark.parametrize("engine", list(ENGINES))
def test_no_secret_of_gitleaks_examples_is_left_in_text_or_data(engine):
    scrubber = ENGINES[engine]
    leaks = [e["rule"] for e in corpus.GITLEAKS if e["secret"] in scrubber.text(e["text"])[0]]
    assert leaks == []
    in_data = scrubber.scrub({"detail": [e["text"] for e in corpus.GITLEAKS]})[0]
    assert [e["rule"] for e in corpus.GITLEAKS if e["secret"] in repr(in_data)] == []


@pytest.mark.parametrize("engine", list(ENGINES))
@pytest.mark.parametrize(
    ("what", "text", "secret"), corpus.LAYERED, ids=[c[0] for c in corpus.LAYERED]
)
def test_a_secret_under_a_layer_is_filtered(engine, what, text, secret):
    clean, found = ENGINES[engine].text(text)
    assert secret not in clean
    assert found >= 1 and FILTERED in clean


@pytest.mark.parametrize("engine", list(ENGINES))
def test_look_alikes_come_back_exactly_as_sent(engine):
    scrubber = ENGINES[engine]
    assert [v for v in corpus.LOOKALIKES if scrubber.text(v)[0] != v] == []
    assert [v for v in corpus.LOOKALIKES if scrubber.identity(v) != v] == []
    assert scrubber.scrub({"detail": corpus.LOOKALIKES})[0] == {"detail": corpus.LOOKALIKES}


def test_random_hex_ids_keys_and_shas_come_back_as_sent():
    """Ids nobody wrote by hand: 3,000 seeded random hex strings in the forms agents send (a
    request id, an idempotency key, a git SHA). Runs of digits inside them once read as card
    numbers when their digits happened to pass the Luhn check (about one key in a thousand)."""
    rng = random.Random(42)
    ids = [
        form.format(rng.getrandbits(bits), bits // 4)
        for _ in range(1000)
        for form, bits in (("{0:0{1}x}", 160), ("concurrent-{0:0{1}x}", 128), ("req_{0:0{1}x}", 96))
    ]
    scrubber = ENGINES["re2"]
    assert [v for v in ids if scrubber.identity(v) != v] == []
    assert [v for v in ids if scrubber.idempotency_key(v) != v] == []


def test_a_card_number_is_still_filtered_between_words():
    clean, found = ENGINES["re2"].text("paid with 4111 1111 1111 1111, card=4111111111111111")
    assert "4111" not in clean and found == 2


def test_a_url_in_an_identity_field_loses_its_user_info_and_query_values():
    scrubber = ENGINES["re2"]
    url = "https://bot:pw-Zt8Yq2@api.example.com/v1/search?api_key=abc123&q=film#top"
    assert (
        scrubber.identity(url)
        == f"https://api.example.com/v1/search?api_key={FILTERED}&q={FILTERED}#top"
    )
    assert scrubber.identity("news_api") == "news_api"


def test_an_idempotency_key_holding_a_credential_is_kept_as_its_digest():
    scrubber = ENGINES["re2"]
    key = "run-ghp_" + "Zq7TfW2nXc4Lm9Rb1Yv8Hd3Ks6Pj0Ue5Aa11"
    kept = scrubber.idempotency_key(key)
    assert kept.startswith("sha256:") and "ghp_" not in kept
    assert scrubber.idempotency_key(key) == kept  # a replay finds its first report
    assert scrubber.idempotency_key("5f0c6a2e-8b1d-4c9a-9e7f-3d2b1a0c9e8f").startswith("5f0c")


def test_a_whole_report_is_scrubbed_identity_fields_included():
    body = {
        "source": "https://api.example.com/search?api_key=Zt8Yq2Wv6Lp4",
        "topic": "film DB_PASS=hunter2-Qx81",
        "exception_type": "AuthError token=ghp_Zq7TfW2nXc4Lm9Rb1Yv8Hd3Ks6Pj0Ue5Aa11",
        "usage": {"model": "gpt-4o?key=Zt8Yq2Wv6Lp4Rm0", "input_tokens": 12},
        "detail": "ok",
    }
    clean, found = ENGINES["re2"].report(body)
    assert (
        "Zt8Yq2Wv6Lp4" not in repr(clean)
        and "hunter2" not in repr(clean)
        and "ghp_" not in repr(clean)
    )
    assert clean["detail"] == "ok" and clean["usage"]["input_tokens"] == 12
    assert found >= 3


def test_every_rule_compiles_under_both_engines():
    assert TokenRules().skipped == []
    assert TokenRules(compile_re2).skipped == []
    assert go_to_python(r"a(?i)b\z") == r"(?i)ab\Z"


def test_an_operator_pattern_re2_refuses_is_refused_with_its_reason():
    assert "invalid escape sequence" in operator_pattern_error(r"(a)\1")
    assert "repetition" in operator_pattern_error(r"(?:a{1,1000}){1,1000}")
    assert "longer than" in operator_pattern_error("a" * 3000)
    assert "empty" in operator_pattern_error("x*")
    assert operator_pattern_error(r"acme-(?P<secret>\d{8})") is None
    assert pattern_error(r"(a+)+$") is None  # Python re takes it; RE2 runs it in linear time


def test_a_backtracking_pattern_runs_in_linear_time_under_re2():
    # Under Python's re this search would take longer than the age of the universe: the test
    # finishing at all is the check (no timing asserted).
    scrubber = Scrubber(ScrubRules(patterns=(r"(a+)+$",)), compile_re2)
    text = "a" * 50_000 + "!"
    assert scrubber.text(text)[0] == text
    assert scrubber.text("code aaaa")[0] == f"code {FILTERED}"
