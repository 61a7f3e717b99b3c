"""The scrubber's quicker looks give the answers of the plain ones: `_base64_runs` finds what
`_BASE64.finditer` finds, and the flag regex (its "-" first) matches where the one with its
look-behind first did, on generated text that mixes the characters each rule turns on."""

from __future__ import annotations

import re
import string

from hypothesis import given, settings
from hypothesis import strategies as st

from classifier import scrub
from classifier.scrub import _BASE64, _FLAG, _base64_runs

B64 = string.ascii_letters + string.digits + "+/_-"
# Blob characters most of the time, and what ends, pads or borders a blob: spaces, "=", quotes,
# a word character outside the blob's class ("é"), and the marker `_base64_runs` itself uses.
TEXT = st.lists(
    st.one_of(
        st.text(alphabet=B64, min_size=1, max_size=30),
        st.sampled_from([" ", "\n", "=", "==", "===", "é", '"', ":", ".", "\x01", "--", "-"]),
    ),
    max_size=40,
).map("".join)

# The flag rule as it was written before: the look-behind first.
FLAG_BEFORE = re.compile(
    r"(?<!\S)" + _FLAG.pattern.removeprefix("-(?<!\\S-)").replace("-?", "--?", 1)
)
FLAGS = st.lists(
    st.one_of(
        st.sampled_from(["-", "--", " -", "a-", "\t--", "\n-", "=", "'", '"', " "]),
        st.text(alphabet=string.ascii_letters + "_-", min_size=1, max_size=12),
    ),
    max_size=30,
).map("".join)


@settings(max_examples=600, deadline=None)
@given(TEXT)
def test_base64_runs_are_the_regex_matches(text):
    assert [m.span() for m in _base64_runs(text)] == [m.span() for m in _BASE64.finditer(text)]


def test_base64_runs_find_a_blob_beside_the_marker_character():
    text = "A" * 20 + "\x01" + "QUtJQUlPU0ZPRE5ON0VYQU1QTEU="
    assert [m[0] for m in _base64_runs(text)] == [m[0] for m in _BASE64.finditer(text)]
    assert len(list(_base64_runs(text))) == 2


@settings(max_examples=600, deadline=None)
@given(FLAGS)
def test_the_flag_rule_matches_where_its_look_behind_first_form_did(text):
    assert FLAG_BEFORE.pattern != _FLAG.pattern
    before = [(m.span(), m.groupdict()) for m in FLAG_BEFORE.finditer(text)]
    assert [(m.span(), m.groupdict()) for m in _FLAG.finditer(text)] == before


def test_a_password_flag_is_still_filtered_at_the_start_and_after_a_space():
    scrubber = scrub.Scrubber()
    for text in ("--password hunter2-secret", "run it --password=hunter2-secret now"):
        assert "hunter2" not in scrubber.text(text)[0]
    assert scrubber.text("a--password hunter2")[0] == "a--password hunter2"
