"""The PromQL Tidemark reads (contract §10): a tokenizer and a recursive-descent parser.

The grammar is PromQL's own for what it covers, so a query Grafana or promtool writes
reads the same here as in Prometheus (``prometheus/promql/parser``: ``lex.go``,
``generated_parser.y``)::

    expr      := term (("+" | "-") term)*
    term      := unary (("*" | "/") unary)*
    unary     := ("+" | "-") unary | primary
    primary   := NUMBER | "(" expr ")" | selector
    selector  := NAME ["{" matchers "}"] | "{" matchers "}"
    matchers  := [matcher ("," matcher)* [","]]
    matcher   := LABEL ("=" | "!=" | "=~" | "!~") STRING

Everything else PromQL has (functions, aggregations, range vectors ``[5m]``, ``offset``,
``@``, comparisons, ``%``, ``^``, string results) is recognised far enough to be refused
with what is supported instead. Every error names its position as Prometheus does:
``line:column: parse error: …``. Meaning (which selectors name a query kind, what a sum of
numbers is) is :mod:`app.promql.query`'s business; this module knows syntax only.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Union

__all__ = ["ParseError", "Number", "Unary", "Binary", "Matcher", "Selector", "Expr",
           "parse", "format_expr", "SUPPORTED"]

SUPPORTED = ('Tidemark answers one selector tidemark_<kind>{stream="…", window="5m", …} '
             "or arithmetic (+ - * /) on numbers")


class ParseError(ValueError):
    """A query that is not in the language; ``position`` is its character offset."""

    def __init__(self, message: str, text: str, position: int):
        line = text.count("\n", 0, position) + 1
        column = position - (text.rfind("\n", 0, position) + 1) + 1
        super().__init__(f"{line}:{column}: parse error: {message}")
        self.position = position


# -- syntax tree -----------------------------------------------------------------------------
@dataclass(frozen=True)
class Number:
    value: float


@dataclass(frozen=True)
class Unary:
    op: str  # "+" or "-"
    operand: "Expr"


@dataclass(frozen=True)
class Binary:
    op: str  # "+", "-", "*" or "/"
    left: "Expr"
    right: "Expr"


@dataclass(frozen=True)
class Matcher:
    label: str
    op: str  # "=", "!=", "=~" or "!~"
    value: str


@dataclass(frozen=True)
class Selector:
    name: str | None
    matchers: tuple[Matcher, ...]


Expr = Union[Number, Unary, Binary, Selector]


# -- tokens ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Token:
    type: str  # NUMBER STRING NAME DURATION OP EOF (the token's type; a query kind is another thing)
    text: str
    pos: int
    value: object = None


_NUMBER = re.compile(r"0[xX][0-9a-fA-F]+|(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_DURATION = re.compile(r"(?:[0-9]+(?:ms|[smhdwy]))+")
_NAME = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")
_SPACE = re.compile(r"(?:\s+|#[^\n]*)+")
# Longest first: "=~" before "=", "!=" before "!".
_OPS = ("==", "!=", "=~", "!~", "<=", ">=", "=", "<", ">", "+", "-", "*", "/", "%", "^",
        "(", ")", "{", "}", "[", "]", ",", "@", ":")
_ESCAPES = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v",
            "\\": "\\", "'": "'", '"': '"'}
_DIGITS = "0123456789"
_DIGITS_SET = frozenset(_DIGITS)
_HEX = {"x": 2, "u": 4, "U": 8}


def _string(text: str, pos: int) -> tuple[str, int]:
    """A quoted string from ``pos`` (at its quote): its value and the position after it.
    Go's escapes in ``"…"`` and ``'…'``, none in raw ```…```, as PromQL reads them."""
    quote, i, out = text[pos], pos + 1, []
    while i < len(text):
        c = text[i]
        if c == quote:
            return "".join(out), i + 1
        if quote != "`" and c == "\n":
            break
        if c == "\\" and quote != "`":
            e = text[i + 1 : i + 2]
            if e in _ESCAPES:
                out.append(_ESCAPES[e])
                i += 2
                continue
            if e in _HEX or (e and e in "01234567"):
                width, base, start = (_HEX[e], 16, i + 2) if e in _HEX else (3, 8, i + 1)
                digits = text[start : start + width]
                try:
                    code = int(digits, base) if len(digits) == width else None
                    out.append(chr(code))
                except (TypeError, ValueError, OverflowError):
                    raise ParseError(f"invalid escape \\{e}{digits} in string", text, i) from None
                i = start + width
                continue
            raise ParseError(f"unknown escape sequence \\{e} in string", text, i)
        out.append(c)
        i += 1
    raise ParseError("unterminated quoted string", text, pos)


