"""Credential shapes from a maintained rule set, read as data: gitleaks' default configuration
(`secret_rules/gitleaks.toml`, MIT licence in `secret_rules/LICENSE.gitleaks`, upstream commit
b58d3f102cf3). Each rule is a regular expression in Go's RE2 syntax with lower-case keywords;
a rule runs only on text holding one of its keywords, and its match is kept as gitleaks keeps
it: the rule's secret group (else its first non-empty group, else the whole match), dense
enough (Shannon entropy above the rule's), and not allowed by the rule's or the global
allowlists (regexes and stop words).

The engine compiles the expressions: `re2` on the server (linear time, the syntax as written);
Python's `re` by default, for agents without it, where `go_to_python` rewrites what `re` reads
differently and a rule `re` refuses is skipped (`TokenRules.skipped` names them).

    rules = TokenRules()
    rules.spans("token ghp_…")  # [(6, 46)]: the characters to filter
"""

from __future__ import annotations

import math
import re
import tomllib
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

RULES_DIR: Final = Path(__file__).with_name("secret_rules")
# gitleaks' file as published, then the shapes it lacks in its format (`supplement.toml`).
RULES_FILES: Final = (RULES_DIR / "gitleaks.toml", RULES_DIR / "supplement.toml")
# gitleaks ends most tokens with a quote, a space, a semicolon or the line's end (as in source
# code); in a report a token also ends at a comma, a dot, a bracket, `&` or `<`.
_CODE_END: Final = r"""(?:[\x60'"\s;]|\\[nr]|$)"""
_REPORT_END: Final = r"""(?:[\x60'"\s;,.)}\]&<>|]|\\[nr]|$)"""
# Rules that look at file paths only (gitleaks' `path` without `regex`) find nothing in text.
Compile = Callable[[str], Any]

_GLOBAL_FLAG = re.compile(r"\(\?i\)")
_UUID = re.compile(r"[0-9a-fA-F]{8}-(?:[0-9a-fA-F]{4}-){3}[0-9a-fA-F]{12}")


def go_to_python(pattern: str) -> str:
    """Return `pattern` (Go RE2 syntax) as Python's `re` reads it: `\\z` is `\\Z`, and a `(?i)`
    after the start (Go: from there on) makes the whole expression case-insensitive (`re`
    takes global flags at the start only), which can only widen what it finds."""
    pattern = pattern.replace(r"\z", r"\Z")
    if _GLOBAL_FLAG.search(pattern, 1):
        pattern = "(?i)" + _GLOBAL_FLAG.sub("", pattern)
    return pattern


def python_compile(pattern: str) -> re.Pattern[str]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # "possible nested set": Go's classes
        return re.compile(go_to_python(pattern))


def entropy(text: str) -> float:
    """Return the Shannon entropy of `text` in bits per character, as gitleaks measures it."""
    if not text:
        return 0.0
    size = len(text)
    counts: dict[str, int] = {}
    for char in text:
        counts[char] = counts.get(char, 0) + 1
    return -sum(n / size * math.log2(n / size) for n in counts.values())


@dataclass(frozen=True, slots=True)
class Allowlist:
    """Matches a rule keeps to itself: its secret (or its whole match, or the line) matching one
    of `regexes`, or its secret holding one of `stopwords`; with `require_all` both must hold."""

    regexes: tuple[Any, ...]
    stopwords: tuple[str, ...]
    target: str  # "secret", "match" or "line"
    require_all: bool

    def allows(self, secret: str, match: str, line: str) -> bool:
        text = {"secret": secret, "match": match, "line": line}[self.target]
        checks = []
        if self.regexes:
            checks.append(any(r.search(text) for r in self.regexes))
        if self.stopwords:
            lowered = secret.lower()
            checks.append(any(word in lowered for word in self.stopwords))
        if not checks:
            return False
        return all(checks) if self.require_all else any(checks)


@dataclass(frozen=True, slots=True)
class TokenRule:
    id: str
    regex: Any
    keywords: tuple[str, ...]
    entropy: float
    secret_group: int
    allowlists: tuple[Allowlist, ...]

    def secret_span(self, match: Any) -> tuple[int, int]:
        """The span gitleaks reports as the secret: the secret group, else the first non-empty
        group, else the whole match."""
        if self.secret_group:
            return match.span(self.secret_group)
        for group in range(1, len(match.groups()) + 1):
            if match.group(group):
                return match.span(group)
        return match.span()


