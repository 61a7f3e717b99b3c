"""Failure signatures: what varies between occurrences of one error folds, words do not."""

from __future__ import annotations

import ipaddress
import random
import string
import uuid
from datetime import UTC, datetime, timedelta, timezone

import pytest

from orchestrator.fingerprint import PARAMETERS, PATTERN_LENGTH, normalise_detail, signature

# One example per row of PARAMETERS: (row, detail, its normalised form).
EXAMPLES = [
    ("query", "GET /v1/search?q=film&page=2 failed", "get /v<num>/search?<query> failed"),
    ("email", "no mailbox for Jane.Doe+news@mail.example.co.uk", "no mailbox for <email>"),
    ("uuid", "run 123E4567-E89B-12D3-A456-426614174000 gone", "run <uuid> gone"),
    ("timestamp", "expired at 2026-12-04T20:25:56.123+01:00", "expired at <ts>"),
    ("timestamp", "no data for 2026-12-04", "no data for <ts>"),
    ("ipv6", "connect to [2001:db8::8a2e:370:7334]:443 refused", "connect to [<ip>]:<num> refused"),
    ("ipv6", "no route to fe80::1%eth0", "no route to <ip>"),
    ("ipv4", "connect to 10.20.30.40:5432 refused", "connect to <ip>:<num> refused"),
    ("prefixed_id", "Request req_8f3ab2c1d9 failed", "request req_<id> failed"),
    ("prefixed_id", "charge ch_3MtwBwLkdIwHu7ix declined", "charge ch_<id> declined"),
    ("hex", "trace 4bf92f3577b34da6a3ce929d0e0e4736 lost", "trace <hex> lost"),
    ("hex", "span 00f067aa0ba902b7 lost", "span <hex> lost"),
    ("hex", "object at 0x7f3a2b1c freed", "object at <hex> freed"),
    ("hex", "commit 9fceb02d0ae598e95dc970b74767f19372d61af8 missing", "commit <hex> missing"),
    ("quoted", "key 'a1b2c3' missing", "key <q> missing"),
    (
        "quoted",
        'upstream said "503 Service Unavailable"',
        "upstream said '<num> service unavailable'",
    ),
    ("number", "ReadTimeout after 2.5 s, 3 tries", "readtimeout after <num> s, <num> tries"),
]


@pytest.mark.parametrize(("row", "detail", "expected"), EXAMPLES, ids=[e[1] for e in EXAMPLES])
def test_each_parameter_is_replaced_by_its_placeholder(row: str, detail: str, expected: str):
    assert row in {parameter.name for parameter in PARAMETERS}
    assert normalise_detail(detail) == expected


def test_every_row_of_the_table_has_an_example():
    assert {parameter.name for parameter in PARAMETERS} == {row for row, _, _ in EXAMPLES}


@pytest.mark.parametrize(
    "detail",
    [
        "the deadbeef facade decade",  # words made of hex letters are words
        "at 12:34:56 or a:b:c",  # look like IPv6, are not addresses
        "can't connect to 'the primary'",  # a quoted phrase stays
        "field_added to schema_v",  # a prefix without an id
    ],
)
def test_words_that_only_look_like_parameters_stay(detail: str):
    assert "<ip>" not in normalise_detail(detail)
    assert "<hex>" not in normalise_detail(detail)
    assert "<id>" not in normalise_detail(detail)


def _hex(rng: random.Random, digits: int) -> str:
    return f"{rng.getrandbits(digits * 4):0{digits}x}"


def _ipv6(rng: random.Random) -> str:
    groups = [rng.getrandbits(16) * rng.randint(0, 1) for _ in range(8)]  # zero runs compress
    address = str(ipaddress.IPv6Address(sum(g << (16 * i) for i, g in enumerate(groups))))
    return address.upper() if rng.random() < 0.3 else address


def _timestamp(rng: random.Random) -> str:
    offset = timezone(timedelta(minutes=15 * rng.randint(-48, 56)))
    moment = datetime(2020, 1, 1, tzinfo=UTC) + timedelta(seconds=rng.uniform(0, 3e8))
    text = moment.astimezone(offset).isoformat(timespec=rng.choice(["seconds", "microseconds"]))
    return text.replace("+00:00", "Z") if rng.random() < 0.5 else text


def _email(rng: random.Random) -> str:
    local = "".join(rng.choices(string.ascii_letters + string.digits + "._+", k=rng.randint(3, 20)))
    domain = "".join(rng.choices(string.ascii_lowercase + string.digits, k=rng.randint(2, 12)))
    return f"{rng.choice(string.ascii_letters)}{local}@{domain}.{rng.choice(['com', 'io', 'de'])}"


def _query(rng: random.Random) -> str:
    words = ["film", "page", "cursor", "lang", "q"]
    pairs = [
        f"{rng.choice(words)}={_hex(rng, rng.randint(1, 12))}" for _ in range(rng.randint(1, 4))
    ]
    return "&".join(pairs)


def _message(rng: random.Random) -> str:
    ipv4 = ipaddress.IPv4Address(rng.getrandbits(32))
    return (
        f"Request req_{_hex(rng, 10)} for {_email(rng)} from {ipv4}"
        f" via [{_ipv6(rng)}]:{rng.randint(1, 65535)} failed at {_timestamp(rng)} on"
        f" {rng.choice(['2026-01-02', '2027-11-30'])}: GET https://api.example.com/v1/items/"
        f"{uuid.UUID(int=rng.getrandbits(128), version=4)}?{_query(rng)} returned"
        f" {rng.randint(400, 599)} (trace {_hex(rng, 32)}, span {_hex(rng, 16)}, object at"
        f" 0x{_hex(rng, 12)}) after {rng.randint(1, 10**6)} attempts and"
        f" {rng.uniform(0, 1000):.{rng.randint(0, 3)}f} s"
    )


def test_a_thousand_messages_that_differ_only_in_parameters_fold_into_one_signature():
    rng = random.Random(30)
    messages = {_message(rng) for _ in range(1000)}
    assert len(messages) == 1000
    assert len({signature("news_api", "timeout", m) for m in messages}) == 1
    assert normalise_detail(messages.pop()) == (
        "request req_<id> for <email> from <ip> via [<ip>]:<num> failed at <ts> on <ts>: get"
        " https://api.example.com/v<num>/items/<uuid>?<query> returned <num> (trace <hex>, span"
        " <hex>, object at <hex>) after <num> attempts and <num> s"
    )


@pytest.mark.parametrize(
    ("one", "other"),
    [
        ("Request req_8f3ab2c1d9 failed: connection refused", "Request req_77 failed: reset"),
        ("user 42 not found", "order 42 not found"),
        ("'primary' is read-only", "'replica' is read-only"),
        ("GET https://a.example.com/search?q=1", "GET https://b.example.com/search?q=1"),
    ],
)
def test_two_messages_that_differ_in_words_do_not_fold(one: str, other: str):
    assert signature("news_api", "timeout", one) != signature("news_api", "timeout", other)


def test_the_source_and_the_failure_type_are_part_of_the_signature():
    detail = "ReadTimeout after 5 s"
    assert signature("news_api", "timeout", detail) != signature("web_search", "timeout", detail)
    assert signature("news_api", "timeout", detail) != signature("news_api", None, detail)
    assert signature("news_api", None, detail) == signature("news_api", "unclassified", detail)


def test_only_the_head_of_a_long_detail_is_read():
    assert len(normalise_detail("word " * 10_000)) == PATTERN_LENGTH
    assert signature("s", "timeout", "x" * 5000 + "1") == signature(
        "s", "timeout", "x" * 5000 + "2"
    )
