"""Secrets filtered out of reports (`classifier.scrub`): every rule on its own, the operators'
rules, the hostile cases (30 levels deep, keys in other cases, secrets split across lines), and
the look that skips text holding nothing never changing an outcome."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from classifier.scrub import (
    FILTERED,
    MAX_DEPTH,
    SECRET_KEY_ENDINGS,
    SECRET_KEY_NAMES,
    SECRET_KEY_PARTS,
    Scrubber,
    ScrubRules,
    fold,
    is_card_number,
    luhn_valid,
    pattern_error,
)
from tests.classifier import secrets_corpus as corpus

SCRUBBER = Scrubber()
WITH_OPERATOR_RULES = Scrubber(ScrubRules.from_data(corpus.OPERATOR_RULES))


def scrubbed(value: Any, scrubber: Scrubber = SCRUBBER) -> Any:
    return scrubber.scrub(value)[0]


def text(value: str, scrubber: Scrubber = SCRUBBER) -> str:
    return scrubber.text(value)[0]


def leaks(value: Any) -> list[str]:
    found = json.dumps(value)
    return [secret for secret in corpus.secrets() if secret in found]


@pytest.mark.parametrize("body", [corpus.envelope(), corpus.success()], ids=["error", "ok"])
def test_no_secret_of_the_hostile_corpus_is_left_and_each_is_counted(body):
    clean, count = WITH_OPERATOR_RULES.scrub(body)
    assert leaks(clean) == []
    assert count == json.dumps(clean).count(FILTERED)
    assert clean["attempted"]["customer"]["public_token"] == corpus.SAFE_VALUE
    assert clean["attempted"]["query"] == "ACME accounts"


def test_the_corpus_holds_every_secret_before_it_is_scrubbed():
    both = [corpus.envelope(), corpus.success()]
    assert set(leaks(both)) == set(corpus.secrets()) - {corpus.CARD_DIGITS}


@pytest.mark.parametrize(
    "key",
    [
        "api_key",
        "API-Key",
        "X_Api_Key",
        "x-api-key",
        "apiKey",
        "APIKEY",
        "Authorization",
        "proxy_authorization",
        "PASSWORD",
        "db.password",
        "passwd",
        "Client-Secret",
        "client_secret",
        "access_token",
        "accessToken",
        "refresh-token",
        "aws_secret_access_key",
        "AWS_ACCESS_KEY_ID",
        "private_key",
        "Set-Cookie",
        "cookie",
        "session",
        "sessionId",
        "JSESSIONID",
        "credentials",
        "x-amz-signature",
        "DB_PASS",
        "GITHUB_PAT",
        "cvc",
    ],
)
def test_a_value_under_a_key_naming_a_secret_is_filtered_with_its_key_kept(key):
    clean = scrubbed({key: "value-9Zq", "query": "film"})
    assert clean == {key: FILTERED, "query": "film"}


@pytest.mark.parametrize(
    "key",
    [
        "input_tokens",
        "max_tokens",
        "gen_ai.usage.output_tokens",
        "token_type",
        "token_count",
        "idempotency_key",
        "primary_key",
        "author",
        "passage",
        "keyboard",
        "session_count",
        "compass",
    ],
)
def test_a_key_that_only_resembles_a_secret_keeps_its_value(key):
    assert scrubbed({key: "value-9Zq"}) == {key: "value-9Zq"}


@pytest.mark.parametrize(
    "name", sorted({*SECRET_KEY_PARTS, *SECRET_KEY_ENDINGS, *SECRET_KEY_NAMES})
)
def test_each_key_rule_names_a_secret_in_any_case(name):
    for key in (name, name.upper(), f"x_{name}" if name not in SECRET_KEY_NAMES else name):
        assert scrubbed({key: 12345678}) == {key: FILTERED}, key


def test_folding_ignores_case_and_separators():
    assert fold("X_Api-Key") == fold("x.api key") == fold("XAPIKEY") == "xapikey"


def test_an_empty_or_boolean_secret_is_kept_as_it_is_and_not_counted():
    value = {"password": "", "token": None, "session": True, "secrets": []}
    assert WITH_OPERATOR_RULES.scrub(value) == (value, 0)


def test_a_whole_object_under_a_secret_key_is_filtered():
    assert scrubbed({"credentials": {"user": "a", "pin": 1234}}) == {"credentials": FILTERED}


def test_a_secret_30_levels_deep_is_filtered_and_the_levels_above_kept():
    value = corpus.deep(29, {"API-Key": corpus.DEEP_SECRET, "depth": 30})
    clean, count = SCRUBBER.scrub(value)
    assert count == 1 and leaks(clean) == []
    assert json.dumps(clean) == json.dumps(value).replace(corpus.DEEP_SECRET, FILTERED)


def test_data_deeper_than_the_limit_is_filtered_whole():
    value = corpus.deep(MAX_DEPTH + 5, {"note": "unread"})
    assert "unread" not in json.dumps(scrubbed(value))


def test_a_cycle_ends_at_the_depth_limit_instead_of_raising():
    loop: list[Any] = ["x"]
    loop.append(loop)
    assert scrubbed(loop) is not loop


def test_authorization_and_cookie_headers_are_filtered_to_the_end_of_their_line():
    raw = "Request headers:\n  Authorization: Bearer abc.def-123\n  Cookie: a=1; b=2\n  Accept: */*"
    expected = "Request headers:\n  Authorization: [Filtered]\n  Cookie: [Filtered]\n  Accept: */*"
    assert text(raw) == expected


def test_headers_as_printed_by_a_mapping_keep_their_quotes():
    raw = "{'authorization': 'Bearer abcdef123', 'accept': '*/*'}"
    assert text(raw) == "{'authorization': '[Filtered]', 'accept': '*/*'}"


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (
            "Authorization: Bearer Fd1Qz7Rk3W\n    Hv2Nb8Jd4Gs6\nnext",
            "Authorization: [Filtered]\nnext",
        ),
        (
            "auth Bearer Wr4pQz7Rk3Wm9Lx5\nZq2Nb8Jd4Gs6Pa0\nok then",
            "auth Bearer [Filtered]\nok then",
        ),
        ("api_key=\n    Nx7Qz3Rk8Wm2\ndone", "api_key=\n    [Filtered]\ndone"),
        (f"jwt {corpus.JWT.replace('.', '.' + chr(10))} end", "jwt [Filtered] end"),
        (
            f"-----BEGIN PRIVATE KEY-----\n{corpus.PEM_BODY[0]}\n-----END PRIVATE KEY-----\nafter",
            "[Filtered]\nafter",
        ),
    ],
    ids=["folded header", "wrapped token", "value on the next line", "JWT at its dots", "PEM"],
)
def test_a_secret_split_across_lines_is_filtered_whole(raw, expected):
    assert text(raw) == expected


def test_bearer_and_basic_credentials_are_filtered_and_other_words_after_them_kept():
    raw = f"sent Bearer eyJzZWNyZXQ and Basic {corpus.BASIC}; a basic research question"
    assert text(raw) == "sent Bearer [Filtered] and Basic [Filtered]; a basic research question"


def test_a_url_loses_its_secret_parameters_and_keeps_the_others():
    raw = "GET https://api.example/search?q=film&token=abc123&page=2&api_key=k1#top"
    expected = (
        "GET https://api.example/search?q=film&token=[Filtered]&page=2&api_key=[Filtered]#top"
    )
    assert text(raw) == expected


def test_a_url_loses_the_password_in_its_user_info():
    assert text("postgres://app:pg-secret@db:5432/x") == "postgres://app:[Filtered]@db:5432/x"


def test_assignments_in_text_are_judged_by_their_key():
    raw = 'failed: {"password": "hunter2", "user": "bob"} password=x2 retries: 3 X-Api-Key: k-1'
    expected = 'failed: {"password": "[Filtered]", "user": "bob"} password=[Filtered] retries: 3 '
    assert text(raw) == expected + "X-Api-Key: [Filtered]"


FORMAT_SAMPLES = {
    "private key block": "-----BEGIN EC PRIVATE KEY-----\nMHcCAQEEI\n-----END EC PRIVATE KEY-----",
    "OpenAI, Anthropic and similar keys": corpus.ANTHROPIC_KEY,
    "Stripe secret and restricted keys": corpus.STRIPE_KEY,
    "AWS access key id": corpus.AWS_KEY_ID,
    "GitHub tokens": corpus.GITHUB_TOKEN,
    "GitLab personal access token": "glpat-Zq7TfW2nXc4Lm9Rb1Yv8",
    "Slack tokens": corpus.SLACK_TOKEN,
    "Google API key": corpus.GOOGLE_KEY,
    "Hugging Face token": "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",  # letters only, as issued,
    "npm token": "npm_Zq7TfW2nXc4Lm9Rb1Yv8Hd3Ks6Pj0Ue5Aa11",
    "SendGrid key": "SG.Zq7TfW2nXc4Lm9Rb1Yv8.Hd3Ks6Pj0Ue5Aa11Bb22Cc33",
    "JSON Web Token": corpus.JWT,
}


@pytest.mark.parametrize("name", list(FORMAT_SAMPLES))
def test_a_key_in_a_well_known_format_is_filtered_anywhere_in_text(name):
    sample = FORMAT_SAMPLES[name]
    assert text(f"calling with ({sample}) now") == "calling with ([Filtered]) now"
    assert scrubbed({"note": sample}) == {"note": FILTERED}


def test_luhn_valid_card_numbers_are_filtered_and_other_numbers_kept():
    raw = f"card {corpus.CARD}, {corpus.CARD_DIGITS}, {corpus.NOT_A_CARD}, at 1718000000000 ms"
    expected = f"card [Filtered], [Filtered], {corpus.NOT_A_CARD}, at 1718000000000 ms"
    assert text(raw) == expected
    assert scrubbed([corpus.CARD_NUMBER, 5555555555554445, 1718000000000]) == [
        FILTERED,
        5555555555554445,
        1718000000000,
    ]


@pytest.mark.parametrize(
    ("digits", "card"),
    [
        ("4111111111111111", True),
        ("378282246310005", True),
        ("4111111111111112", False),
        ("1718000000000", False),  # a time in milliseconds: no card network starts with 1
        ("41111111111", False),
    ],
)
def test_a_card_number_passes_luhn_and_starts_like_one(digits, card):
    assert is_card_number(digits) is card


def test_luhn_of_known_numbers():
    assert luhn_valid("79927398713") and not luhn_valid("79927398710")


def test_a_header_as_a_pair_is_filtered_in_a_list_or_as_name_and_value():
    value = {
        "headers": [["Authorization", "Bearer t-1"], ["Accept", "*/*"]],
        "attributes": [{"key": "x-api-key", "value": "k-1"}, {"name": "Cookie", "value": "s=1"}],
    }
    assert scrubbed(value) == {
        "headers": [["Authorization", FILTERED], ["Accept", "*/*"]],
        "attributes": [
            {"key": "x-api-key", "value": FILTERED},
            {"name": "Cookie", "value": FILTERED},
        ],
    }


def test_two_strings_that_mention_a_secret_are_no_pair():
    chain = [f"HTTPStatusError: 401 for ?api_key={corpus.API_KEY}", "ValueError: bad key"]
    assert scrubbed(chain) == ["HTTPStatusError: 401 for ?api_key=[Filtered]", chain[1]]


def test_operator_rules_add_keys_patterns_and_safe_fields():
    value = {
        "Customer-SSN": corpus.SSN,
        "ref": f"order ACME-{corpus.ACME_NUMBER}",
        "public_token": corpus.SAFE_VALUE,
    }
    assert scrubbed(value, WITH_OPERATOR_RULES) == {
        "Customer-SSN": FILTERED,
        "ref": "order ACME-[Filtered]",
        "public_token": corpus.SAFE_VALUE,
    }
    assert scrubbed(value) == value | {"public_token": FILTERED}


def test_a_pattern_without_a_secret_group_filters_its_whole_match():
    scrubber = Scrubber(ScrubRules(patterns=(r"EMP\d{6}",)))
    assert text("employee EMP123456 left", scrubber) == "employee [Filtered] left"


def test_rules_as_the_server_sends_them_skip_disabled_and_malformed_rows():
    rows = [
        {"kind": "key", "value": "ssn", "enabled": True},
        {"kind": "key", "value": "iban", "enabled": False},
        {"kind": "unknown", "value": "x"},
        {"kind": "pattern", "value": 3},
        "not a row",
    ]
    assert ScrubRules.from_data(rows) == ScrubRules(keys=("ssn",))


def test_a_pattern_that_cannot_compile_or_matches_nothing_is_refused_and_skipped():
    assert "not a regular expression" in pattern_error("(unclosed")
    assert "empty text" in pattern_error("x*")
    assert pattern_error(r"ACME-\d+") is None
    scrubber = Scrubber(ScrubRules(patterns=("(unclosed", "x*")))
    assert scrubber.scrub({"q": "xxx (unclosed"}) == ({"q": "xxx (unclosed"}, 0)


def test_data_holding_nothing_is_returned_as_is_and_nothing_is_changed_in_place():
    clean = {"query": "AI impact on film 2024", "results": [{"url": "https://example.org/a"}]}
    assert SCRUBBER.scrub(clean)[0] is clean
    dirty = {"query": "film", "api_key": "k-1"}
    assert scrubbed(dirty) == {"query": "film", "api_key": FILTERED}
    assert dirty == {"query": "film", "api_key": "k-1"}


def test_odd_values_are_read_without_raising():
    value = {1: "one", None: [1.5, b"bytes", (2, "token=abc123")], "x": object}
    assert scrubbed(value)[None][2] == [2, "token=[Filtered]"]


class Unskipping(Scrubber):
    """The same rules without the look that skips text holding nothing."""

    def may_hold(self, text: str) -> bool:
        return True


FRAGMENTS = [
    "api_key=",
    "Authorization: ",
    "Bearer ",
    "Basic ",
    "token",
    "://user:",
    "@host",
    "?page=2&token=",
    "\n",
    "\n    ",
    ": ",
    "=",
    "'",
    '"',
    " ",
    "-",
    "_",
    "4539 1488 0343 6467",
    "4111111111111111",
    "ghp",
    "sk",
    "AKIA",
    "eyJ",
    "SG.",
    "-----BEGIN RSA PRIVATE KEY-----",
    corpus.BASIC,
    corpus.OPENAI_KEY,
    corpus.AWS_KEY_ID,
    corpus.JWT,
    "Zq7TfW2nXc4Lm9Rb1Yv8Hd3Ks6Pj0Ue5",
    "lorem ipsum",
]


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(FRAGMENTS), max_size=12).map("".join))
def test_skipping_text_that_holds_nothing_never_changes_what_is_filtered(raw):
    for scrubber, unskipping in [(SCRUBBER, Unskipping()), (WITH_OPERATOR_RULES, None)]:
        unskipping = unskipping or Unskipping(WITH_OPERATOR_RULES.rules)
        assert scrubber.text(raw) == unskipping.text(raw)
        assert scrubber.scrub({"a": [raw, raw]}) == unskipping.scrub({"a": [raw, raw]})


def test_text_holding_something_to_look_at_but_nothing_to_filter_is_returned_as_is():
    value = {"detail": "ReadTimeout: key lookup failed at https://api.example/v1?page=2"}
    assert SCRUBBER.scrub(value)[0] is value


@pytest.mark.parametrize("key", ["key", "OPENAI_KEY", "tokens", "primary.key", "keys"])
def test_a_weak_key_name_filters_only_a_value_that_looks_like_a_credential(key):
    assert scrubbed({key: "zx81Kq0vLm27Tg5"}) == {key: FILTERED}
    for plain in (42, "42", "created_at", "550e8400-e29b-41d4-a716-446655440000", "two words 123"):
        assert scrubbed({key: plain}) == {key: plain}
    assert text(f"the {key}=42 answer") == f"the {key}=42 answer"
    assert text(f"{key}=zx81Kq0vLm27Tg5 next") == f"{key}={FILTERED} next"


def test_token_counts_under_tokens_names_are_kept():
    usage = {"input_tokens": 1200, "max_tokens": 4096, "tokens": ["zx81Kq0vLm27Tg5", "a b"]}
    assert scrubbed(usage) == {
        "input_tokens": 1200,
        "max_tokens": 4096,
        "tokens": [FILTERED, "a b"],
    }
