"""Secrets filtered out of what an agent reports, before it is sent or stored: values under keys
that name secrets, credentials in text (HTTP headers, bearer and basic credentials, URL query
parameters and user info, command-line flags, XML elements), the credential shapes of a
maintained rule set (`classifier.token_rules`: gitleaks' rules, read as data) and card numbers,
each replaced by `[Filtered]` with its key kept. Text is also read through the layers secrets
hide under: JSON inside a string (escaped or not), URL encoding and base64. Identity fields
(source, topic, model …) are scrubbed too, and URLs in them lose their user info and query
values. Pure and never raises; the rules are plain data (`ScrubRules`), compiled once per
`Scrubber` by the engine it is given (Python's `re` by default, RE2 on the server).

    scrubber = Scrubber()
    scrubber.scrub({"api_key": "old-key", "q": "film"})  # ({"api_key": "[Filtered]", ...}, 1)
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
import string
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import quote, unquote_plus

from classifier.envelope import HELD_KEYS
from classifier.token_rules import Compile, TokenRules, python_compile

FILTERED: Final = "[Filtered]"
# The envelope's fields that carry what an agent's call held (`chain`: the exception chain), and
# the run's operation, which names it.
ENVELOPE_FIELDS: Final = (*HELD_KEYS, "operation")
# The report's fields that name it (shown in lists, labels and filters): scrubbed as text, and a
# URL in them loses its user info and query values (`Scrubber.identity`).
IDENTITY_FIELDS: Final = (
    "agent",
    "source",
    "topic",
    "capability",
    "exception_type",
    "provider_code",
)
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
# ...or is one of these whole (as query parameters: a card's `cvc=`)...
SECRET_KEY_NAMES: Final = frozenset({"pass", "pw", "pin", "cvv", "cvc", "ssn"})
# ...or, as written, ends with one of these after a separator (environment-style: `DB_PASS`,
# `GITHUB_PAT`, `db.pwd`; "bypass" and "compass" do not).
_SECRET_SUFFIX = re.compile(r"(?i)[_\-.](?:pass|pat|pwd)$")
# A key named like one of these, whole or after a separator (`key`, `OPENAI_KEY`, `tokens`,
# `max_tokens`), is WEAK: it names secrets and other things alike, so its value is filtered only
# when it looks like a credential (`looks_secret`): `key=42` and `max_tokens: 1000` stay.
_WEAK_NAME = re.compile(r"(?i)(?:^|[_\-.])(?:keys?|tokens|pat)$")
_UUID = re.compile(r"[0-9a-fA-F]{8}-(?:[0-9a-fA-F]{4}-){3}[0-9a-fA-F]{12}")
# A weak key's value is a credential when it is one word of this many characters or more that
# mixes letters with digits and is not a UUID.
WEAK_VALUE_MIN: Final = 12

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
_KEY_BEFORE = re.compile(r"[ \t]*(?:\"\\|[\"'])?([\w.\-]{1,64})")  # `\"key\"` reversed too
_AFTER_SEPARATOR = re.compile(r">?[ \t]*(?:\r?\n[ \t]*)?")
_VALUE = re.compile(
    r"\\\"(?:[^\"\\\n]|\\[^\"])*\\\"|\"(?:[^\"\\\n]|\\.)*\"|'(?:[^'\\\n]|\\.)*'"
    r"|[^\s\"'&;,?#)}\]<>]+" + _WRAPPED
)
# A key's value that is a list of quoted strings, and each string in it.
_LIST_VALUE = re.compile(
    r'\[[ \t]*"(?:[^"\\\n]|\\.)*"(?:[ \t]*,[ \t]*"(?:[^"\\\n]|\\.)*")*[ \t]*\]'
)
_LISTED = re.compile(r'"((?:[^"\\\n]|\\.)*)"')
_USERINFO = re.compile(r"(?P<head>\b[a-z][a-z0-9+.\-]*://[^\s:/@]*:)(?P<value>[^\s/@]+)(?=@)", re.I)
# Bounded by what no card number is glued to: a run of digits inside a hex id, a git SHA or a
# trace id is not a card, however its digits happen to check.
_CARD = re.compile(r"(?<![\w.])(?:\d[ \-]?){12,18}\d(?!\w)")
# Decoding layers: a quoted JSON string holding escapes (`"{\\"password\\": …}"`), a word holding
# URL escapes, a base64 run, an XML element, a command-line flag with its value.
_ESCAPED_STRING = re.compile(r'"((?:[^"\\\n]|\\.)*\\(?:[^"\\\n]|\\.)*)"')
_PERCENT = re.compile(r"%[0-9A-Fa-f]{2}")
_URL_ENCODED = re.compile(r"[^\s\"'<>]*%[0-9A-Fa-f]{2}[^\s\"'<>]*")
_BASE64 = re.compile(r"(?<![\w+/=\-])[A-Za-z0-9+/_\-]{16,}={0,2}(?![\w+/=\-])")
# `_BASE64`'s class marked by one character, and runs of it long enough to be a blob: a long
# literal the regex engine searches for quickly (see `_base64_runs`).
_B64_MARKS = str.maketrans(dict.fromkeys(string.ascii_letters + string.digits + "+/_-", "\x01"))
_B64_RUN = re.compile("\x01" * 16 + "\x01*")
_XML = re.compile(
    r"<(?P<name>[A-Za-z_][\w:.\-]{0,63})(?:\s[^<>]*)?>(?P<value>[^<]+)</(?P=name)\s*>"
)
# The first "-" before the look behind it (a flag starts a text or follows a space): a literal
# first character lets the regex engine skip to each "-" instead of trying every position.
_FLAG = re.compile(
    r"-(?<!\S-)-?(?P<name>[A-Za-z][\w\-]{0,63})(?P<sep>=|[ \t]+)"
    r"(?P<value>\"[^\"\n]*\"|'[^'\n]*'|[^\s\"'-][^\s\"']*)"
)
_USER_FLAGS: Final = frozenset({"u", "user"})  # curl's `-u user:password`
# How deep the decoding layers go (a base64 blob of JSON holding an escaped string …).
MAX_LAYERS: Final = 4
# Where a URL stands in an identity field: its user info goes and its query values are filtered.
_URL = re.compile(
    r"(?P<scheme>\b[a-z][a-z0-9+.\-]*://)(?:[^\s/?#@]*@)?(?P<rest>[^\s?#]*)(?P<query>\?[^\s#]*)?",
    re.I,
)
_QUERY_VALUE = re.compile(r"(?P<name>[?&;][^=&;#\s]*=)(?P<value>[^&;#\s]*)")
_DIGIT_CLASSES: Final = bytes.maketrans(b"0123456789", b"0000000000")
CARD_MIN: Final = 13
# Card networks' leading digits (Visa 4, Mastercard 2 and 5, Amex and Diners 3, Discover 6).
CARD_LEADING_DIGITS: Final = "23456"

PLAIN, SECRET, SAFE, WEAK = 0, 1, 2, 3


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


def pattern_error(pattern: str, compile: Compile = re.compile) -> str | None:
    """Return why `pattern` cannot be a scrub pattern under the engine `compile` (None if it
    can)."""
    if len(pattern) > MAX_PATTERN:
        return f"longer than {MAX_PATTERN} characters"
    try:
        compiled = compile(pattern)
    except Exception as exc:
        reason = exc.args[0] if exc.args else exc
        if isinstance(reason, bytes):
            reason = reason.decode("utf-8", "replace")
        return f"not a regular expression this engine accepts: {reason}"
    if compiled.search("") is not None:
        return "matches empty text: it would filter everything"
    return None


# An operator's pattern longer than this is refused (the engine bounds its memory as well).
MAX_PATTERN: Final = 2000
_TOKEN_RULES: dict[Compile, TokenRules] = {}


def token_rules(compile: Compile = python_compile) -> TokenRules:
    """The rule set compiled by `compile`, once per process."""
    found = _TOKEN_RULES.get(compile)
    if found is None:
        found = _TOKEN_RULES[compile] = TokenRules(compile)
    return found


def looks_secret(value: str) -> bool:
    """Return whether `value`, under a WEAK key name, reads as a credential: one word of at least
    WEAK_VALUE_MIN characters with letters and digits, not a UUID (`key=42` does not)."""
    value = value.strip("\"' \\")
    return (
        len(value) >= WEAK_VALUE_MIN
        and value != FILTERED
        and not any(char.isspace() for char in value)
        and any(char.isdigit() for char in value)
        and any(char.isalpha() for char in value)
        and _UUID.fullmatch(value) is None
    )


class _Count:
    __slots__ = ("n",)

    def __init__(self) -> None:
        self.n = 0


class Scrubber:
    """The built-in rules and `rules`, compiled by `compile` (Python's `re` unless given RE2's);
    `scrub` filters data, `text` text, `identity` a field naming the report, `report` a whole
    report."""

    def __init__(self, rules: ScrubRules | None = None, compile: Compile | None = None) -> None:
        self.rules = rules or ScrubRules()
        compile = compile or python_compile
        self._tokens = token_rules(compile)
        self._endings = SECRET_KEY_ENDINGS + tuple(fold(k) for k in self.rules.keys if fold(k))
        self._safe = frozenset(fold(k) for k in self.rules.safe_fields)
        self._patterns = [
            compile(p) for p in self.rules.patterns if pattern_error(p, compile) is None
        ]
        self._verdicts: dict[str, int] = {}
        self._plain_keys: set[str] = set()  # the keys of `_verdicts` judged PLAIN

    def scrub(self, value: Any) -> tuple[Any, int]:
        """Return `value` with its secrets filtered (the same object when it held none; never
        changed in place) and how many values are filtered in it: by this call, or before it
        (the `[Filtered]` a client's filters left)."""
        texts: list[str] = []
        if not self._structure_holds(value, 0, texts):
            joined = "\n".join(texts)  # a token ends at a line's end, as at a string's
            if not self.may_hold(joined):
                return value, joined.count(FILTERED)  # the common case: one look at its text
        count = _Count()
        return self._value(value, 0, count), count.n

    def holds_nothing(self, value: Any) -> bool:
        """Whether `scrub(value)` would return `value` itself with nothing counted, after one
        look (False may be wrong, True never is): a batch's reports looked at together."""
        texts: list[str] = []
        if self._structure_holds(value, 0, texts):
            return False
        joined = "\n".join(texts)
        return FILTERED not in joined and not self.may_hold(joined)

    def text(self, text: str) -> tuple[str, int]:
        """Return text with the credentials it holds filtered, and how many are filtered in it
        (as `scrub` counts them)."""
        count = _Count()
        return self._text(text, count), count.n

    def split(self, values: list[Any], names: list[str]) -> tuple[list[Any], list[str], int]:
        """Return `values` (data, as `scrub`) and `names` (identity fields, as `identity`) with
        their secrets filtered, after one look at them all, and how many values are filtered in
        them; each list is the same object when it held nothing."""
        combined = [*values, *names]
        clean, found = self.scrub(combined)
        if clean is combined and not any("://" in name for name in names):
            return values, names, found
        held = len(values)
        found -= sum(v.count(FILTERED) for v in clean[held:] if isinstance(v, str))
        out = [self.identity(name) for name in names]
        found += sum(name.count(FILTERED) for name in out)
        kept_values = values if clean is combined else list(clean[:held])
        kept_names = names if all(a is b for a, b in zip(out, names, strict=True)) else out
        return kept_values, kept_names, found

    def identity(self, text: str) -> str:
        """Return a field naming a report (`IDENTITY_FIELDS`) with its credentials filtered and
        each URL in it without user info and with its query values filtered."""
        if not text:
            return text
        text = self._text(text, _Count())
        return _URL.sub(_bare_url, text) if "://" in text else text

    def idempotency_key(self, key: str) -> str:
        """Return `key` as it is, or, when it holds a credential, a digest of it (replays still
        find their first report; the credential is not kept)."""
        if not key or self.identity(key) == key:
            return key
        return "sha256:" + hashlib.sha256(key.encode()).hexdigest()

    def report(self, body: Mapping[str, Any]) -> tuple[dict[str, Any], int]:
        """Return a report's JSON body with every string in it scrubbed (its identity fields, the
        usage's model and the idempotency key as `identity` and `idempotency_key` do), and how
        many values are filtered in it."""
        body = dict(body)
        key = body.pop("idempotency_key", None)
        usage = body.get("usage")
        model = usage.get("model") if isinstance(usage, Mapping) else None
        named = [n for n in IDENTITY_FIELDS if isinstance(body.get(n), str) and body[n]]
        names = [body[n] for n in named] + ([model] if isinstance(model, str) and model else [])
        values = [v for n, v in body.items() if n not in named]
        clean_values, clean_names, found = self.split(values, names)
        out = dict(zip([n for n in body if n not in named], clean_values, strict=True))
        out |= dict(zip(named, clean_names, strict=False))
        if len(clean_names) > len(named):
            out["usage"] = {**out["usage"], "model": clean_names[-1]}
        if isinstance(key, str):
            out["idempotency_key"] = self.idempotency_key(key)
        return out, found

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
            or '\\"' in text
            or ("%" in text and _PERCENT.search(text) is not None)
            or ("</" in text and any(self._xml(m) != m[0] for m in _XML.finditer(text)))
            or ("-" in text and any(self._flag(m) != m[0] for m in _FLAG.finditer(text)))
            or any(_b64_text(m[0]) is not None for m in _base64_runs(text))
            or (separated and self._names_a_secret_before_a_separator(text))
            or _may_hold_card(text)
            or self._tokens.finds(text)
        )

    def key_verdict(self, key: str) -> int:
        """Return SECRET if `key` names a secret, WEAK if its value is a secret when it looks like
        one (`looks_secret`), SAFE if its value is left as it is, else PLAIN."""
        verdict = self._verdicts.get(key)
        if verdict is None:
            verdict = self._judge(key)
            if len(self._verdicts) >= KEY_CACHE_SIZE:
                self._verdicts.clear()
                self._plain_keys.clear()
            self._verdicts[key] = verdict
            if verdict == PLAIN:
                self._plain_keys.add(key)
        return verdict

    def _judge(self, key: str) -> int:
        folded = fold(key)
        if folded in self._safe:
            return SAFE
        if (
            folded in SECRET_KEY_NAMES
            or folded.endswith(self._endings)
            or any(part in folded for part in SECRET_KEY_PARTS)
            or _SECRET_SUFFIX.search(key) is not None
        ):
            return SECRET
        if _WEAK_NAME.search(key.strip()) is not None:
            return WEAK
        return PLAIN

    def _field_verdict(self, data: dict, key: Any) -> int:
        if not isinstance(key, str) or (key == "key" and "value" in data):
            return PLAIN  # the name in {"key": "x-api-key", "value": …}, not a key itself
        return self.key_verdict(key)

    def _pair_verdict(self, name: Any) -> int:
        """The verdict on `name`, the first of a pair (["Authorization", "Bearer …"]), if it is a
        key name, not text that mentions one (else PLAIN)."""
        if isinstance(name, str) and _KEY_NAME.fullmatch(name) is not None:
            return self.key_verdict(name)
        return PLAIN

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
                if depth >= MAX_DEPTH or (
                    "value" in value and self._pair_verdict(_name_of(value)) in (SECRET, WEAK)
                ):
                    return True
                if self._plain_keys.issuperset(value):
                    items = value.values()
                elif self._keys_hold(value):
                    return True
                else:
                    items = [v for k, v in value.items() if self._field_verdict(value, k) != SAFE]
            elif isinstance(value, list | tuple):
                if depth >= MAX_DEPTH or (
                    len(value) == 2 and self._pair_verdict(value[0]) in (SECRET, WEAK)
                ):
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
        for key, item in data.items():
            verdict = self._field_verdict(data, key)
            if verdict == SECRET and _filtered(item, _Count()) is not item:
                return True
            if verdict == WEAK and self._weak(item, 0, _Count()) is not item:
                return True
        return False

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

    def _weak(self, value: Any, depth: int, count: _Count) -> Any:
        """A WEAK key's value: each string in it filtered if it looks like a credential."""
        if isinstance(value, str):
            if looks_secret(value):
                count.n += 1
                return FILTERED
            return self._text(value, count)
        if isinstance(value, list | tuple) and depth < MAX_DEPTH:
            new = [self._weak(item, depth + 1, count) for item in value]
            return value if all(a is b for a, b in zip(new, value, strict=True)) else new
        return self._value(value, depth, count)

    def _mapping(self, data: dict, depth: int, count: _Count) -> Any:
        if depth >= MAX_DEPTH:
            count.n += 1
            return FILTERED
        out = None
        # {"name": "Authorization", "value": "…"}: a header or an attribute as two fields.
        pair = self._pair_verdict(_name_of(data)) if "value" in data else PLAIN
        for key, item in data.items():
            verdict = self._field_verdict(data, key)
            if key == "value" and pair in (SECRET, WEAK):
                verdict = pair
            if verdict == SAFE:
                continue
            if verdict == SECRET:
                new = _filtered(item, count)
            elif verdict == WEAK:
                new = self._weak(item, depth + 1, count)
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
        if len(items) == 2:  # ["Authorization", "Bearer …"]
            verdict = self._pair_verdict(items[0])
            if verdict in (SECRET, WEAK):
                value = (
                    _filtered(items[1], count)
                    if verdict == SECRET
                    else self._weak(items[1], depth + 1, count)
                )
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

    def _text(self, text: str, count: _Count, layer: int = 0) -> str:
        if not self.may_hold(text):
            count.n += text.count(FILTERED)
            return text
        original = text
        scratch = _Count()  # what is filtered is counted once, in the result
        if layer < MAX_LAYERS:
            text = self._decoded(text, scratch, layer + 1)
        for pattern, replace in _TEXT_RULES:
            text = pattern.sub(lambda m, r=replace: r(m, scratch), text)
        text = self._token_shapes(text)
        text = self._assignments(text, scratch)
        text = _FLAG.sub(self._flag, text) if " -" in text or text.startswith("-") else text
        text = _XML.sub(self._xml, text) if "</" in text else text
        text = _USERINFO.sub(lambda m: _userinfo(m, scratch), text)
        text = _CARD.sub(lambda m: _card(m, scratch), text)
        for pattern in self._patterns:
            text = pattern.sub(lambda m, p=pattern: _operator_match(m, p, scratch), text)
        count.n += text.count(FILTERED)
        return original if text == original else text  # the same object when nothing was found

    def _decoded(self, text: str, count: _Count, layer: int) -> str:
        """`text` with the secrets filtered that hide under a layer: a JSON document, escaped
        JSON strings, URL encoding, base64."""
        stripped = text.strip()
        if stripped[:1] in "[{" and stripped[-1:] in "]}":
            try:
                data = json.loads(stripped)
            except ValueError:
                data = None
            if isinstance(data, dict | list):
                clean = self._value(data, 0, count)
                return text if clean is data else json.dumps(clean, ensure_ascii=False)
        if "\\" in text:
            text = _ESCAPED_STRING.sub(lambda m: self._escaped(m, layer), text)
            if '\\"' in text and not text.startswith('"'):
                text = self._escaped_whole(text, layer)
        if "%" in text:
            text = _URL_ENCODED.sub(lambda m: self._url_encoded(m, layer), text)
        text = _BASE64.sub(lambda m: self._base64(m, layer), text)
        return text

    def _escaped(self, match: re.Match[str], layer: int) -> str:
        """A JSON string literal holding escapes: read, scrubbed, written back escaped."""
        try:
            inner = json.loads(match[0])
        except ValueError:
            return match[0]
        clean = self._text(inner, _Count(), layer)
        return match[0] if clean is inner else json.dumps(clean, ensure_ascii=False)

    def _escaped_whole(self, text: str, layer: int) -> str:
        """Text that is itself the inside of a JSON string (`{\\"password\\": \\"…\\"}`)."""
        try:
            inner = json.loads(f'"{text}"')
        except ValueError:
            return text
        clean = self._text(inner, _Count(), layer)
        return text if clean is inner else json.dumps(clean, ensure_ascii=False)[1:-1]

    def _url_encoded(self, match: re.Match[str], layer: int) -> str:
        decoded = unquote_plus(match[0])
        if decoded == match[0]:
            return match[0]
        clean = self._text(decoded, _Count(), layer)
        return match[0] if clean is decoded else quote(clean, safe="/:?&=;,@[]+")

    def _base64(self, match: re.Match[str], layer: int) -> str:
        """A base64 run that decodes to text holding a credential: filtered whole."""
        decoded = _b64_text(match[0])
        if decoded is None or self._text(decoded, _Count(), layer) is decoded:
            return match[0]
        return FILTERED

    def _token_shapes(self, text: str) -> str:
        spans = self._tokens.spans(text)
        if not spans:
            return text
        parts, done = [], 0
        for start, end in spans:
            if text.startswith(FILTERED, start):
                continue
            parts += [text[done:start], FILTERED]
            done = end
        return "".join([*parts, text[done:]])

    def _flag(self, match: re.Match[str]) -> str:
        """`--password X`, `--token=X`, `-u user:password`: the value of a flag naming a secret."""
        name, value = match["name"], match["value"]
        if value.strip("\"'").startswith(FILTERED):
            return match[0]
        head = match[0][: match.start("value") - match.start()]
        if name in _USER_FLAGS and ":" in value:
            user = value.split(":", 1)[0]
            quote_char = value[0] if value[0] in "\"'" else ""
            return f"{head}{user}:{FILTERED}{quote_char}"
        verdict = self.key_verdict(name)
        if verdict == SECRET or (verdict == WEAK and looks_secret(value)):
            return head + _quoted(value)
        return match[0]

    def _xml(self, match: re.Match[str]) -> str:
        """`<password>…</password>`: an element named like a secret."""
        verdict = self.key_verdict(match["name"].rsplit(":", 1)[-1])
        value = match["value"]
        if value.strip() == FILTERED:
            return match[0]
        if verdict == SECRET or (verdict == WEAK and looks_secret(value)):
            start, end = (i - match.start() for i in match.span("value"))
            return match[0][:start] + FILTERED + match[0][end:]
        return match[0]

    def _secret_keys(self, text: str) -> Iterable[tuple[int, int, int]]:
        """Yield (key start, separator end, verdict) of each `key: value` or `key=value` whose key
        names a secret (SECRET or WEAK): from each separator the key is read backwards (spaces,
        a quote, its characters)."""
        for separator in _SEPARATOR.finditer(text):
            at = separator.start()
            if text.startswith("//", at + 1):
                continue  # a URL's scheme
            key = _KEY_BEFORE.match(text[max(0, at - 70) : at][::-1])
            if key is not None:
                verdict = self.key_verdict(key[1][::-1])
                if verdict in (SECRET, WEAK):
                    yield at - key.end(), _AFTER_SEPARATOR.match(text, at + 1).end(), verdict

    def _names_a_secret_before_a_separator(self, text: str) -> bool:
        for separator in ":=":
            at = text.find(separator)
            while at != -1:
                if not text.startswith("//", at + 1):  # not a URL's scheme
                    key = _KEY_BEFORE.match(text[max(0, at - 70) : at][::-1])
                    if key is not None and self.key_verdict(key[1][::-1]) in (SECRET, WEAK):
                        return True
                at = text.find(separator, at + 1)
        return False

    def _assignments(self, text: str, count: _Count) -> str:
        parts: list[str] = []
        done = 0
        for key_start, start, verdict in self._secret_keys(text):
            listed = _LIST_VALUE.match(text, start)
            value = listed or _VALUE.match(text, start)
            if key_start < done or value is None or _is_filtered(text, start):
                continue
            if listed:  # `"tokens": ["…", "…"]`: each string judged as the key's value
                clean = _LISTED.sub(lambda m, v=verdict: _listed(m, v), listed[0])
                parts += [text[done:start], clean]
            elif verdict == WEAK and not looks_secret(value[0]):
                continue
            else:
                parts += [text[done:start], _quoted(value[0])]
            done = value.end()
            count.n += 1
        return "".join([*parts, text[done:]]) if parts else text


