"""Secrets in any shape, and look-alikes that must survive.

`GITLEAKS`: gitleaks' own true-positive examples (collected by scripts/gitleaks_corpus.py from
its cmd/generate/config/rules/*.go at commit b58d3f102cf3; each names its rule and file), with
the secret gitleaks' rule reports in each. `LAYERED`: the shapes that got through before (escaped
JSON, command lines, XML, URL-encoded and base64 forms, environment-style key names, tokens the
rule set lacks), each with the secret that must be gone. `LOOKALIKES`: 50 values that read like
secrets but are not (UUIDs, git SHAs, trace and request ids, digests, `key=42`), which must come
back exactly as sent."""

from __future__ import annotations

import base64
import hashlib
import json
import uuid
from pathlib import Path
from urllib.parse import quote

GITLEAKS: list[dict[str, str]] = json.loads(
    (Path(__file__).with_name("gitleaks_examples.json")).read_text()
)

PASSWORD = "Hq4x-Zt8Yq2Wv6"
LAYERED: list[tuple[str, str, str]] = [
    # (what, text, secret)
    ("escaped JSON in a log", f'log: "{{\\"password\\": \\"{PASSWORD}a\\"}}"', PASSWORD + "a"),
    ("escaped JSON, no outer quotes", f'{{\\"db_password\\": \\"{PASSWORD}b\\"}}', PASSWORD + "b"),
    (
        "escaped header",
        f'"headers": "{{\\"Authorization\\": \\"Token {PASSWORD}c\\"}}"',
        PASSWORD + "c",
    ),
    (
        "OTLP tool arguments",
        json.dumps({"env": f'DB_PASSWORD: "{PASSWORD}d"', "cmd": "deploy"}),
        PASSWORD + "d",
    ),
    ("escaped key in text", f'export DB_PASSWORD: \\"{PASSWORD}e\\"', PASSWORD + "e"),
    (
        "Slack webhook",
        "posting to https://hooks.slack.com/services/T0ABCDEFG/B0ABCDEFG/Zq7TfW2nXc4Lm9Rb1Yv8Hd3K",
        "Zq7TfW2nXc4Lm9Rb1Yv8Hd3K",
    ),
    (
        "Google OAuth token",
        "token ya29.a0AfH6SMBq7TfW2nXc4Lm9Rb1Yv8Hd3Ks6Pj0",
        "a0AfH6SMBq7TfW2nXc4Lm9Rb1Yv8Hd3Ks6Pj0",
    ),
    (
        "Stripe webhook secret",
        "whsec_Zq7TfW2nXc4Lm9Rb1Yv8Hd3Ks6Pj0Ue5 rejected",
        "Zq7TfW2nXc4Lm9Rb1Yv8Hd3Ks6Pj0Ue5",
    ),
    (
        "Discord bot token",
        "bot MTA4NjQ1NzE5ODc2NTQzMjEw.GZq7Tf.Zq7TfW2nXc4Lm9Rb1Yv8Hd3Ks6Pj0Ue5Aa login failed",
        "Zq7TfW2nXc4Lm9Rb1Yv8Hd3Ks6Pj0Ue5Aa",
    ),
    ("curl -u", f"curl -u deploy:{PASSWORD}f https://api.example.com", PASSWORD + "f"),
    ("--password X", f"pg_dump --password {PASSWORD}g --host db", PASSWORD + "g"),
    ("--token=X", f"cli sync --token={PASSWORD}h --verbose", PASSWORD + "h"),
    ("XML element", f"<config><password>{PASSWORD}i</password></config>", PASSWORD + "i"),
    ("URL-encoded", f"body=user%3Dbob%26password%3D{quote(PASSWORD + 'j')}", PASSWORD + "j"),
    (
        "base64-wrapped key",
        "blob " + base64.b64encode(f'{{"api_key": "{PASSWORD}k"}}'.encode()).decode(),
        PASSWORD + "k",
    ),
    ("tokens list", f'{{"tokens": ["{PASSWORD}9l1", "x"]}}', PASSWORD + "9l1"),
    ("DB_PASS", f"DB_PASS={PASSWORD}m", PASSWORD + "m"),
    ("GITHUB_PAT", f"GITHUB_PAT={PASSWORD}n", PASSWORD + "n"),
    ("OPENAI_KEY", f"OPENAI_KEY={PASSWORD}9o", PASSWORD + "9o"),
    ("X-Api-Key header", f"X-Api-Key: {PASSWORD}p", PASSWORD + "p"),
    ("Cookie header", f"Cookie: session={PASSWORD}q", PASSWORD + "q"),
    ("URL user info", f"https://svc:{PASSWORD}r@db.example.com/x", PASSWORD + "r"),
]

# Distinct, deterministic values: none may change.
_SEEDS = [f"failsight-{n}" for n in range(10)]
LOOKALIKES: list[str] = [
    *(str(uuid.uuid5(uuid.NAMESPACE_URL, s)) for s in _SEEDS[:8]),
    *(f"commit {hashlib.sha1(s.encode()).hexdigest()}" for s in _SEEDS[:8]),
    *(f"short sha {hashlib.sha1(s.encode()).hexdigest()[:7]}" for s in _SEEDS[:3]),
    *(f"trace_id={hashlib.md5(s.encode()).hexdigest()}" for s in _SEEDS[:5]),
    *(f"span {hashlib.sha256(s.encode()).hexdigest()[:16]}" for s in _SEEDS[:3]),
    *(
        f"traceparent: 00-{hashlib.md5(s.encode()).hexdigest()}-{hashlib.sha1(s.encode()).hexdigest()[:16]}-01"  # noqa: E501
        for s in _SEEDS[:2]
    ),
    *(f"sha256 {hashlib.sha256(s.encode()).hexdigest()}" for s in _SEEDS[:4]),
    *(f"etag md5:{hashlib.md5(s.encode()).hexdigest()}" for s in _SEEDS[:2]),
    *(f"x-request-id: req_{hashlib.sha1(s.encode()).hexdigest()[:24]}" for s in _SEEDS[:3]),
    "the key=42 answer",
    "key: 42",
    "max_tokens=4096 input_tokens: 1200",
    "sort_key=created_at",
    "Idempotency-Key: 5f0c6a2e-8b1d-4c9a-9e7f-3d2b1a0c9e8f",
    "primary_key id",
    "passage 3 of the book",
    "bypass=true",
    "GET /search?q=film&page=2 returned 0 results",
    "retry after 2026-12-07T20:00:00Z from 10.0.0.12:5432",
    "version 3.11.7 build 20261207",
    "tokens used: 1234",
]
assert len(LOOKALIKES) == 50, len(LOOKALIKES)
assert len(set(LOOKALIKES)) == 50