def tokenize(text: str) -> list[Token]:
    tokens, i = [], 0
    while True:
        m = _SPACE.match(text, i)
        if m:
            i = m.end()
        if i >= len(text):
            tokens.append(Token("EOF", "", i))
            return tokens
        c = text[i]
        if c in "\"'`":
            value, end = _string(text, i)
            tokens.append(Token("STRING", text[i:end], i, value))
            i = end
        elif (m := _DURATION.match(text, i)) and not _NAME.match(text, m.end()):
            tokens.append(Token("DURATION", m.group(), i))
            i = m.end()
        elif c in _DIGITS or (c == "." and text[i + 1 : i + 2] in _DIGITS_SET):
            m = _NUMBER.match(text, i)
            raw = m.group()
            value = float(int(raw, 16)) if raw[:2].lower() == "0x" else float(raw)
            tokens.append(Token("NUMBER", raw, i, value))
            i = m.end()
        elif m := _NAME.match(text, i):
            word = m.group()
            if word.lower() in ("inf", "nan"):
                tokens.append(Token("NUMBER", word, i, float(word)))
            else:
                tokens.append(Token("NAME", word, i))
            i = m.end()
        else:
            op = next((o for o in _OPS if text.startswith(o, i)), None)
            if op is None:
                raise ParseError(f"unexpected character {c!r}", text, i)
            tokens.append(Token("OP", op, i))
            i += len(op)


# -- parser ----------------------------------------------------------------------------------
_AGGREGATIONS = {"sum", "avg", "min", "max", "count", "group", "stddev", "stdvar", "topk",
                 "bottomk", "quantile", "count_values", "limitk", "limit_ratio"}
_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "offset",
             "and", "or", "unless", "atan2"}
_LABEL = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
# Operators and nesting a query may hold: far beyond any query written by hand or by
# Grafana, well within Python's recursion (the tree is walked recursively).
MAX_NODES = 200
_PRECEDENCE = {"+": 1, "-": 1, "*": 2, "/": 2}  # the binary operators; * and / bind tighter


