"""Where a switch goes: the capability's next untried source, else a source the run suggested."""

from __future__ import annotations

import pytest

from orchestrator.coordination.registry import Registry


@pytest.fixture
def reg() -> Registry:
    registry = Registry()
    for capability, names in {"news": ["news_api", "news_wire"], "web": ["web_search"]}.items():
        for name in names:
            registry.register(capability, name, lambda query: [])
    return registry


def test_the_capabilitys_next_source_comes_first(reg):
    assert reg.switch_target("news_api", set(), ["web_search"]) == ("news_wire", False)


def test_a_suggested_source_of_another_capability_is_used_when_none_is_left(reg):
    assert reg.switch_target("news_wire", {"news_api"}, ["web_search"]) == ("web_search", True)


def test_a_suggestion_is_read_inside_a_sentence_skipping_tried_sources(reg):
    suggestions = ["retry with a narrower query", "instead of news_api, use web_search."]
    assert reg.switch_target("news_wire", {"news_api"}, suggestions) == ("web_search", True)


def test_nothing_is_left_when_every_named_source_was_tried(reg):
    tried = {"news_api", "web_search"}
    assert reg.switch_target("news_wire", tried, ["web_search", "news_api", "bing"]) == (
        None,
        False,
    )


def test_the_given_capability_limits_the_registrys_choice(reg):
    assert reg.switch_target("news_api", set(), capability="web") == ("web_search", False)
