"""Ganeti's query language (`ganeti.qlang`): a filter's text, as `gnt-* list --filter` and
herder's lists take it, parsed into the list form Ganeti's `/2/query` takes as `qfilter`
(`["&", ["=~", "name", "^web"], [">", "pinst_cnt", 0]]`).

The grammar is Ganeti's, built with the same parsing library (pyparsing, pinned to the
version Debian's Ganeti 3.0.2 runs with), so a filter parses to the same list, or fails with
the same words, as in Ganeti: conditions `FIELD`, `FIELD OP VALUE` (`==`, `=`, `!=`, `<`,
`<=`, `>`, `>=`), `VALUE in FIELD`, `VALUE not in FIELD`, `FIELD =~ /REGEXP/FLAGS` (also
`m/../`, `#..#`, `^..^`, `|..|`; flags `i` and `s`), `FIELD !~ /REGEXP/`, `FIELD =* "GLOB"`,
`FIELD !* "GLOB"`, combined with `not`, `and`, `or` and parentheses; values are integers or
quoted texts.

One difference (docs/compat.md): Ganeti reads any word right after a regular expression as
its flags, so `name =~ /^web/ and pinst_cnt > 0` fails there ("Unknown regular expression
flags: 'and'"); herder reads `and` and `or` there as the operators they are (in Ganeti the
same filter needs parentheses: `(name =~ /^web/) and ...`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from functools import cache

import pyparsing as pyp

from herder.core.errors import HerderError
from herder.core.jsonvalue import JsonValue

# Ganeti's operators (constants.QLANG_OP_*)
OP_OR = "|"
OP_AND = "&"
OP_NOT = "!"
OP_TRUE = "?"
OP_EQUAL = "=="
OP_EQUAL_LEGACY = "="
OP_NOT_EQUAL = "!="
OP_LT = "<"
OP_LE = "<="
OP_GT = ">"
OP_GE = ">="
OP_REGEXP = "=~"
OP_CONTAINS = "=[]"

# a name argument holding one of these is a filter (constants.QLANG_FILTER_DETECTION_CHARS);
# one holding a glob character a pattern (QLANG_GLOB_DETECTION_CHARS)
FILTER_DETECTION_CHARS = frozenset("\t\n\v\f\r !\"'()/<=>\\~")
GLOB_DETECTION_CHARS = frozenset("*?")

REGEXP_DELIMITERS = "/#^|"
REGEXP_FLAGS = frozenset("si")

Filter = list[JsonValue]


class QueryFilterParseError(HerderError):
    """A filter's text is not Ganeti's query language (Ganeti's message)."""


def glob_pattern(pattern: str) -> str:
    """A DNS name glob (`*.site`: `*` and `?` within one label) as a regular expression
    anchored at the name's start, as Ganeti's `utils.DnsNameGlobPattern`."""
    def part(match: re.Match[str]) -> str:
        text = match.group(0)
        if text == "*":
            return "[^.]*"
        if text == "?":
            return "[^.]"
        return re.escape(text)

    return "^" + re.sub(r"\*|\?|[^*?]*", part, pattern) + r"(\..*)?$"


def _logic(op: str) -> Callable[[pyp.ParseResults], object]:
    def combine(tokens: pyp.ParseResults) -> object:
        operands = tokens[0]
        if len(operands) == 1:
            return operands[0]
        return [[op, *operands.as_list()]]

    return combine


def _regexp(_text: str, loc: int, tokens: pyp.ParseResults) -> list[str]:
    regexp, flags = tokens[0]
    unknown = frozenset(flags) - REGEXP_FLAGS
    if unknown:
        raise pyp.ParseFatalException(
            f"Unknown regular expression flags: '{''.join(sorted(unknown))}'", loc)
    pattern = (f"(?{''.join(sorted(flags))})" if flags else "") + regexp
    try:
        re.compile(pattern)
    except re.error as err:
        raise pyp.ParseFatalException(f"Invalid regular expression ({err})", loc) from None
    return [pattern]


@cache
def parser() -> pyp.ParserElement:
    """The filter grammar (Ganeti's `qlang.BuildFilterParser`), built once."""
    # Packrat parsing (pyparsing's memo of each element's result at each position; the parse
    # actions are pure, so the results are the same): without it the nested alternatives of
    # `infix_notation` are tried again at every level, 0.1-0.2 s for a filter of a few
    # conditions (issue 33: the comparison with Ganeti's parser took 33 s of the suite).
    pyp.ParserElement.enable_packrat()
    field_name = pyp.Word(pyp.alphas, pyp.alphanums + "_/.")
    number = pyp.Combine(pyp.Optional(pyp.Word("-+", exact=1)) + pyp.Word(pyp.nums))
    number.set_parse_action(lambda tokens: int(tokens[0]))
    quoted = pyp.quoted_string.copy().set_parse_action(pyp.remove_quotes)
    value = number | quoted

    true_cond = field_name.copy().set_parse_action(lambda tokens: [[OP_TRUE, tokens[0]]])
    binary_ops = {"==": OP_EQUAL, "=": OP_EQUAL, "!=": OP_NOT_EQUAL, "<": OP_LT, "<=": OP_LE,
                  ">": OP_GT, ">=": OP_GE}
    binary_cond = (field_name + pyp.one_of(list(binary_ops)) + value).set_parse_action(
        lambda tokens: [[binary_ops[tokens[1]], tokens[0], tokens[2]]])
    in_cond = (value + pyp.Suppress("in") + field_name).set_parse_action(
        lambda tokens: [[OP_CONTAINS, tokens[1], tokens[0]]])
    not_in_cond = (value + pyp.Suppress("not") + pyp.Suppress("in") + field_name
                   ).set_parse_action(lambda tokens: [[OP_NOT, [OP_CONTAINS, tokens[1],
                                                                tokens[0]]]])
    # herder's one change: a following `and`/`or` is never taken for the flags
    flags = pyp.Optional(~(pyp.Keyword("and") | pyp.Keyword("or")) + pyp.Word(pyp.alphas),
                         default="")
    regexp = pyp.Group(pyp.Optional("m").suppress()
                       + pyp.MatchFirst([pyp.QuotedString(delimiter, esc_char="\\")
                                         for delimiter in REGEXP_DELIMITERS])
                       + flags).set_parse_action(_regexp)
    regexp_cond = (field_name + pyp.Suppress("=~") + regexp).set_parse_action(
        lambda tokens: [[OP_REGEXP, tokens[0], tokens[1]]])
    not_regexp_cond = (field_name + pyp.Suppress("!~") + regexp).set_parse_action(
        lambda tokens: [[OP_NOT, [OP_REGEXP, tokens[0], tokens[1]]]])
    glob_cond = (field_name + pyp.Suppress("=*") + quoted).set_parse_action(
        lambda tokens: [[OP_REGEXP, tokens[0], glob_pattern(tokens[1])]])
    not_glob_cond = (field_name + pyp.Suppress("!*") + quoted).set_parse_action(
        lambda tokens: [[OP_NOT, [OP_REGEXP, tokens[0], glob_pattern(tokens[1])]]])

    condition = (binary_cond ^ true_cond ^ in_cond ^ not_in_cond ^ regexp_cond
                 ^ not_regexp_cond ^ glob_cond ^ not_glob_cond)
    expression = pyp.infix_notation(condition, [
        (pyp.Keyword("not").suppress(), 1, pyp.OpAssoc.RIGHT,
         lambda tokens: [[OP_NOT, tokens[0][0]]]),
        (pyp.Keyword("and").suppress(), 2, pyp.OpAssoc.LEFT, _logic(OP_AND)),
        (pyp.Keyword("or").suppress(), 2, pyp.OpAssoc.LEFT, _logic(OP_OR)),
    ])
    # the whole text (Ganeti's StringStart() + ... + StringEnd(): `parse_all`)
    expression.parse_with_tabs()
    return expression


def parse(text: str) -> Filter:
    """The filter `text` says (Ganeti's `qlang.ParseFilter`)."""
    try:
        result: Filter = parser().parse_string(text, parse_all=True)[0]
    except pyp.ParseBaseException as err:
        raise QueryFilterParseError(f"Failed to parse query filter '{text}': {err}") from None
    return result


def simple_filter(field: str, values: Sequence[str]) -> Filter | None:
    """`field` equal to one of `values` (Ganeti's `qlang.MakeSimpleFilter`); None: no values."""
    if not values:
        return None
    return [OP_OR, *([OP_EQUAL, field, value] for value in values)]


def _name_part(field: str, text: str, numeric: bool) -> Filter:
    if numeric:
        try:
            return [OP_EQUAL, field, int(text)]
        except ValueError as err:
            raise QueryFilterParseError(f"Invalid job ID passed: {err}") from None
    if frozenset(text) & GLOB_DETECTION_CHARS:
        return [OP_REGEXP, field, glob_pattern(text)]
    return [OP_EQUAL, field, text]


def make_filter(args: Sequence[str], force_filter: bool, field: str = "name",
                numeric: bool = False) -> Filter | None:
    """The filter of a list's arguments (Ganeti's `qlang.MakeFilter`): with `force_filter`, or
    one argument that looks like one, the argument is a filter's text; otherwise names
    (globs: `*.site`) of `field`; None when there are none."""
    if force_filter or (len(args) == 1 and frozenset(args[0]) & FILTER_DETECTION_CHARS):
        if len(args) != 1:
            raise QueryFilterParseError("Exactly one argument must be given as a filter")
        return parse(args[0])
    if args:
        return [OP_OR, *(_name_part(field, arg, numeric) for arg in args)]
    return None