class _Parser:
    def __init__(self, text: str):
        self.text = text
        self.tokens = tokenize(text)
        self.i = 0
        self.nodes = 0  # operators and parentheses read so far

    def grow(self) -> None:
        self.nodes += 1
        if self.nodes > MAX_NODES:
            self.fail(f"query too complex: at most {MAX_NODES} operators and parentheses")

    @property
    def tok(self) -> Token:
        return self.tokens[self.i]

    def take(self) -> Token:
        t = self.tokens[self.i]
        self.i += 1
        return t

    def at(self, *ops: str) -> bool:
        return self.tok.type == "OP" and self.tok.text in ops

    def fail(self, message: str, token: Token | None = None):
        raise ParseError(message, self.text, (token or self.tok).pos)

    def unexpected(self, wanted: str):
        t = self.tok
        found = "end of input" if t.type == "EOF" else repr(t.text)
        self.fail(f"unexpected {found}, expected {wanted}")

    def parse(self) -> Expr:
        if self.tok.type == "EOF":
            self.fail("no expression found in input; " + SUPPORTED)
        expr = self.expr()
        if self.tok.type != "EOF":
            self.refuse_operator()
            self.unexpected("an operator (+ - * /) or the end of the query")
        return expr

    def refuse_operator(self) -> None:
        t = self.tok
        if t.type == "OP" and t.text in ("==", "!=", "<", ">", "<=", ">=", "%", "^"):
            self.fail(f"operator {t.text!r} is not supported; {SUPPORTED}")
        if t.type == "NAME" and t.text.lower() in ("and", "or", "unless", "atan2"):
            self.fail(f"operator {t.text!r} is not supported; {SUPPORTED}")

    def expr(self, above: int = 0) -> Expr:
        """``expr`` and ``term`` of the grammar by precedence climbing: unaries joined by the
        binary operators that bind tighter than ``above`` (``_PRECEDENCE``), each grouped
        from the left (``1 - 2 - 3`` is ``(1 - 2) - 3``, ``1 + 2 * 3`` is ``1 + (2 * 3)``)."""
        left = self.unary()
        while self.tok.type == "OP" and _PRECEDENCE.get(self.tok.text, 0) > above:
            self.grow()
            op = self.take().text
            left = Binary(op, left, self.expr(_PRECEDENCE[op]))
        return left

    def unary(self) -> Expr:
        if self.at("+", "-"):
            self.grow()
            op = self.take().text
            return Unary(op, self.unary())
        return self.postfix(self.primary())

    def postfix(self, expr: Expr) -> Expr:
        t = self.tok
        if self.at("["):
            self.fail('range vectors ([5m]) are not supported: give the window as a label, '
                      'e.g. tidemark_count{stream="web", window="5m"}')
        if t.type == "NAME" and t.text == "offset":
            self.fail("offset is not supported: every selector is answered at the query's time")
        if self.at("@"):
            self.fail("the @ modifier is not supported: use the query's time parameter")
        return expr

    def primary(self) -> Expr:
        t = self.tok
        if t.type == "NUMBER":
            self.take()
            return Number(t.value)
        if t.type == "DURATION":
            self.fail(f"a duration ({t.text}) is not a number here; {SUPPORTED}")
        if t.type == "STRING":
            self.fail(f"a string is not a query; {SUPPORTED}")
        if self.at("("):
            self.grow()
            self.take()
            inner = self.expr()
            if not self.at(")"):
                self.refuse_operator()
                self.unexpected("')'")
            self.take()
            return inner
        if self.at("{"):
            return Selector(None, self.matchers())
        if t.type == "NAME":
            self.take()
            word = t.text
            if self.at("(") or word in _AGGREGATIONS and (self.tok.type == "NAME" and self.tok.text in ("by", "without")):
                what = "aggregations" if word in _AGGREGATIONS else "functions"
                self.fail(f"{what} ({word}(…)) are not supported; {SUPPORTED}", t)
            if word in _KEYWORDS:
                self.fail(f"unexpected keyword {word!r}; {SUPPORTED}", t)
            return Selector(word, self.matchers() if self.at("{") else ())
        self.unexpected("a number, '(' or a selector")

    def matchers(self) -> tuple[Matcher, ...]:
        self.take()  # "{"
        out = []
        while not self.at("}"):
            label = self.tok
            if label.type != "NAME" or not _LABEL.match(label.text):
                self.unexpected("a label name or '}'")
            self.take()
            if not self.at("=", "!=", "=~", "!~"):
                self.unexpected("a label matching operator (=, !=, =~, !~)")
            op = self.take().text
            value = self.tok
            if value.type != "STRING":
                self.unexpected(f"a quoted string for label {label.text}")
            self.take()
            out.append(Matcher(label.text, op, value.value))
            if self.at(","):
                self.take()
            elif not self.at("}"):
                self.unexpected("',' or '}'")
        self.take()
        return tuple(out)


def parse(text: str) -> Expr:
    """The syntax tree of ``text``, or a :class:`ParseError` naming the position."""
    return _Parser(text).parse()


# -- formatting (the inverse of ``parse``) -----------------------------------------------------
def _number(x: float) -> str:
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "Inf" if x > 0 else "-Inf"
    return repr(x)


def format_expr(expr: Expr) -> str:
    """PromQL text that ``parse`` reads back into ``expr`` (binary operands in parentheses)."""
    if isinstance(expr, Number):  # ``parse`` makes no negative Number: "-1" is Unary("-", 1)
        return _number(expr.value)
    if isinstance(expr, Unary):
        return f"{expr.op}({format_expr(expr.operand)})"
    if isinstance(expr, Binary):
        return f"({format_expr(expr.left)} {expr.op} {format_expr(expr.right)})"
    inner = ", ".join(f"{m.label}{m.op}{json.dumps(m.value, ensure_ascii=False)}" for m in expr.matchers)
    if expr.name is None:
        return "{" + inner + "}"
    return expr.name + ("{" + inner + "}" if expr.matchers else "")