class TokenRules:
    """The rule file compiled once by `compile`; `spans` finds the secrets in a text."""

    def __init__(self, compile: Compile = python_compile, paths: Iterable[Path] = RULES_FILES):
        self.skipped: list[str] = []
        self.rules: list[TokenRule] = []
        allowlists: list[dict[str, Any]] = []
        for path in paths:
            with path.open("rb") as file:
                data = tomllib.load(file)
            allowlists.append(data.get("allowlist") or {})
            for row in data["rules"]:
                rule = self._rule(row, compile)
                if rule is not None:
                    self.rules.append(rule)
        self._global = _allowlists(allowlists, compile)
        # An engine may offer one pass naming the rules that match somewhere (RE2's sets):
        # a text none matches holds no secret, whatever its keywords.
        matcher = getattr(compile, "matcher", None)
        self._matcher = matcher([rule.regex.pattern for rule in self.rules]) if matcher else None
        self._by_keyword: dict[str, list[TokenRule]] = {}
        for rule in self.rules:
            for keyword in rule.keywords:
                self._by_keyword.setdefault(keyword, []).append(rule)
        # A keyword found also stands for the keywords inside it ("sk-ant-api03" holds "sk-"):
        # the scan finds one keyword per place.
        self._inside = {
            word: [
                rule
                for other in self._by_keyword
                if other in word
                for rule in self._by_keyword[other]
            ]
            for word in self._by_keyword
        }
        # Keywords are plain lower-case words: one scan of the text for all of them.
        # Under RE2 one alternation finds them in linear time; Python's `re` tries every
        # alternative at every place, slower than a substring test per keyword.
        ordered = sorted(self._by_keyword, key=len, reverse=True)
        self._keywords = None  # Python's `re`, or an engine with sets
        if compile is not python_compile and not hasattr(compile, "matcher"):
            self._keywords = compile("|".join(map(_literal, ordered)))

        # Without it: the keywords holding no other, then those holding one found.
        roots = [k for k in ordered if not any(o != k and o in k for o in ordered)]
        self._roots = {root: [k for k in ordered if root in k] for root in roots}

    def _rule(self, row: dict[str, Any], compile: Compile) -> TokenRule | None:
        if "regex" not in row or not row.get("keywords"):
            return None  # a file-path rule, or one that would run on every text
        try:
            regex = compile(row["regex"].replace(_CODE_END, _REPORT_END))
        except Exception:
            self.skipped.append(row["id"])
            return None
        return TokenRule(
            id=row["id"],
            regex=regex,
            keywords=tuple(k.lower() for k in row["keywords"]),
            entropy=float(row.get("entropy", 0.0)),
            secret_group=int(row.get("secretGroup", 0)),
            allowlists=_allowlists(row.get("allowlists") or (), compile),
        )

    def candidates(self, text: str) -> list[TokenRule]:
        """The rules whose keywords `text` holds, in the file's order."""
        lowered = text.lower()
        if self._keywords is None:
            words = {
                word
                for root, holding in self._roots.items()
                if root in lowered
                for word in holding
                if word in lowered
            }
        else:
            words = set(self._keywords.findall(lowered))
        found = {id(rule): rule for word in words for rule in self._inside[word]}
        return list(found.values())

    def finds(self, text: str) -> bool:
        """Return whether a rule finds a secret in `text`."""
        return bool(self.spans(text))

    def spans(self, text: str) -> list[tuple[int, int]]:
        """Return the (start, end) of each secret the rules find in `text`, sorted, overlaps
        merged."""
        found: list[tuple[int, int]] = []
        if self._matcher is not None:
            matched = self._matcher(text)
            if not matched:
                return found
            lowered = text.lower()
            rules = [self.rules[i] for i in matched]
            candidates = [r for r in rules if any(k in lowered for k in r.keywords)]
        else:
            candidates = self.candidates(text)
        for rule in candidates:
            for match in rule.regex.finditer(text):
                start, end = rule.secret_span(match)
                if end > start and self._kept(rule, match, text[start:end]):
                    found.append((start, end))
        return _merged(found)

    def _kept(self, rule: TokenRule, match: Any, secret: str) -> bool:
        if rule.entropy:
            if entropy(secret) <= rule.entropy:
                return False
            if rule.id.startswith("generic") and not any(c.isdigit() for c in secret):
                return False
        if rule.id.startswith("generic") and _UUID.fullmatch(secret):
            return False  # an id (`Idempotency-Key: <uuid>`); keys naming secrets still filter it
        whole = match.group(0)
        text = match.string
        line_start = text.rfind("\n", 0, match.start()) + 1
        line_end = text.find("\n", match.end())
        line = text[line_start : None if line_end == -1 else line_end]
        return not any(a.allows(secret, whole, line) for a in (*rule.allowlists, *self._global))


def _literal(word: str) -> str:
    """`word` as a literal in both engines' syntax (`\\xhh` for ASCII punctuation)."""
    return "".join(c if c.isalnum() or ord(c) > 127 else f"\\x{ord(c):02x}" for c in word)


def _allowlists(rows: Iterable[dict[str, Any]], compile: Compile) -> tuple[Allowlist, ...]:
    lists = []
    for row in rows:
        if row.get("paths") and row.get("condition") == "AND":
            continue  # it needs a file path too: never in a report
        regexes = []
        for pattern in row.get("regexes", ()):
            try:
                regexes.append(compile(pattern))
            except Exception:
                continue
        stopwords = tuple(w.lower() for w in row.get("stopwords", ()))
        if regexes or stopwords:
            target = row.get("regexTarget", "secret")
            lists.append(
                Allowlist(tuple(regexes), stopwords, target, row.get("condition") == "AND")
            )
    return tuple(lists)


def _merged(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for start, end in sorted(spans):
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out
