"""The fast paths of `classify` agree with the general path they shortcut.

`reference_classify` below is the general path written out plainly: read every exception of the
chain with the general attribute reader, judge every node, keep the strongest verdict. The fast
paths (the inlined lone case, the single-exception case, the `response`-only status error answered
whole by `_response_failure`, the inlined chain walk, skipping nodes that cannot win) must give the
same Failure on every exception of the benchmark corpus (real library exceptions), of the chain
tests, and on arbitrary exceptions. Below them, the shortcuts of the lookups they use: the C-level
"no known header name" test against the plain header scan, and the one-call affix test of
provider codes against the table walk.
"""

from __future__ import annotations

import importlib.util
from http import HTTPStatus
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from requests.structures import CaseInsensitiveDict

from classifier import Failure, classify, engine, retry_after, rules
from classifier.overrides import Overrides
from classifier.retry_after import MAX_HEADERS, _scan_pairs, header_values, no_known_headers
from tests.classifier.test_properties import exceptions, header_maps

BENCHMARK = Path(__file__).resolve().parents[2] / "benchmarks" / "classify.py"


def reference_read_node(exc: Any) -> engine.Node:
    """Read `exc` with the general attribute reader only."""
    info = engine.type_info(type(exc))
    message = engine.message_of(exc)
    node = engine.Node(info, message)
    present = engine._present(exc, info)
    if not present:
        return node
    link_names = tuple(name for name in engine.LINK_ATTRIBUTES if name in present)
    if not engine.LINK_ATTRIBUTES.isdisjoint(present):
        node.linked, node.link_names = True, link_names
    try:
        engine._read_attributes(node, exc, getattr, present)
    except Exception:
        node = engine.Node(info, message)
        node.linked, node.link_names = True, link_names
        try:
            engine._read_attributes(node, exc, engine._safe_getattr, present)
        except Exception:
            return node
    return node


def reference_read_chain(root: Any) -> list[engine.Node]:
    """Breadth first, each exception once, every one read by `reference_read_node`."""
    root_node = reference_read_node(root)
    nodes = [root_node]
    seen = {id(root)}
    frontier = [(root, root_node)]
    for _ in range(engine.MAX_DEPTH):
        next_frontier = []
        for exc, node in frontier:
            for linked in engine.links(exc, node):
                if id(linked) in seen:
                    continue
                seen.add(id(linked))
                linked_node = reference_read_node(linked)
                nodes.append(linked_node)
                next_frontier.append((linked, linked_node))
                if len(nodes) >= engine.MAX_CHAIN:
                    return nodes
        if not next_frontier:
            break
        frontier = next_frontier
    return nodes


def reference_decide(nodes: list[engine.Node]) -> engine.Verdict:
    """Judge every node; the strongest wins, the outer between equals unless it is TRANSIENT."""
    best = engine._NO_VERDICT
    for node in nodes:
        verdict = engine.judge(node)
        if verdict[0] > best[0] or (
            verdict[0] == best[0]
            and best[1] is engine._TRANSIENT
            and verdict[1] is not engine._TRANSIENT
        ):
            best = verdict
            if best[0] == engine._RANK_STATUS and best[1] is not engine._TRANSIENT:
                break
    return best


def reference_classify(exc: Any) -> Failure:
    try:
        nodes = reference_read_chain(exc)
        return engine.build_failure(nodes, reference_decide(nodes))
    except Exception:
        return engine.fallback_failure(exc)


def same(fast: Failure, slow: Failure) -> bool:
    """Equal, but for a delay computed from an HTTP-date against the clock a moment apart."""
    if type(fast) is not Failure or list(vars(fast)) != list(vars(slow)):
        return False  # the same fields, in the same order
    if (fast.retry_after is None) != (slow.retry_after is None):
        return False
    if fast.retry_after is not None and abs(fast.retry_after - slow.retry_after) > 1.0:
        return False
    return {**vars(fast), "retry_after": None} == {**vars(slow), "retry_after": None}


def assert_same(exc: Any) -> None:
    slow = reference_classify(exc)
    fast = classify(exc)
    assert same(fast, slow), (fast, slow)
    # The general path with an (empty-matching) override table goes through read_chain/decide.
    overrides = Overrides()
    overrides.add("provider_code", "no-such-provider-code-xyz", "timeout", provider="nobody")
    general = engine.Classifier(overrides).classify(exc)
    assert same(general, slow), (general, slow)


def _benchmark_exceptions() -> list[tuple[str, BaseException]]:
    spec = importlib.util.spec_from_file_location("classify_benchmark_fast", BENCHMARK)
    assert spec and spec.loader
    benchmark = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(benchmark)
    return [(name, benchmark.caught(fail)) for name, _, fail in benchmark.corpus()]


