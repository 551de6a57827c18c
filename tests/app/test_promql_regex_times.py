"""``stream=~`` matching (``app.promql.regex``) against Python's ``re`` as the oracle, in
linear time on patterns that make a backtracking engine explode; Prometheus' times and
durations (``app.promql.times``)."""

from __future__ import annotations

import re
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.promql import regex
from app.promql.times import BadParameter, parse_duration, parse_time

# Names of at most 6 characters: the oracle is Python's backtracking ``re``, whose time on
# nested quantifiers grows exponentially with the name. A 21-character name held one clean
# run of the suite for over ten minutes, and a 10-character one an xdist worker for 18
# (examples differ with what ran before them in the process), while at 6 the worst
# nesting these patterns reach stays in milliseconds (the engine under test is linear:
# ``test_patterns_that_explode…`` below).
_NAME = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,5}", fullmatch=True)


atoms = st.one_of(st.sampled_from(["a", "b", "web", "\\.", ".", "[a-c]", "[^b]", "\\d", "-", "_"]))


@st.composite
def patterns(draw, depth=0):
    """Patterns of the supported subset: sequences of atoms and groups, alternation, * + ?."""
    branches = []
    for _ in range(draw(st.integers(1, 3))):
        parts = []
        for _ in range(draw(st.integers(0, 3))):
            nested = depth < 2 and draw(st.booleans())
            atom = draw(patterns(depth + 1)) if nested else draw(atoms)
            atom = f"({atom})" if nested or len(atom) > 2 and not atom.startswith("[") else atom
            parts.append(atom + draw(st.sampled_from(["", "", "*", "+", "?"])))
        branches.append("".join(parts))
    return "|".join(branches)


@settings(max_examples=300, deadline=None)
@given(patterns(), st.lists(_NAME | st.sampled_from(["", "a", "ab", "web.eu", "bbb", "a1-"]), max_size=6))
def test_matches_as_pythons_re_does(pattern, names):
    p = regex.compile(pattern)
    for name in names:
        assert p.fullmatch(name) == bool(re.fullmatch(pattern, name)), (pattern, name)


@pytest.mark.parametrize("grafana, yes, no", [
    ("(web|api)", ["web", "api"], ["webapi", "we", "x"]),
    ("web\\.eu|api-1", ["web.eu", "api-1"], ["webxeu"]),
    (".*", ["", "anything.at_all"], []),
    ("^(a|b)$", ["a", "b"], ["ab"]),
    ("(?:team-a\\..*)", ["team-a.x"], ["team-b.x", "team-ax"]),
])
def test_grafana_multi_value_patterns(grafana, yes, no):
    p = regex.compile(grafana)
    assert all(p.fullmatch(n) for n in yes) and not any(p.fullmatch(n) for n in no)


def test_patterns_that_explode_a_backtracking_engine_stay_fast():
    name = "a" * 64 + "!"
    for pattern in ("(a+)+", "(a*)*b", "(a|a)*" * 5, "(" * 30 + "a*" + ")*" * 30, ".*.*.*.*.*.*.*.*x"):
        started = time.perf_counter()
        assert not regex.compile(pattern).fullmatch(name)
        assert time.perf_counter() - started < 1.0, pattern


@pytest.mark.parametrize("pattern, words", [
    ("a{2}", "counted repetition"), ("(?i)a", "groups"), ("a**", "quantifier after"),
    ("(a", "missing )"), ("a)", "unbalanced"), ("*a", "nothing to repeat"), ("a^b", "only at the start"),
    ("[a", "missing ]"), ("\\p", "not supported"), ("[z-a]", "invalid class range"), ("a" * 5000, "longer"),
])
def test_unsupported_regex_is_refused_with_a_reason(pattern, words):
    with pytest.raises(regex.BadRegex) as e:
        regex.compile(pattern)
    assert words in str(e.value)


@pytest.mark.parametrize("raw, ms", [
    ("1700000000", 1_700_000_000_000), ("1700000000.1234", 1_700_000_000_123),
    ("1700000000.9996", 1_700_000_001_000), ("-1.5", -1500),
    ("2023-11-14T22:13:20Z", 1_700_000_000_000), ("2023-11-14T23:13:20.25+01:00", 1_700_000_000_250),
])
def test_times(raw, ms):
    assert parse_time(raw) == ms


@pytest.mark.parametrize("raw, ms", [
    ("15", 15_000), ("0.5", 500), ("5m", 300_000), ("1h30m", 5_400_000), ("1d", 86_400_000),
    ("1w2d", 9 * 86_400_000), ("1y", 365 * 86_400_000), ("250ms", 250), ("1m30s500ms", 90_500),
])
def test_durations(raw, ms):
    assert parse_duration(raw) == ms


@pytest.mark.parametrize("raw", ["", "5 m", "m", "30m1h", "1.5h", "inf", "nan", "5mm", "1e400", "2023-11-14"])
def test_bad_durations(raw):
    with pytest.raises(BadParameter):
        parse_duration(raw)


@pytest.mark.parametrize("raw", ["", "soon", "nan", "inf", "2023-11-14T22:13:20", "1e300"])
def test_bad_times(raw):
    with pytest.raises(BadParameter):
        parse_time(raw)
