"""A hostile corpus of secrets as agents paste them: under keys of every case and separator,
nested 30 deep, in exception text (headers, bearer and basic credentials, URLs, split across
lines), in well-known key formats and as card numbers. Each secret is a distinct string, so that
finding any of them anywhere after scrubbing is a leak. Shared by the unit tests and the live
test that posts it through every way in."""

from __future__ import annotations

import base64
from typing import Any

# Format samples: the shapes the providers document, with made-up characters.
OPENAI_KEY = "sk-proj-Zq7TfW2nXc4Lm9Rb1Yv8Hd3Ks6Pj0Ue5"
ANTHROPIC_KEY = "sk-ant-api03-Rk4Wm8Qz2Lx6Tc1Vb9Nh3Jd7Fs5Gp0Ya"
AWS_KEY_ID = "AKIAZQ7TFW2NXC4LM9RB"
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYzq7tfw2nxc"
GITHUB_TOKEN = "ghp_Zq7TfW2nXc4Lm9Rb1Yv8Hd3Ks6Pj0Ue5Aa11"
STRIPE_KEY = "sk_live_Zq7TfW2nXc4Lm9Rb1Yv8Hd3K"
SLACK_TOKEN = "xoxb-2468013579-Zq7TfW2nXc4Lm9Rb"
GOOGLE_KEY = "AIzaSyZq7TfW2nXc4Lm9Rb1Yv8Hd3Ks6Pj0Ue5x"
JWT = (
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9."
    "eyJzdWIiOiJhZ2VudC03IiwiaWF0IjoxNzE4MDAwMDAwfQ."
    "Zq7TfW2nXc4Lm9Rb1Yv8Hd3Ks6Pj0Ue5Aa11Bb22Cc3"
)
CARD = "4539 1488 0343 6467"  # Luhn-valid
CARD_DIGITS = CARD.replace(" ", "")
CARD_NUMBER = 5555555555554444  # Luhn-valid, as a JSON number
NOT_A_CARD = "4539 1488 0343 6468"  # Luhn-invalid: kept
BASIC_PASSWORD = "Pa55-basic-Hq4x"
BASIC = base64.b64encode(f"svc-user:{BASIC_PASSWORD}".encode()).decode()

# Plain secrets under keys, in URLs and headers.
API_KEY = "old-key-7f3a9c21"
PASSWORD = "hunter2-Qx81vB"
CLIENT_SECRET = "cs-Vb9Nh3Jd7Fs5"
COOKIE = "sid=Zt8Yq2Wv6Lp4Rm0"
URL_TOKEN = "tok-9d8e7f6a5b4c"
DB_PASSWORD = "pg-S3cr3t-9Wq"
DEEP_SECRET = "deep-Xw3Kq8Zr5Tn1"
MIXED = {"API-Key": "mixed-Ak7Lm2", "X_Api_Key": "mixed-Xk8Pq3", "PASSWORD": "mixed-Pw9Rs4"}
MIXED |= {"Client-Secret": "mixed-Cs0Tu5", "accessToken": "mixed-At1Vw6"}

# Split across lines: a folded header, a token wrapped at 32 columns, a value on the next line,
# a JWT broken at its dots, a private key block.
FOLDED_TOKEN = ("Fd1Qz7Rk3Wm9Lx5Tc", "Hv2Nb8Jd4Gs6Pa0Ye")
WRAPPED = ("Wr4pQz7Rk3Wm9Lx5Tc1Vb9Nh3Jd7Fs5G", "Zq2Nb8Jd4Gs6Pa0YeUu7Ii8Oo9Pp0Aa")
NEXT_LINE_KEY = "sk-Nx7Qz3Rk8Wm2Lx6Tc1Vb9Nh3Jd7"
PEM_BODY = ("MIIEpQIBAAKCAQEAzq7TfW2nXc4Lm9Rb1Yv8Hd3Ks6Pj0Ue5", "Aa11Bb22Cc33Dd44Ee55Ff66Gg77Hh88")

# What an operator adds to the built-in rules in the tests, and what only they catch.
OPERATOR_RULES = [
    {"kind": "key", "value": "ssn", "note": "", "enabled": True},
    {"kind": "pattern", "value": r"ACME-(?P<secret>\d{8})", "note": "", "enabled": True},
    {"kind": "safe_field", "value": "public_token", "note": "", "enabled": True},
]
SSN = "078-05-1120"
ACME_NUMBER = "77001234"
SAFE_VALUE = "public-token-kept-Qq1"


