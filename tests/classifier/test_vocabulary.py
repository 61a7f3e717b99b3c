"""One vocabulary: the eight names, the alias table that maps other vocabularies onto them, and the
one parser that reads both (and refuses everything else)."""

from __future__ import annotations

from pathlib import Path

import pytest

from classifier import FailureCategory
from classifier.taxonomy import ALIASES, UnknownFailureType, normalise_name, parse_failure_type

# The aliases the product promises, written out by hand (not read from the table under test).
PROMISED = {
    "auth_error": "auth_failure",
    "authentication": "auth_failure",
    "unauthorized": "auth_failure",
    "permission": "auth_failure",
    "forbidden": "auth_failure",
    "rate_limit": "rate_limited",
    "throttled": "rate_limited",
    "too_many_requests": "rate_limited",
    "not_found": "resource_missing",
    "missing": "resource_missing",
    "permanent": "resource_missing",
    "validation": "invalid_input",
    "bad_request": "invalid_input",
    "schema": "invalid_input",
    "network": "transient",
    "connection": "transient",
    "deadline_exceeded": "timeout",
    "server_error": "server_fault",
    "unavailable": "server_fault",
    "overloaded": "server_fault",
    "unknown": "unclassified",
}
CANONICAL = [
    "transient",
    "rate_limited",
    "auth_failure",
    "resource_missing",
    "invalid_input",
    "timeout",
    "server_fault",
    "unclassified",
]


@pytest.mark.parametrize(("alias", "canonical"), PROMISED.items())
def test_every_promised_alias_reads_as_its_category(alias, canonical):
    assert parse_failure_type(alias) == canonical


@pytest.mark.parametrize("name", CANONICAL)
def test_the_eight_names_read_as_themselves(name):
    assert parse_failure_type(name) == name
    assert parse_failure_type(FailureCategory(name)) is FailureCategory(name)


def test_the_taxonomy_has_exactly_the_eight_names():
    assert [c.value for c in FailureCategory] == CANONICAL


def test_no_alias_shadows_a_canonical_name_and_every_alias_is_in_our_spelling():
    assert not set(ALIASES) & set(CANONICAL)
    for alias in ALIASES:
        assert normalise_name(alias) == alias


@pytest.mark.parametrize(
    ("written", "canonical"),
    [
        ("AUTH_ERROR", "auth_failure"),
        ("authError", "auth_failure"),
        ("Auth-Error", "auth_failure"),
        (" rate limit ", "rate_limited"),
        ("TooManyRequests", "rate_limited"),
        ("RateLimited", "rate_limited"),
        ("Timeout", "timeout"),
        ("deadline-exceeded", "timeout"),
    ],
)
def test_case_and_separators_do_not_matter(written, canonical):
    assert parse_failure_type(written) == canonical


@pytest.mark.parametrize(
    "value",
    ["cosmic_rays", "", "auth error!", "fail", "error", 3, None, True, ["timeout"], "x" * 80],
)
def test_anything_else_is_refused_naming_the_valid_values(value):
    with pytest.raises(UnknownFailureType) as refused:
        parse_failure_type(value)
    message = str(refused.value)
    assert "is not a failure type" in message
    for name in CANONICAL:
        assert name in message
    assert isinstance(refused.value, ValueError)


def test_the_api_docs_list_the_alias_table_as_it_is():
    """docs/api.md's table is the documentation agents read: it must not drift from the code."""
    readme = (Path(__file__).resolve().parents[2] / "docs" / "api.md").read_text()
    section = readme.split("### Failure types and their aliases", 1)[1].split("\n\n", 3)[2]
    listed = {}
    for line in section.splitlines()[2:]:
        category, aliases = (cell.strip() for cell in line.strip("|").split("|"))
        for alias in aliases.split(","):
            listed[alias.strip().strip("`")] = category.strip("`")
    assert listed == {alias: category.value for alias, category in ALIASES.items()}
