"""The fast paths of `classify` agree with the general path they shortcut.

`reference_classify` below is the general path written out plainly: read every exception of the
chain with the general attribute reader, judge every node, keep the strongest verdict. The fast
paths (the inlined lone case, the single-exception case, the `response`-only reader, the inlined
chain walk, skipping nodes that cannot win) must give the same Failure on every exception of the
benchmark corpus (real library exceptions), of the chain tests, and on arbitrary exceptions.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from classifier import Failure, classify, engine
from classifier.overrides import Overrides
from classifier.retry_after import MAX_HEADERS, _scan_pairs, header_values
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


@st.composite
def status_errors(draw: st.DrawFn) -> BaseException:
    """Exceptions whose only attribute read is `response` (an object, a dict or None)."""
    base = draw(st.sampled_from([Exception, ConnectionError, TimeoutError, RuntimeError]))
    name = draw(st.sampled_from(["HTTPStatusError", "ClientError", "Boom", "RateLimitError"]))
    exc = type(name, (base,), {})(draw(st.text(max_size=30)))
    response = draw(
        st.one_of(
            st.none(),
            st.builds(
                Response,
                st.one_of(st.integers(min_value=0, max_value=700), st.none(), st.text(max_size=3)),
                header_maps,
            ),
            st.fixed_dictionaries(
                {
                    "Error": st.one_of(
                        st.none(),
                        st.fixed_dictionaries(
                            {"Code": st.sampled_from(["Throttling", "NoSuchKey", "X", ""])}
                        ),
                    ),
                    "ResponseMetadata": st.fixed_dictionaries(
                        {
                            "HTTPStatusCode": st.integers(min_value=100, max_value=599),
                            "HTTPHeaders": header_maps,
                        }
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


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.one_of(st.text(max_size=20), st.binary(max_size=8)), st.integers()))
def test_a_dict_header_map_is_scanned_as_pairs_are(headers: dict[Any, Any]) -> None:
    found: dict[str, Any] = {}
    _scan_pairs(headers.items(), found)
    assert header_values(headers) == found
    assert len(headers) <= MAX_HEADERS
