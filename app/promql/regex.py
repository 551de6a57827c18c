"""``stream=~"…"``: the regular expressions Grafana writes, matched in linear time.

Grafana writes a multi-value variable as ``(a|b)`` (each value escaped: ``web\\.eu``) and
"All" as ``.*`` or the alternation of every value. Matching is anchored at both ends, as
in Prometheus. The subset read here is RE2's for what it covers: literals and ``\\``-escapes,
``.``, classes ``[a-z_]`` / ``[^…]``, ``\\d \\w \\s``, groups ``(…)``/``(?:…)``, ``|`` and the
quantifiers ``* + ?``; a leading ``^`` and trailing ``$`` are the anchors already implied.

The expression comes from the network, so it is never handed to a backtracking engine:
:func:`compile` builds a tree and :meth:`Pattern.fullmatch` moves a *set of positions* through
it (Thompson's construction, without the automaton), each (piece of the
pattern, position) pair worked out once: at most ``O(len(pattern) · len(name)²)`` steps
whatever the pattern — stream names are ≤ 64 characters.

Tested by: tests/app/test_promql_regex_times.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

__all__ = ["BadRegex", "Pattern", "compile"]

MAX_PATTERN = 4096
_MAX_DEPTH = 32


class BadRegex(ValueError):
    pass


_CLASSES: dict[str, Callable[[str], bool]] = {
    "d": str.isdigit,
    "w": lambda c: c.isalnum() or c == "_",
    "s": str.isspace,
}


@dataclass(frozen=True)
class _Char:
    test: Callable[[str], bool]


@dataclass(frozen=True)
class _Seq:
    atoms: tuple


@dataclass(frozen=True)
class _Alt:
    options: tuple


@dataclass(frozen=True)
class _Repeat:
    node: object
    least: int  # 0 or 1
    most: int | None  # 1 or None (unbounded)


class _Reader:
    def __init__(self, text: str):
        self.text, self.i, self.depth = text, 0, 0

    def fail(self, message: str):
        raise BadRegex(f"regex {self.text!r} at {self.i}: {message}")

    def peek(self) -> str:
        return self.text[self.i] if self.i < len(self.text) else ""

    def alternation(self):
        options = [self.sequence()]
        while self.peek() == "|":
            self.i += 1
            options.append(self.sequence())
        return options[0] if len(options) == 1 else _Alt(tuple(options))

    def sequence(self):
        atoms = []
        while self.peek() not in ("", "|", ")"):
            atom = self.atom()
            q = self.peek()
            if q in ("*", "+", "?"):
                self.i += 1
                atom = _Repeat(atom, 1 if q == "+" else 0, 1 if q == "?" else None)
                if self.peek() in ("*", "+", "?"):
                    self.fail("a quantifier after a quantifier is not supported")
            elif q == "{":
                self.fail("counted repetition {m,n} is not supported (use * + ?)")
            atoms.append(atom)
        return atoms[0] if len(atoms) == 1 else _Seq(tuple(atoms))

    def atom(self):
        c = self.peek()
        if c == "(":
            self.i += 1
            if self.text.startswith("?:", self.i):
                self.i += 2
            elif self.peek() == "?":
                self.fail("only (…) and (?:…) groups are supported")
            self.depth += 1
            if self.depth > _MAX_DEPTH:
                self.fail("groups nested too deeply")
            inner = self.alternation()
            if self.peek() != ")":
                self.fail("missing )")
            self.i += 1
            self.depth -= 1
            return inner
        if c in ("*", "+", "?"):
            self.fail(f"nothing to repeat before {c}")
        if c in ("^", "$"):
            self.fail(f"{c} is supported only at the start (^) or end ($): matches are anchored")
        self.i += 1
        if c == ".":
            return _Char(lambda ch: ch != "\n")
        if c == "[":
            return self.char_class()
        if c == "\\":
            return _Char(self.escape())
        return _Char(c.__eq__)

    def escape(self) -> Callable[[str], bool]:
        e = self.peek()
        if not e:
            self.fail("trailing backslash")
        self.i += 1
        if e in _CLASSES:
            return _CLASSES[e]
        if e.isalnum():
            self.fail(f"escape \\{e} is not supported")
        return e.__eq__  # an escaped punctuation character stands for itself

    def char_class(self) -> _Char:
        negate = self.peek() == "^"
        if negate:
            self.i += 1
        tests, first = [], True
        while True:
            c = self.peek()
            if not c:
                self.fail("missing ]")
            if c == "]" and not first:
                self.i += 1
                break
            first = False
            self.i += 1
            if c == "\\":
                test = self.escape()
                tests.append(test)
                continue
            if self.peek() == "-" and self.text[self.i + 1 : self.i + 2] not in ("", "]"):
                hi = self.text[self.i + 1]
                if hi == "\\":
                    self.fail("an escaped class end is not supported")
                if hi < c:
                    self.fail(f"invalid class range {c}-{hi}")
                self.i += 2
                tests.append(lambda ch, lo=c, hi=hi: lo <= ch <= hi)
            else:
                tests.append(c.__eq__)
        if negate:
            return _Char(lambda ch: ch != "\n" and not any(t(ch) for t in tests))
        return _Char(lambda ch: any(t(ch) for t in tests))


class _Run:
    """The positions each node can end at from each start, in one text: memoized per
    (node, start), so every pair is worked out once, however the groups nest."""

    def __init__(self, text: str):
        self.text, self.memo = text, {}

    def ends(self, node, p: int) -> frozenset[int]:
        key = (id(node), p)
        found = self.memo.get(key)
        if found is None:
            found = self.memo[key] = self._ends(node, p)
        return found

    def _ends(self, node, p: int) -> frozenset[int]:
        if isinstance(node, _Char):
            return frozenset((p + 1,)) if p < len(self.text) and node.test(self.text[p]) else frozenset()
        if isinstance(node, _Seq):
            here = frozenset((p,))
            for atom in node.atoms:
                here = frozenset().union(*(self.ends(atom, q) for q in here))
            return here
        if isinstance(node, _Alt):
            return frozenset().union(*(self.ends(o, p) for o in node.options))
        once = self.ends(node.node, p)
        if node.most == 1:  # x?
            return once | {p}
        reached, work = set(once), list(once)  # x+ ; x* adds p itself
        while work:
            for r in self.ends(node.node, work.pop()):
                if r not in reached:
                    reached.add(r)
                    work.append(r)
        return frozenset(reached | {p} if node.least == 0 else reached)


@dataclass(frozen=True)
class Pattern:
    source: str
    tree: object

    def fullmatch(self, text: str) -> bool:
        return len(text) in _Run(text).ends(self.tree, 0)


def compile(source: str) -> Pattern:
    """The pattern, or :class:`BadRegex` saying what in it is not supported."""
    if len(source) > MAX_PATTERN:
        raise BadRegex(f"regex longer than {MAX_PATTERN} characters")
    body = source[1:] if source.startswith("^") else source
    if body.endswith("$") and not body.endswith("\\$"):
        body = body[:-1]
    reader = _Reader(body)
    tree = reader.alternation()
    if reader.i != len(body):
        reader.fail("unbalanced )")
    return Pattern(source, tree)
