"""The PromQL tokenizer and parser (``app.promql.parser``) and what a query asks
(``app.promql.query``): round trips of generated syntax trees, PromQL's own spellings,
positions in errors, and no input that raises anything but a ``ParseError``."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.promql.parser import (Binary, Matcher, Number, ParseError, Selector, Unary, format_expr,
                               parse)
from app.promql.query import BadQuery, Scalar, SeriesQuery, metric_names, plan, read_query

labels = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,12}", fullmatch=True).filter(
    lambda s: s.lower() not in ("inf", "nan"))
names = st.from_regex(r"[A-Za-z_:][A-Za-z0-9_:]{0,20}", fullmatch=True).filter(
    lambda s: s.lower() not in ("inf", "nan") and s not in (
        "by", "without", "on", "ignoring", "group_left", "group_right", "bool", "offset", "and",
        "or", "unless", "atan2", "sum", "avg", "min", "max", "count", "group", "stddev", "stdvar",
        "topk", "bottomk", "quantile", "count_values", "limitk", "limit_ratio"))
values = st.text(st.characters(exclude_categories=("Cs",)), max_size=20)
matchers = st.builds(Matcher, labels, st.sampled_from(["=", "!=", "=~", "!~"]), values)
selectors = st.one_of(
    st.builds(Selector, names, st.lists(matchers, max_size=4).map(tuple)),
    st.builds(Selector, st.none(), st.lists(matchers, min_size=1, max_size=4).map(tuple)),
)
numbers = st.builds(Number, st.floats(min_value=0, allow_nan=False))
exprs = st.recursive(
    st.one_of(numbers, selectors),
    lambda inner: st.one_of(
        st.builds(Binary, st.sampled_from(["+", "-", "*", "/"]), inner, inner),
        st.builds(Unary, st.sampled_from(["+", "-"]), inner),
    ),
    max_leaves=8,
)


@settings(max_examples=300, deadline=None)
@given(exprs)
def test_format_then_parse_is_the_same_tree(expr):
    assert parse(format_expr(expr)) == expr


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=60))
def test_any_text_parses_or_is_a_parse_error_with_its_position(text):
    try:
        parse(text)
    except ParseError as e:
        assert 0 <= e.position <= len(text)
        line, column = str(e).split(":")[:2]
        assert int(line) >= 1 and int(column) >= 1


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet='tidemark_count{}()[]",=~!+-*/ 0123456789.eamsx\\\'`#\n', max_size=50))
def test_near_miss_queries_are_refused_cleanly(text):
    try:
        read_query(text)
    except (ParseError, BadQuery):
        pass


@pytest.mark.parametrize("text, tree", [
    ('tidemark_count{stream="web"}', Selector("tidemark_count", (Matcher("stream", "=", "web"),))),
    ("tidemark_count{stream='web',}", Selector("tidemark_count", (Matcher("stream", "=", "web"),))),
    ("{__name__=`tidemark_count`}", Selector(None, (Matcher("__name__", "=", "tidemark_count"),))),
    ('x{a=~"web\\\\.eu|b\\"q"}', Selector("x", (Matcher("a", "=~", 'web\\.eu|b"q'),))),
    ('x{a="\\u00e9\\x41\\101\\n"}', Selector("x", (Matcher("a", "=", "éAA\n"),))),
    ("1+1", Binary("+", Number(1.0), Number(1.0))),
    ("1 + 2 * 3", Binary("+", Number(1.0), Binary("*", Number(2.0), Number(3.0)))),
    ("(1 - 2) - 3", Binary("-", Binary("-", Number(1.0), Number(2.0)), Number(3.0))),
    ("-0x1F", Unary("-", Number(31.0))),
    ("1e3 # a comment", Number(1000.0)),
    (".5", Number(0.5)),
    ("+Inf", Unary("+", Number(math.inf))),
])
def test_promql_spellings(text, tree):
    assert parse(text) == tree


@pytest.mark.parametrize("text, message", [
    ('tidemark_count{stream="web"', "1:28: parse error: unexpected end of input"),
    ('tidemark_count{stream=web}', "1:23: parse error: unexpected 'web', expected a quoted string"),
    ('x{a="b\\q"}', "1:7: parse error: unknown escape sequence"),
    ('x{a="b}', "1:5: parse error: unterminated quoted string"),
    ("1 +\n  $", "2:3: parse error: unexpected character '$'"),
    ("rate(x[5m])", "1:1: parse error: functions (rate(…)) are not supported"),
    ("sum by (a) (x)", "1:1: parse error: aggregations"),
    ("x[5m]", "1:2: parse error: range vectors"),
    ("x offset 5m", "1:3: parse error: offset"),
    ("x @ 100", "1:3: parse error: the @ modifier"),
    ("1 % 2", "1:3: parse error: operator '%'"),
    ("x == 1", "1:3: parse error: operator '=='"),
    ('"web"', "a string is not a query"),
    ("5m", "a duration (5m) is not a number here"),
    ("", "no expression found"),
    ("(1", "1:3: parse error: unexpected end of input, expected ')'"),
    ("(" * 3000 + "1" + ")" * 3000, "1:201: parse error: query too complex"),
    ("-" * 3000 + "1", "query too complex"),
    ("+".join(["1"] * 3000), "query too complex"),
])
def test_errors_name_the_position_and_what_is_supported(text, message):
    with pytest.raises(ParseError) as e:
        parse(text)
    assert message in str(e.value)


def test_numbers_fold_into_a_scalar():
    assert read_query("1+1") == Scalar(2.0)
    assert read_query("(2 * 3 - 1) / 2") == Scalar(2.5)
    assert read_query("-1 / 0") == Scalar(-math.inf)
    assert math.isnan(read_query("0 / 0").value)


def test_a_selector_is_a_kind_its_streams_parameters_and_bounds():
    q = read_query('tidemark_quantiles{stream="web", q="0.5,0.99", window="1h30m", bound="upper"}')
    assert isinstance(q, SeriesQuery)
    assert (q.kind, q.stream, q.params, q.bounds, q.window_ms) == (
        "quantiles", "web", (("q", "0.5,0.99"),), ("upper",), 5_400_000)
    assert q.labels == (("q", "0.5,0.99"), ("window", "1h30m"))
    q = read_query('{__name__="tidemark_heavy_hitters", stream=~"(web|api)", phi="0.1"}')
    assert q.kind == "heavy-hitters" and q.bounds == ("estimate", "lower", "upper")
    assert [n for n in ("web", "api", "web2", "x") if q.selects(n)] == ["web", "api"]
    assert q.window_ms is None


def test_metric_names_come_from_the_kinds_table():
    from app.answers import QUERY_KINDS

    kinds = metric_names()
    assert set(kinds.values()) == set(QUERY_KINDS) - {"distribution"}
    assert all(m == "tidemark_" + k.replace("-", "_") for m, k in kinds.items())


@pytest.mark.parametrize("text, message", [
    ('tidemark_count{stream="a", stream="b"}', "matched twice"),
    ('tidemark_count{__name__="tidemark_sum", stream="a"}', "given twice"),
    ('{stream="a"}', "needs a metric name"),
    ('tidemark_count{stream="a", at="5"}', "query's time"),
    ('tidemark_count{stream="a", window="0s"}', "positive"),
    ('tidemark_count{stream="a"} * tidemark_sum{stream="a"}', "operators on series"),
    ('tidemark_count{stream=~"a{2}"}', "not supported"),
])
def test_selectors_outside_the_language(text, message):
    with pytest.raises(BadQuery) as e:
        read_query(text)
    assert message in str(e.value)


def test_every_metric_parses_as_a_selector():
    from app.answers import QUERY_KINDS

    for metric, kind in metric_names().items():
        where = 'stream="s"' if QUERY_KINDS[kind].streams == 1 else 'streams="a,b"'
        assert plan(parse(f'{metric}{{{where}}}')).kind == kind


def test_a_kind_over_two_streams_names_them_as_natively():
    q = read_query('tidemark_inner_product{streams="a, b", window="1m"}')
    assert q.stream == ("a", "b") and q.params == () and ("streams", "a, b") in q.labels
    for text, words in [('tidemark_inner_product{stream="a"}', "name them with streams"),
                        ('tidemark_inner_product{streams="a"}', "2 stream names"),
                        ('tidemark_count{streams="a,b"}', "reads one stream")]:
        with pytest.raises(BadQuery) as e:
            read_query(text)
        assert words in str(e.value)