def exception_text() -> str:
    """An exception chain as an HTTP library prints it, with every credential in it."""
    return (
        f"httpx.HTTPStatusError: Client error '401 Unauthorized' for url "
        f"'https://crm.example/api/accounts?account=ACME&api_key={API_KEY}'\n"
        f"Request headers:\n"
        f"  Authorization: Bearer {FOLDED_TOKEN[0]}\n"
        f"    {FOLDED_TOKEN[1]}\n"
        f"  Cookie: {COOKIE}; theme=dark\n"
        f"  Accept: application/json\n"
        f"retrying with Authorization: Basic {BASIC}\n"
        f"token in log: Bearer {WRAPPED[0]}\n{WRAPPED[1]}\n"
        f"api_key=\n    {NEXT_LINE_KEY}\n"
        f"connecting to postgres://app:{DB_PASSWORD}@db.internal:5432/crm\n"
        f"jwt {JWT.replace('.', '.' + chr(10), 1)}\n"
        f"-----BEGIN RSA PRIVATE KEY-----\n{PEM_BODY[0]}\n{PEM_BODY[1]}\n"
        f"-----END RSA PRIVATE KEY-----\n"
        f"search?token={URL_TOKEN}&page=2 card {CARD} not a card {NOT_A_CARD}\n"
        f"keys {OPENAI_KEY} {ANTHROPIC_KEY} {AWS_KEY_ID} {GITHUB_TOKEN} {STRIPE_KEY} "
        f"{SLACK_TOKEN} {GOOGLE_KEY} order ACME-{ACME_NUMBER}"
    )


def deep(levels: int, leaf: dict[str, Any]) -> dict[str, Any]:
    node: dict[str, Any] = leaf
    for i in range(levels):
        node = {f"level{i}": node}
    return node


def attempted(depth: int = 30) -> dict[str, Any]:
    """What a tool call held: keys that name secrets in any case, a URL, a secret in the object
    `depth` levels down (`attempted` itself the first)."""
    return {
        "operation": "lookup",
        "query": "ACME accounts",
        "api_key": API_KEY,
        "auth": {"user": "svc", "password": PASSWORD, "client_secret": CLIENT_SECRET},
        "url": f"https://crm.example/search?token={URL_TOKEN}&page=2",
        "headers": [["Authorization", f"Bearer {JWT}"], ["Accept", "application/json"]],
        "aws": {"aws_access_key_id": AWS_KEY_ID, "aws_secret_access_key": AWS_SECRET},
        "customer": {"name": "Ada", "Customer-SSN": SSN, "public_token": SAFE_VALUE},
        "nested": deep(depth - 2, {"API-Key": DEEP_SECRET}),
        **MIXED,
    }


def envelope(depth: int = 30) -> dict[str, Any]:
    """A failure envelope holding the whole corpus in every field the filters read."""
    return {
        "status": "error",
        "failure_type": "auth_failure",
        "retryable": False,
        "attempted": attempted(depth),
        "detail": exception_text(),
        "chain": [f"httpx.HTTPStatusError: 401 for ?api_key={API_KEY}", exception_text()],
        "partial_results": [{"account": "ACME", "card": CARD, "card_number": CARD_NUMBER}],
        "alternatives": [f"retry with Authorization: Bearer {JWT}", "use crm_backup instead"],
    }


def success(depth: int = 30) -> dict[str, Any]:
    """A success whose results hold secrets too."""
    return {
        "status": "ok",
        "attempted": attempted(depth),
        "results": [{"account": "ACME", "token": GITHUB_TOKEN, "note": f"card {CARD}"}],
    }


def secrets() -> list[str]:
    """Every string that must never be found after scrubbing (split secrets by their parts)."""
    found = [
        OPENAI_KEY,
        ANTHROPIC_KEY,
        AWS_KEY_ID,
        AWS_SECRET,
        GITHUB_TOKEN,
        STRIPE_KEY,
        SLACK_TOKEN,
        GOOGLE_KEY,
        JWT,
        *JWT.split("."),
        CARD,
        CARD_DIGITS,
        str(CARD_NUMBER),
        BASIC,
        API_KEY,
        PASSWORD,
        CLIENT_SECRET,
        COOKIE,
        URL_TOKEN,
        DB_PASSWORD,
        DEEP_SECRET,
        *MIXED.values(),
        *FOLDED_TOKEN,
        *WRAPPED,
        NEXT_LINE_KEY,
        *PEM_BODY,
        SSN,
        ACME_NUMBER,
    ]
    return [s for s in found if len(s) >= 8]
