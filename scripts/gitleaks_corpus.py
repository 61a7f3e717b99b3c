"""Collect the secret corpus of the scrubbing tests from gitleaks' own rule tests.

    python scripts/gitleaks_corpus.py GITLEAKS_CHECKOUT > tests/classifier/gitleaks_examples.json

Each rule's Go file (cmd/generate/config/rules/*.go) lists true positives (`tps`): literal
strings, and secrets built by `secrets.NewSecret(<regex>)` wrapped by `GenerateSampleSecrets`.
Literals are taken as written; a generated secret is drawn (seeded, so the file is stable) from
its character class and wrapped in three of gitleaks' own sample forms. An example is kept when
the vendored rule (classifier/secret_rules/gitleaks.toml, compiled by RE2) finds a secret in
it; that secret, as gitleaks reports it, is what the tests check is gone.
"""

from __future__ import annotations

import json
import random
import re
import sys
from pathlib import Path

import re2

from classifier.token_rules import RULES_FILES, TokenRules

RULES_DIR = "cmd/generate/config/rules"
# gitleaks' utils/patterns.go
CLASSES = {
    "Numeric": "0123456789",
    "Hex": "0123456789abcdef",
    "AlphaNumeric": "abcdefghijklmnopqrstuvwxyz0123456789",
    "AlphaNumericExtendedShort": "abcdefghijklmnopqrstuvwxyz0123456789_-",
    "AlphaNumericExtended": "abcdefghijklmnopqrstuvwxyz0123456789=_-",
}
# Three of gitleaks' GenerateSampleSecrets forms (utils/generate.go).
FORMS = ('{i}Token="{s}"', "{i}_token: {s}", '{{"config.ini": "{I}_TOKEN={s}\\nBACKUP=true"}}')
STRING = re.compile(r'`[^`]*`|"(?:[^"\\\n]|\\.)*"')
RULE_ID = re.compile(r'RuleID:\s*"([^"]+)"')
SAMPLES = re.compile(
    r"GenerateSampleSecrets?\(\s*(\"[^\"]*\")\s*,\s*(.+?)\)(?:\.\.\.)?\)?\s*$", re.M
)
NEW_SECRET = re.compile(r"secrets\.NewSecret\((.+?\)?)\)")
UTIL = re.compile(r'utils\.(\w+)\("(\d+)"\)')
CLASS = re.compile(r"\[([^\]]+)\]\{(\d+)\}")


def go_string(literal: str) -> str:
    return literal[1:-1] if literal.startswith("`") else json.loads(literal)


def draw(expression: str, rng: random.Random) -> str | None:
    """A value for a Go expression of string literals, `+`, `secrets.NewSecret(…)`."""
    out = []
    # The line's own closing brackets were read loosely: balance them.
    expression = expression + ")" * (expression.count("(") - expression.count(")"))
    while expression.count(")") > expression.count("(") and expression.endswith(")"):
        expression = expression[:-1]
    for part in _split_plus(expression):
        part = part.strip()
        secret = NEW_SECRET.fullmatch(part)
        if STRING.fullmatch(part):
            out.append(go_string(part))
        elif secret:
            value = _from_class(secret[1], rng)
            if value is None:
                return None
            out.append(value)
        else:
            return None
    return "".join(out)


def _split_plus(expression: str) -> list[str]:
    parts, depth, start, quote = [], 0, 0, ""
    for i, char in enumerate(expression):
        if quote:
            quote = "" if char == quote and expression[i - 1] != "\\" else quote
        elif char in '`"':
            quote = char
        elif char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        elif char == "+" and depth == 0:
            parts.append(expression[start:i])
            start = i + 1
    return [*parts, expression[start:]]


def _from_class(argument: str, rng: random.Random) -> str | None:
    util = UTIL.fullmatch(argument.strip())
    if util and util[1] in CLASSES:
        return "".join(rng.choice(CLASSES[util[1]]) for _ in range(int(util[2])))
    literal = STRING.fullmatch(argument.strip())
    if literal:
        klass = CLASS.fullmatch(go_string(literal[0]))
        if klass:
            chars = _expand(klass[1])
            return "".join(rng.choice(chars) for _ in range(int(klass[2])))
    return None


def _expand(klass: str) -> str:
    chars, i = [], 0
    while i < len(klass):
        if i + 2 < len(klass) and klass[i + 1] == "-":
            chars += [chr(c) for c in range(ord(klass[i]), ord(klass[i + 2]) + 1)]
            i += 3
        else:
            chars.append(klass[i])
            i += 1
    return "".join(chars)


def tps_literals(body: str) -> list[str]:
    """The plain literals listed in `tps := []string{…}` blocks (not parts of an expression)."""
    found = []
    for block in re.finditer(r"tps\s*:?=\s*\[\]string\{(.*?)\n\t\}", body, re.S):
        for line in _items(block[1]):
            if STRING.fullmatch(line):
                found.append(go_string(line))
    return found


def _items(block: str) -> list[str]:
    items, current, depth, quote = [], [], 0, ""
    for i, char in enumerate(block):
        if quote:
            quote = "" if char == quote and (quote == "`" or block[i - 1] != "\\") else quote
        elif char in '`"':
            quote = char
        elif char in "({":
            depth += 1
        elif char in ")}":
            depth -= 1
        elif char == "/" and block[i : i + 2] == "//" and depth == 0:
            current.append("\0")  # a comment starts: the rest of the line is dropped
        elif char == "," and depth == 0:
            items.append("".join(current).split("\0")[0].strip())
            current = []
            continue
        if "\0" in current and char == "\n":
            current = ["".join(current).split("\0")[0]]
            continue
        if "\0" not in current:
            current.append(char)
    items.append("".join(current).split("\0")[0].strip())
    return [item for item in items if item]


def examples(checkout: Path) -> list[dict[str, str]]:
    options = re2.Options()
    options.log_errors = False
    rules = {
        rule.id: rule
        for rule in TokenRules(lambda p: re2.compile(p, options), RULES_FILES[:1]).rules
    }
    checker = TokenRules(lambda p: re2.compile(p, options), RULES_FILES[:1])
    rng = random.Random(20261207)
    out = []
    for path in sorted((checkout / RULES_DIR).glob("*.go")):
        source = path.read_text()
        for function in re.split(r"\nfunc ", source)[1:]:
            ids = RULE_ID.findall(function)
            if len(ids) != 1 or ids[0] not in rules:
                continue
            texts = tps_literals(function)
            for identifier, expression in SAMPLES.findall(function):
                secret = draw(expression, rng)
                if secret is not None:
                    name = go_string(identifier)
                    texts += [f.format(i=name, I=name.upper(), s=secret) for f in FORMS]
            for text in texts:
                secret = _secret(rules[ids[0]], checker, text)
                if secret:
                    where = f"gitleaks {RULES_DIR}/{path.name}"
                    out.append({"rule": ids[0], "from": where, "text": text, "secret": secret})
    return out


def _secret(rule, checker: TokenRules, text: str) -> str | None:
    for match in rule.regex.finditer(text):
        start, end = rule.secret_span(match)
        if end > start and checker._kept(rule, match, text[start:end]):
            return text[start:end]
    return None


if __name__ == "__main__":
    found = examples(Path(sys.argv[1]))
    json.dump(found, sys.stdout, indent=1, ensure_ascii=False)
    print(f"{len(found)} examples of {len({e['rule'] for e in found})} rules", file=sys.stderr)