def _name_of(data: dict) -> Any:
    return data.get("name", data.get("key"))


def _card_int(value: Any) -> bool:
    return type(value) is int and 10**12 <= abs(value) < 10**19 and is_card_number(str(abs(value)))


def _base64_runs(text: str) -> Iterator[re.Match[str]]:
    """`_BASE64.finditer(text)`, found faster in a long text: each match lies inside a run of 16
    or more of its characters, so the regex looks only where the marked text has one."""
    for run in _B64_RUN.finditer(text.translate(_B64_MARKS)):
        # Up to two "=" and the character the match's look-ahead reads follow the run (a run may
        # hold more than one match where the text has a "\x01" of its own).
        start, end = run.start(), run.end() + 3
        while (match := _BASE64.search(text, start, end)) is not None:
            yield match
            start = match.end()


def _b64_text(blob: str) -> str | None:
    """The text a base64 run decodes to, if it is printable UTF-8 (None otherwise)."""
    padded = blob + "=" * (-len(blob) % 4)
    try:
        raw = base64.urlsafe_b64decode(padded.replace("+", "-").replace("/", "_"))
        decoded = raw.decode("utf-8")
    except (binascii.Error, UnicodeDecodeError, ValueError):
        return None
    return decoded if len(decoded) >= MIN_TEXT and decoded.isprintable() else None


