"""Secrets filtered out of what an agent reports, before it is sent or stored: values under keys
that name secrets, credentials in text (HTTP headers, bearer and basic credentials, URL query
parameters and user info), well-known key formats and card numbers, each replaced by
`[Filtered]` with its key kept. Pure and never raises; the rules are plain data (`ScrubRules`),
compiled once per `Scrubber`.

    scrubber = Scrubber()
    scrubber.scrub({"api_key": "old-key", "q": "film"})  # ({"api_key": "[Filtered]", ...}, 1)
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from classifier.envelope import HELD_KEYS

FILTERED: Final = "[Filtered]"
# The envelope's fields that carry what an agent's call held (`chain`: the exception chain), and
# the run's operation, which names it.
ENVELOPE_FIELDS: Final = (*HELD_KEYS, "operation")
# Deeper data is not read: it is filtered whole.
MAX_DEPTH: Final = 64
# Shorter text holds no credential the text rules find (a key's value is filtered at any size).
MIN_TEXT: Final = 6
KEY_CACHE_SIZE: Final = 4096

# Key names are compared folded: lower case, without separators ("X_Api-Key" -> "xapikey").
_SEPARATORS: Final = str.maketrans("", "", "-_. :/")
# A key names a secret when, folded, it contains one of these (long words, never innocent)...
SECRET_KEY_PARTS: Final = (
    "password",
    "passwd",
    "passphrase",
    "apikey",
    "accesskey",
    "privatekey",
    "secretkey",
    "clientsecret",
    "authorization",
    "credential",
    "sessionid",
    "sessid",
    "cookie",
    "bearer",
)
# ...or ends with one of these ("access_token" does, "input_tokens" and "token_type" do not)...
SECRET_KEY_ENDINGS: Final = (
    "secret",
    "secrets",
    "token",
    "pwd",
    "auth",
    "session",
    "jwt",
    "signature",
    "sig",
    "csrf",
    "xsrf",
    "otp",
    "accountkey",
    "signingkey",
    "encryptionkey",
    "masterkey",
    "sshkey",
    "licensekey",
)
# ...or is one of these whole (as query parameters: Google's `key=`, a card's `cvc=`).
SECRET_KEY_NAMES: Final = frozenset({"key", "pass", "pw", "pin", "cvv", "cvc", "ssn"})

# Header lines whose whole value is a credential, with its folded continuation lines (indented,
# not a header of their own) and the wrapped remainder of a token.
_WRAPPED = r"(?:\r?\n[ \t]*[\w\-+/.]{8,}={0,2}[ \t]*(?=\r?\n|\Z))*"
_HEADER = re.compile(
    r"(?P<name>(?<![\w-])(?:proxy-authorization|authorization|set-cookie|cookie))"
    r"(?P<sep>[\"']?[ \t]*[:=][ \t]*(?:\r?\n[ \t]*)?)"
    r"(?P<value>\"[^\"]*\"|'[^']*'|[^\r\n]+(?:\r?\n[ \t]+(?![ \t]*[\w\-]+:)[^\r\n]*)*"
    + _WRAPPED
    + ")",
    re.IGNORECASE,
)
_BEARER = re.compile(r"\bbearer(?P<sep>\s+)(?P<value>[\w\-.~+/]{5,}=*" + _WRAPPED + ")", re.I)
_BASIC = re.compile(r"\bbasic(?P<sep>\s+)(?P<value>[A-Za-z0-9+/]{6,}={0,2})", re.I)
# `key: value`, `key=value`, `"key": "value"`, a query parameter: the key is judged by the key
# rules. From each separator the key is read backwards (the text before it reversed: spaces, a
# quote, the key's characters) and the value forwards, which may start on the next line; text
# inside another key's value (a URL's own query) is read too.
_SEPARATOR = re.compile(r"[:=]")
_KEY_NAME = re.compile(r"[A-Za-z][\w.\- ]{0,63}")
_KEY_BEFORE = re.compile(r"[ \t]*[\"']?([\w.\-]{1,64})")
_AFTER_SEPARATOR = re.compile(r">?[ \t]*(?:\r?\n[ \t]*)?")
_VALUE = re.compile(r"\"(?:[^\"\\\n]|\\.)*\"|'(?:[^'\\\n]|\\.)*'|[^\s\"'&;,?#)}\]<>]+" + _WRAPPED)
_USERINFO = re.compile(r"(?P<head>\b[a-z][a-z0-9+.\-]*://[^\s:/@]*:)(?P<value>[^\s/@]+)(?=@)", re.I)
_CARD = re.compile(r"(?<![\d.])(?:\d[ \-]?){12,18}\d(?!\d)")
# Well-known credential formats, from the providers' own documentation of their key prefixes
# (as GitHub's secret scanning and gitleaks list them). A JWT's parts may be split across lines.
KEY_FORMATS: Final = (
    (
        "private key block",
        r"-----BEGIN[A-Z0-9 ]*PRIVATE KEY-----[\s\S]*?(?:-----END[A-Z0-9 ]*PRIVATE KEY-----|\Z)",
    ),
    ("OpenAI, Anthropic and similar keys", r"\bsk-[\w\-]{20,}"),
    ("Stripe secret and restricted keys", r"\b[rs]k_(?:live|test)_[A-Za-z0-9]{16,}"),
    ("AWS access key id", r"\b(?:AKIA|ASIA|ABIA|ACCA)[A-Z0-9]{16}\b"),
    ("GitHub tokens", r"\b(?:gh[pousr]_[A-Za-z0-9]{36,}|github_pat_\w{22,})"),
    ("GitLab personal access token", r"\bglpat-[\w\-]{20,}"),
    ("Slack tokens", r"\bxox[abposr]-[A-Za-z0-9\-]{10,}"),
    ("Google API key", r"\bAIza[\w\-]{35}"),
    ("Hugging Face token", r"\bhf_[A-Za-z0-9]{30,}"),
    ("npm token", r"\bnpm_[A-Za-z0-9]{36}"),
    ("SendGrid key", r"\bSG\.[\w\-]{16,}\.[\w\-]{16,}"),
    ("JSON Web Token", r"\beyJ[\w\-]{8,}\.(?:\r?\n[ \t]*)?eyJ[\w\-]{8,}\.(?:\r?\n[ \t]*)?[\w\-]*"),
)
# Where each format's token may start, as `may_hold` looks for them: after one of these ends with
# "-" or "_" (case as written), or at "eyJ", "SG.", "-----BEGIN", or AWS's and Google's prefixes.
FORMAT_PREFIXES: Final = (
    "sk-",
    "sk_",
    "rk_",
    "ghp_",
    "gho_",
    "ghu_",
    "ghs_",
    "ghr_",
    "github_",
    "glpat-",
    *(f"xox{kind}-" for kind in "abposr"),
    "hf_",
    "npm_",
)
_FORMAT_MARKER = re.compile(r"A(?:KIA|SIA|BIA|CCA|Iza)")  # AWS and Google: letters only
# Digits as `may_hold` reads them: each one a "0", single spaces and hyphens between them gone.
_DIGIT_CLASSES: Final = bytes.maketrans(b"0123456789", b"0000000000")
CARD_MIN: Final = 13
# Card networks' leading digits (Visa 4, Mastercard 2 and 5, Amex and Diners 3, Discover 6).
CARD_LEADING_DIGITS: Final = "23456"

PLAIN, SECRET, SAFE = 0, 1, 2


def fold(key: str) -> str:
    """Return `key` as the key rules compare it: lower case, without separators."""
    return key.lower().translate(_SEPARATORS)


def luhn_valid(digits: str) -> bool:
    """Return whether a string of digits passes the Luhn check that card numbers carry."""
    total = 0
    for i, char in enumerate(reversed(digits)):
        n = ord(char) - 48
        if i % 2:
            n = n * 2 - 9 if n > 4 else n * 2
        total += n
    return total % 10 == 0


def is_card_number(digits: str) -> bool:
    """Return whether digits (no separators) read as a payment card number."""
    return 13 <= len(digits) <= 19 and digits[0] in CARD_LEADING_DIGITS and luhn_valid(digits)


@dataclass(frozen=True, slots=True)
class ScrubRules:
    """An operator's rules on top of the built-in ones: more key names (a key ending with one,
    folded, is a secret: `ssn` also names `Customer-SSN`), more patterns (regular expressions;
    the whole match is filtered, or only its group named `secret`), and safe fields (keys, folded,
    whose values are left as they are)."""

    keys: tuple[str, ...] = ()
    patterns: tuple[str, ...] = ()
    safe_fields: tuple[str, ...] = ()

    KINDS = ("key", "pattern", "safe_field")

    @classmethod
    def from_data(cls, rows: Iterable[Mapping[str, Any]]) -> ScrubRules:
        """Read rules as the server sends them: [{"kind": "key"|"pattern"|"safe_field",
        "value": …, "enabled": …}]; disabled and malformed rows are skipped."""
        found: dict[str, list[str]] = {kind: [] for kind in cls.KINDS}
        for row in rows:
            if not isinstance(row, Mapping) or row.get("enabled") is False:
                continue
            kind, value = row.get("kind"), row.get("value")
            if kind in found and isinstance(value, str) and value:
                found[kind].append(value)
        return cls(tuple(found["key"]), tuple(found["pattern"]), tuple(found["safe_field"]))


def pattern_error(pattern: str) -> str | None:
    """Return why `pattern` cannot be a scrub pattern (None if it can)."""
    try:
        compiled = re.compile(pattern)
    except (re.error, TypeError, ValueError, RecursionError) as exc:
        return f"not a regular expression: {exc}"
    if compiled.search("") is not None:
        return "matches empty text: it would filter everything"
    return None


class _Count:
    __slots__ = ("n",)

    def __init__(self) -> None:
        self.n = 0


class Scrubber:
    """The built-in rules and `rules`, compiled; `scrub` filters data, `text` text."""

    def __init__(self, rules: ScrubRules | None = None) -> None:
        self.rules = rules or ScrubRules()
        self._endings = SECRET_KEY_ENDINGS + tuple(fold(k) for k in self.rules.keys if fold(k))
        self._safe = frozenset(fold(k) for k in self.rules.safe_fields)
        self._patterns = [re.compile(p) for p in self.rules.patterns if pattern_error(p) is None]
        self._verdicts: dict[str, int] = {}
        self._plain_keys: set[str] = set()  # the keys of `_verdicts` judged PLAIN

    def scrub(self, value: Any) -> tuple[Any, int]:
        """Return `value` with its secrets filtered (the same object when it held none; never
        changed in place) and how many values are filtered in it: by this call, or before it
        (the `[Filtered]` a client's filters left)."""
        texts: list[str] = []
        if not self._structure_holds(value, 0, texts):
            joined = "\0".join(texts)
            if not self.may_hold(joined):
                return value, joined.count(FILTERED)  # the common case: one look at its text
        count = _Count()
        return self._value(value, 0, count), count.n

    def text(self, text: str) -> tuple[str, int]:
        """Return text with the credentials it holds filtered, and how many are filtered in it
        (as `scrub` counts them)."""
        count = _Count()
        return self._text(text, count), count.n

    def may_hold(self, text: str) -> bool:
        """Return whether the text rules may find something in `text` (False is certain)."""
        if self._patterns or len(text) < MIN_TEXT:
            return bool(self._patterns)
        lowered = text.lower()
        separated = ":" in text or "=" in text
        return (
            "bearer" in lowered
            or "basic" in lowered
            or (separated and ("authoriz" in lowered or "cookie" in lowered))
            or ("://" in text and "@" in text)
            or _may_hold_format(text)
            or (separated and self._names_a_secret_before_a_separator(text))
            or _may_hold_card(text)
        )

    def key_verdict(self, key: str) -> int:
        """Return SECRET if `key` names a secret, SAFE if its value is left as it is, else PLAIN."""
        verdict = self._verdicts.get(key)
        if verdict is None:
            verdict = self._judge(fold(key))
            if len(self._verdicts) >= KEY_CACHE_SIZE:
                self._verdicts.clear()
                self._plain_keys.clear()
            self._verdicts[key] = verdict
            if verdict == PLAIN:
                self._plain_keys.add(key)
        return verdict

    def _judge(self, folded: str) -> int:
        if folded in self._safe:
            return SAFE
        if (
            folded in SECRET_KEY_NAMES
            or folded.endswith(self._endings)
            or any(part in folded for part in SECRET_KEY_PARTS)
        ):
            return SECRET
        return PLAIN

    def _field_verdict(self, data: dict, key: Any) -> int:
        if not isinstance(key, str) or (key == "key" and "value" in data):
            return PLAIN  # the name in {"key": "x-api-key", "value": …}, not a key itself
        return self.key_verdict(key)

    def _names_secret(self, name: Any) -> bool:
        """Whether `name`, the first of a pair (["Authorization", "Bearer …"]), is a key naming
        a secret: a name, not text that mentions one."""
        return (
            isinstance(name, str)
            and _KEY_NAME.fullmatch(name) is not None
            and self.key_verdict(name) == SECRET
        )

    # Data: a look at the structure first (keys, pairs, numbers), collecting its text

    def _structure_holds(self, value: Any, depth: int, texts: list[str]) -> bool:
        """Whether the keys, pairs or numbers in `value` hold a secret; its text is collected
        into `texts`. A loop over a stack rather than a call per level, strings handled in line,
        a mapping whose keys are all known plain looked at by its values only: this look is all
        most reports get."""
        stack = [(value, depth)]
        while stack:
            value, depth = stack.pop()
            items: Iterable[Any]
            if isinstance(value, dict):
                if depth >= MAX_DEPTH or ("value" in value and self._names_secret(_name_of(value))):
                    return True
                if self._plain_keys.issuperset(value):
                    items = value.values()
                elif self._keys_hold(value):
                    return True
                else:
                    items = [v for k, v in value.items() if self._field_verdict(value, k) != SAFE]
            elif isinstance(value, list | tuple):
                if depth >= MAX_DEPTH or (len(value) == 2 and self._names_secret(value[0])):
                    return True
                items = value
            elif isinstance(value, str):
                items = (value,)
            else:
                if _card_int(value):
                    return True
                continue
            for item in items:
                if type(item) is str:
                    if len(item) >= MIN_TEXT:
                        texts.append(item)
                elif item is not None and type(item) is not bool:
                    stack.append((item, depth + 1))
        return False

    def _keys_hold(self, data: dict) -> bool:
        """Whether a key of `data` names a secret that has a value."""
        return any(
            self._field_verdict(data, key) == SECRET and _filtered(item, _Count()) is not item
            for key, item in data.items()
        )

    def _value(self, value: Any, depth: int, count: _Count) -> Any:
        if isinstance(value, str):
            return self._text(value, count)
        if isinstance(value, dict):
            return self._mapping(value, depth, count)
        if isinstance(value, list | tuple):
            return self._sequence(value, depth, count)
        if _card_int(value):
            count.n += 1
            return FILTERED
        return value

    def _mapping(self, data: dict, depth: int, count: _Count) -> Any:
        if depth >= MAX_DEPTH:
            count.n += 1
            return FILTERED
        out = None
        # {"name": "Authorization", "value": "…"}: a header or an attribute as two fields.
        pair = "value" in data and self._names_secret(_name_of(data))
        for key, item in data.items():
            verdict = self._field_verdict(data, key)
            if verdict == SAFE:
                continue
            if verdict == SECRET or (pair and key == "value"):
                new = _filtered(item, count)
            else:
                new = self._value(item, depth + 1, count)
            if new is not item:
                if out is None:
                    out = dict(data)
                out[key] = new
        return data if out is None else out

    def _sequence(self, items: list | tuple, depth: int, count: _Count) -> Any:
        if depth >= MAX_DEPTH:
            count.n += 1
            return FILTERED
        if len(items) == 2 and self._names_secret(items[0]):  # ["Authorization", "Bearer …"]
            value = _filtered(items[1], count)
            return items if value is items[1] else [items[0], value]
        out = None
        for i, item in enumerate(items):
            new = self._value(item, depth + 1, count)
            if new is not item:
                if out is None:
                    out = list(items)
                out[i] = new
        return items if out is None else out

    # Text

    def _text(self, text: str, count: _Count) -> str:
        count.n += text.count(FILTERED)
        if not self.may_hold(text):
            return text
        original = text
        for pattern, replace in _TEXT_RULES:
            text = pattern.sub(lambda m, r=replace: r(m, count), text)
        text = self._assignments(text, count)
        text = _USERINFO.sub(lambda m: _userinfo(m, count), text)
        text = _CARD.sub(lambda m: _card(m, count), text)
        for pattern in self._patterns:
            text = pattern.sub(lambda m: _operator_match(m, count), text)
        return original if text == original else text  # the same object when nothing was found

    def _secret_keys(self, text: str) -> Iterable[tuple[int, int]]:
        """Yield (key start, separator end) of each `key: value` or `key=value` whose key names a
        secret: from each separator the key is read backwards (spaces, a quote, its characters)."""
        for separator in _SEPARATOR.finditer(text):
            at = separator.start()
            if text.startswith("//", at + 1):
                continue  # a URL's scheme
            key = _KEY_BEFORE.match(text[max(0, at - 70) : at][::-1])
            if key is not None and self.key_verdict(key[1][::-1]) == SECRET:
                yield at - key.end(), _AFTER_SEPARATOR.match(text, at + 1).end()

    def _names_a_secret_before_a_separator(self, text: str) -> bool:
        for separator in ":=":
            at = text.find(separator)
            while at != -1:
                if not text.startswith("//", at + 1):  # not a URL's scheme
                    key = _KEY_BEFORE.match(text[max(0, at - 70) : at][::-1])
                    if key is not None and self.key_verdict(key[1][::-1]) == SECRET:
                        return True
                at = text.find(separator, at + 1)
        return False

    def _assignments(self, text: str, count: _Count) -> str:
        parts: list[str] = []
        done = 0
        for key_start, start in self._secret_keys(text):
            value = _VALUE.match(text, start)
            if key_start < done or value is None or _is_filtered(text, start):
                continue
            parts += [text[done:start], _quoted(value[0])]
            done = value.end()
            count.n += 1
        return "".join([*parts, text[done:]]) if parts else text


def _name_of(data: dict) -> Any:
    return data.get("name", data.get("key"))


def _card_int(value: Any) -> bool:
    return type(value) is int and 10**12 <= abs(value) < 10**19 and is_card_number(str(abs(value)))


def _may_hold_format(text: str) -> bool:
    if "eyJ" in text or "SG." in text or "-----BEGIN" in text or _FORMAT_MARKER.search(text):
        return True
    for joint in "-_":
        at = text.find(joint)
        while at != -1:
            if text[max(0, at - 10) : at + 1].endswith(FORMAT_PREFIXES):
                return True
            at = text.find(joint, at + 1)
    return False


def _may_hold_card(text: str) -> bool:
    if len(text) < CARD_MIN:
        return False
    digits = text.encode("utf-8", "replace").translate(_DIGIT_CLASSES, b" -")
    return b"0" * CARD_MIN in digits


def _is_filtered(text: str, at: int) -> bool:
    return text.startswith(FILTERED, at) or text.startswith(FILTERED, at + 1)


def _quoted(value: str) -> str:
    """`[Filtered]` in the quotes `value` had, if any."""
    quote = value[0] if len(value) > 1 and value[0] in "'\"" and value[-1] == value[0] else ""
    return f"{quote}{FILTERED}{quote}"


def _filtered(value: Any, count: _Count) -> Any:
    """A secret key's value: filtered whole, unless there is nothing in it (or it was)."""
    if value is None or isinstance(value, bool) or value in ("", FILTERED, [], {}):
        count.n += value == FILTERED
        return value
    count.n += 1
    return FILTERED


def _whole(match: re.Match[str], count: _Count) -> str:
    count.n += 1
    return FILTERED


def _credential(match: re.Match[str], count: _Count) -> str:
    """The match up to its `value` group, then `[Filtered]` in place of the value."""
    if _is_filtered(match.string, match.start("value")):
        return match[0]
    count.n += 1
    return match[0][: match.start("value") - match.start()] + _quoted(match["value"])


def _basic(match: re.Match[str], count: _Count) -> str:
    """Basic credentials are base64 of `user:password`; other words after "basic" stay."""
    try:
        decoded = base64.b64decode(match["value"] + "==").decode("ascii")
    except (binascii.Error, UnicodeDecodeError, ValueError):
        return match[0]
    if ":" not in decoded or not decoded.isprintable():
        return match[0]
    return _credential(match, count)


def _userinfo(match: re.Match[str], count: _Count) -> str:
    if match["value"] == FILTERED:
        return match[0]
    count.n += 1
    return match["head"] + FILTERED


def _card(match: re.Match[str], count: _Count) -> str:
    if not is_card_number(match[0].replace(" ", "").replace("-", "")):
        return match[0]
    count.n += 1
    return FILTERED


def _operator_match(match: re.Match[str], count: _Count) -> str:
    """An operator's pattern filters its whole match, or only its group named `secret`."""
    if "secret" in match.re.groupindex:
        if match["secret"] is None or match["secret"] == FILTERED:
            return match[0]
        count.n += 1
        start, end = (i - match.start() for i in match.span("secret"))
        return match[0][:start] + FILTERED + match[0][end:]
    if not match[0] or match[0] == FILTERED:
        return match[0]
    count.n += 1
    return FILTERED


# In this order: a header's whole line before the token in it, a token before a key naming it.
_TEXT_RULES: Final = (
    (_HEADER, _credential),
    (_BEARER, _credential),
    (_BASIC, _basic),
    (re.compile("|".join(f"(?:{regex})" for _, regex in KEY_FORMATS)), _whole),
)