CORPUS = _benchmark_exceptions()


@pytest.mark.parametrize(("name", "exc"), CORPUS, ids=[name for name, _ in CORPUS])
def test_the_fast_paths_agree_with_the_general_path_on_the_corpus(
    name: str, exc: BaseException
) -> None:
    assert_same(exc)
    assert_same(exc)  # and again, with every TypeInfo cached


def test_the_corpus_covers_the_fast_paths() -> None:
    """Lone exceptions, single status errors read by `response` alone, and chains."""
    lone = status = chains = 0
    for _, exc in CORPUS:
        info = engine.type_info(type(exc))
        present = engine._present(exc, info)
        if len(reference_read_chain(exc)) > 1:
            chains += 1
        elif info.lone and not present:
            lone += 1
        elif present == engine._RESPONSE_ONLY:
            status += 1
    assert lone >= 5 and status >= 20 and chains >= 20


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(exceptions(), st.lists(exceptions(), max_size=3))
def test_the_fast_paths_agree_with_the_general_path_on_arbitrary_exceptions(
    exc: BaseException, inner: list[BaseException]
) -> None:
    current = exc
    for wrapped in inner:
        current.__cause__ = wrapped
        current = wrapped
    assert_same(exc)
    for wrapped in inner:
        assert_same(wrapped)


class Response:
    def __init__(self, status_code: Any, headers: Any) -> None:
        self.status_code = status_code
        self.headers = headers


class StatusResponse:
    """aiohttp-style: `status` rather than `status_code`."""

    def __init__(self, status: Any, headers: Any) -> None:
        self.status = status
        self.headers = headers


class ExplodingResponse:
    """A response whose status reads fine and whose headers raise."""

    status_code = 503

    @property
    def headers(self) -> Any:
        raise RuntimeError("headers exploded")


# Statuses as libraries send them and as they should not: ints in and out of range, text, an
# IntEnum, a bool, None.
STATUSES = st.one_of(
    st.integers(min_value=0, max_value=700),
    st.sampled_from([HTTPStatus.NOT_FOUND, HTTPStatus.TOO_MANY_REQUESTS, True, "503", "4o4", 501]),
    st.none(),
    st.text(max_size=3),
)
# Provider codes: exact table entries, suffix and prefix families, generic codes (which never
# beat a status), a non-retryable one, junk, and codes that are not strings.
CODES = st.one_of(
    st.sampled_from(
        [
            "Throttling",
            "ThrottlingException",
            "NoSuchKey",
            "NoSuchBucket",
            "ExpiredTokenException",
            "InvalidParameterValue",
            "DBInstanceNotFound",
            "BandwidthLimitExceeded",
            "MalformedXML",
            "api_error",
            "invalid_request_error",
            "UNIMPLEMENTED",
            "X",
            "",
        ]
    ),
    st.text(max_size=12),
    st.integers(),
    st.none(),
)
RESPONSE_HEADERS = st.one_of(
    header_maps,
    st.lists(
        st.tuples(
            st.sampled_from(["Retry-After", "x-should-retry", "X-Should-Retry", "Server"]),
            st.sampled_from(["3", "true", "false", "soon", "0"]),
        ),
        max_size=3,
    ).map(httpx.Headers),
    st.dictionaries(
        st.sampled_from(["Retry-After", "x-should-retry", "Server", "Date"]),
        st.sampled_from(["3", "true", "false", "soon"]),
        max_size=3,
    ).map(CaseInsensitiveDict),
)


@st.composite
def status_errors(draw: st.DrawFn) -> BaseException:
    """Exceptions whose only attribute read is `response` (an object, a dict or None)."""
    base = draw(st.sampled_from([Exception, ConnectionError, TimeoutError, RuntimeError]))
    name = draw(st.sampled_from(["HTTPStatusError", "ClientError", "Boom", "RateLimitError"]))
    exc = type(name, (base,), {})(draw(st.text(max_size=30)))
    response = draw(
        st.one_of(
            st.none(),
            st.builds(Response, STATUSES, RESPONSE_HEADERS),
            st.builds(StatusResponse, STATUSES, RESPONSE_HEADERS),
            st.builds(ExplodingResponse),
            st.fixed_dictionaries(
                {
                    "Error": st.one_of(
                        st.none(),
                        st.fixed_dictionaries({"Code": CODES}),
                        st.just("not a dict"),
                    ),
                    "ResponseMetadata": st.one_of(
                        st.fixed_dictionaries(
                            {"HTTPStatusCode": STATUSES, "HTTPHeaders": RESPONSE_HEADERS}
                        ),
                        st.none(),
                    ),
                }
            ),
        )
    )
    exc.response = response  # type: ignore[attr-defined]
    if draw(st.booleans()):
        exc.__context__ = draw(exceptions())
    return exc


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(status_errors())
def test_the_response_only_reader_agrees_with_the_general_reader(exc: BaseException) -> None:
    assert_same(exc)