def _listed(match: re.Match[str], verdict: int) -> str:
    if match[1] and match[1] != FILTERED and (verdict == SECRET or looks_secret(match[1])):
        return f'"{FILTERED}"'
    return match[0]


def _bare_url(match: re.Match[str]) -> str:
    """A URL without its user info (`_URL` leaves it out) and with its query values filtered."""
    query = match["query"] or ""
    if "=" in query:
        query = _QUERY_VALUE.sub(_query_value, query)
    return match["scheme"] + match["rest"] + query


def _query_value(match: re.Match[str]) -> str:
    if not match["value"] or match["value"] == FILTERED:
        return match[0]
    return match["name"] + FILTERED


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


def _operator_match(match: Any, pattern: Any, count: _Count) -> str:
    """An operator's pattern filters its whole match, or only its group named `secret`."""
    group = pattern.groupindex.get("secret")
    if group is not None:
        if match.group(group) is None or match.group(group) == FILTERED:
            return match.group(0)
        count.n += 1
        start, end = (i - match.start() for i in match.span(group))
        return match.group(0)[:start] + FILTERED + match.group(0)[end:]
    if not match.group(0) or match.group(0) == FILTERED:
        return match.group(0)
    count.n += 1
    return FILTERED


# In this order: a header's whole line before the token in it, a bearer or basic credential.
_TEXT_RULES: Final = (
    (_HEADER, _credential),
    (_BEARER, _credential),
    (_BASIC, _basic),
)