def test_the_status_errors_of_the_corpus_take_the_response_fast_path() -> None:
    """httpx's, requests' and botocore's status errors are answered by `_response_failure`."""
    answered = 0
    for name, exc in CORPUS:
        info = engine.type_info(type(exc))
        if not name.startswith(("httpx HTTPStatusError", "requests HTTPError", "botocore S3 No")):
            continue
        assert engine._present(exc, info) == engine._RESPONSE_ONLY, name
        fast = engine._response_failure(exc, info, engine.message_of(exc))
        assert fast is not None and same(fast, reference_classify(exc)), name
        answered += 1
    assert answered >= 10


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.one_of(st.text(max_size=20), st.binary(max_size=8)), st.integers()))
def test_a_dict_header_map_is_scanned_as_pairs_are(headers: dict[Any, Any]) -> None:
    found: dict[str, Any] = {}
    _scan_pairs(headers.items(), found)
    assert header_values(headers) == found
    assert len(headers) <= MAX_HEADERS


class Name(str):
    """A header name whose own lower() lies: the scan lowercases with str.lower regardless."""

    def lower(self) -> str:
        return "retry-after"


def reference_header_values(headers: Any) -> dict[str, Any]:
    """`header_values` with its C-level "no known name" test switched off: the plain scan."""
    original = retry_after.no_known_headers
    retry_after.no_known_headers = lambda headers: False
    try:
        return header_values(headers)
    finally:
        retry_after.no_known_headers = original


NAMES = st.one_of(
    st.text(max_size=20),
    st.sampled_from(["Retry-After", "RETRY-AFTER-MS", "x-should-retry", "Server", "Date"]),
    st.binary(max_size=8),
    st.sampled_from([b"retry-after", b"Server"]),
    st.sampled_from(["Retry-After", "Server"]).map(Name),
)
HEADER_TEXT = st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=5)
ANY_HEADER_MAP = st.one_of(
    header_maps,
    st.dictionaries(NAMES, st.text(max_size=5), max_size=6),
    st.lists(
        st.tuples(st.sampled_from(["Retry-After", "Server", "X-Should-Retry"]), HEADER_TEXT),
        max_size=5,
    ).map(httpx.Headers),
    st.dictionaries(
        st.sampled_from(["Retry-After", "Server", "retry-after-ms"]),
        st.text(max_size=5),
        max_size=4,
    ).map(CaseInsensitiveDict),
)


@settings(max_examples=400, deadline=None)
@given(ANY_HEADER_MAP)
def test_the_no_known_header_test_agrees_with_the_scan(headers: Any) -> None:
    slow = reference_header_values(headers)
    if no_known_headers(headers):
        assert slow == {}
    assert header_values(headers) == slow


def test_the_no_known_header_test_is_sure_only_of_the_maps_it_knows() -> None:
    assert no_known_headers({"Server": "x", "Content-Type": "y"})
    assert not no_known_headers({"Server": "x", "Retry-After": "1"})
    assert not no_known_headers({b"server": "x"})  # bytes names: the scan decides
    assert no_known_headers(httpx.Headers({"Server": "x"}))
    assert not no_known_headers(httpx.Headers({"Retry-After": "1"}))
    assert no_known_headers(CaseInsensitiveDict({"Server": "x"}))
    assert not no_known_headers(CaseInsensitiveDict({"RETRY-AFTER": "1"}))
    assert not no_known_headers([("Server", "x")])  # any other shape: the scan decides
    assert not no_known_headers(object())


def reference_provider_code_category(code: str) -> Any:
    """The provider-code tables walked one entry at a time, in their order."""
    category = rules.PROVIDER_CODES.get(code) or rules.GRPC_STATUS.get(code)
    if category is not None or len(code) > 128:
        return category
    for suffix, category in rules.PROVIDER_CODE_SUFFIXES:
        if code.endswith(suffix):
            return category
    for prefix, category in rules.PROVIDER_CODE_PREFIXES:
        if code.startswith(prefix):
            return category
    return None


AFFIXES = [affix for affix, _ in (*rules.PROVIDER_CODE_SUFFIXES, *rules.PROVIDER_CODE_PREFIXES)]


@settings(max_examples=400, deadline=None)
@given(st.lists(st.one_of(st.sampled_from(AFFIXES), st.text(max_size=6)), max_size=3).map("".join))
def test_provider_codes_match_the_tables_in_order(code: str) -> None:
    assert rules.provider_code_category(code) is reference_provider_code_category(code)
