"""A seeded differential fuzz of the Aurora DSQL parser: the JVM against the core.

Valid records of every DSQL kind (the reference's ``full`` insert, update and delete, ``chunked``
main records naming ``chunked.before`` and/or ``chunked.after``, ``fragment`` records, and some
of ``cdc_demo.dsql_stream``'s generated deliveries) are mutated with ``random.Random(SEED)``:
fields deleted, set to every JSON type, keys duplicated (the core's ``json.loads`` keeps the
last), enum values recased, integers made huge, negative, fractional or decimal strings, images
nested deep or not objects at all, names given unicode, escapes and lone surrogates, the text
given trailing content, a BOM, other whitespace, invalid UTF-8, ``NaN`` / ``Infinity`` and
number literals around the length limit. Every record goes through
``spark_jobs.parse.parse_records`` in one Spark pass and through the core parser
(``airflow_cdc.core.formats.parser_for("dsql")``, the specification); their views
(``tests.spark.test_parse``) must be equal, with the images compared by exact value (a number
keeps its digits, ``true`` is not ``1``).

The record's bytes are what the JVM parses; the core parses their strict UTF-8 decoding, and
bytes that are not UTF-8 are ``invalid_utf8`` (as ``spark_jobs.parse.parse_with_core`` holds
the core's records to). One record that makes the JVM parse raise fails the whole pass (and in
a job, the whole batch): the test then looks for the records that do, parsing the ones that
hold the value the error names one by one, and reports each as a ``crash``.

The differences allowed (:func:`documented`), each only where the record shows its cause: a
zero-fraction number (``3.0``) in an integer field of the envelope reads as the integer in
the JVM; what the core takes but a BIGINT cannot hold (a CRC past 64 bits, a ``ts_ns`` of more
than 20 digits) the JVM quarantines as ``invalid_chunked`` / ``invalid_sequence`` (it checks
the sequence's width first); and what Spark's JSON reader imposes (``spark_jobs/values.py``):
an integer past 38 digits is a DOUBLE in a VARIANT (an envelope integer is then no integer,
and an image holds the double), a number literal's 1,000-character limit counts only its
digits, and the core's reader gives up before 1,000 levels of nesting.

It found, and the commit that added it mended: a decimal string past 38 digits in an
envelope integer failed the whole batch (a plain cast), ``NaN`` literals and lone surrogate
escapes taken by the core, bytes that are not UTF-8 read by the JVM with replacement
characters, a ``ts_ns`` of ``"-0"`` read as the sequence ``-0``, and images nested near the
reader's limit overflowing a task thread's stack when read (a fatal error).
"""

from __future__ import annotations

import json
import math
import random
import re
import reprlib
import string
import sys
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import pytest

from airflow_cdc.core.formats.common import MAX_FRAGMENTS
from airflow_cdc.core.jsontext import JsonNumber
from cdc_demo.dsql_stream import generate
from tests.core.test_dsql_format import CHUNKED, DELETE_RECORD, INSERT
from tests.spark.test_parse import core_view, jvm_view, parsed_frame

pytestmark = [pytest.mark.spark, pytest.mark.slow]

SEED = 0x0D5C1
RANDOM_CASES = 2400
# Passes the test may spend finding the records that make the JVM parse raise.
ISOLATION_ROUNDS = 20

# --- JSON trees that can say what json.dumps cannot -----------------------------------------


class Obj:
    """A JSON object as its list of [key, value] members: keys may repeat."""

    def __init__(self, pairs: list[tuple[str, Any]] | None = None) -> None:
        self.pairs: list[list[Any]] = [[k, v] for k, v in (pairs or [])]

    def get(self, key: str) -> Any:
        found = [v for k, v in self.pairs if k == key]
        return found[-1] if found else None

    def set(self, key: str, value: Any) -> None:
        for pair in self.pairs:
            if pair[0] == key:
                pair[1] = value
                return
        self.pairs.append([key, value])


@dataclass(frozen=True)
class Raw:
    """A literal token written as it is (``NaN``, ``1e400``, a 1,000-digit number...);
    ``twin`` is the literal the JVM is documented to read it as, where it differs."""

    text: str
    twin: str | None = None


def clone(node: Any) -> Any:
    """A deep copy of a tree, without recursion (trees nest deeper than the recursion limit)."""
    holder = [node]
    stack: list[tuple[Any, Any]] = [(holder, 0)]
    while stack:
        parent, slot = stack.pop()
        item = parent[slot]
        if isinstance(item, Obj):
            copied = Obj()
            copied.pairs = [list(pair) for pair in item.pairs]
            parent[slot] = copied
            stack.extend((pair, 1) for pair in copied.pairs)
        elif isinstance(item, list):
            parent[slot] = copied_list = list(item)
            stack.extend((copied_list, n) for n in range(len(copied_list)))
    return holder[0]


def tree(text: str) -> Any:
    return json.loads(text, object_pairs_hook=Obj)


@dataclass(frozen=True)
class Style:
    """How a tree is written: separators (JSON whitespace), letters written as ``\\u``
    escapes, non-ASCII characters escaped or raw, ``/`` as ``\\/``."""

    comma: str = ", "
    colon: str = ": "
    escape_letters: float = 0.0
    ascii_only: bool = False
    escape_slash: bool = False
    seed: int = 0


def dump(node: Any, style: Style = Style(), *, twin: bool = False) -> str:
    rng = random.Random(style.seed)
    out: list[str] = []
    # Iterative: trees nest deeper than Python's recursion limit.
    stack: list[Any] = [("value", node)]
    while stack:
        kind, item = stack.pop()
        if kind == "text":
            out.append(item)
            continue
        if isinstance(item, Obj):
            parts: list[Any] = [("text", "{")]
            for n, (key, value) in enumerate(item.pairs):
                if n:
                    parts.append(("text", style.comma))
                parts += [("text", _string(key, style, rng)), ("text", style.colon)]
                parts.append(("value", value))
            parts.append(("text", "}"))
            stack.extend(reversed(parts))
        elif isinstance(item, list):
            parts = [("text", "[")]
            for n, value in enumerate(item):
                if n:
                    parts.append(("text", style.comma))
                parts.append(("value", value))
            parts.append(("text", "]"))
            stack.extend(reversed(parts))
        elif isinstance(item, Raw):
            out.append(item.twin if twin and item.twin is not None else item.text)
        elif isinstance(item, str):
            out.append(_string(item, style, rng))
        else:
            out.append(json.dumps(item))
    return "".join(out)


def _string(text: str, style: Style, rng: random.Random) -> str:
    body = json.dumps(text, ensure_ascii=style.ascii_only)[1:-1]
    if style.escape_slash:
        body = body.replace("/", "\\/")
    if style.escape_letters:
        body = "".join(
            f"\\u{ord(c):04x}"
            if c in string.ascii_letters and rng.random() < style.escape_letters
            else c
            for c in body
        )
    return f'"{body}"'


def nested(depth: int, leaf: Any, rng: random.Random) -> Any:
    """``leaf`` inside ``depth`` arrays and objects (a tree whose JSON nests ``depth + 1``)."""
    node = leaf
    for _ in range(depth):
        node = [node] if rng.random() < 0.5 else Obj([("k", node)])
    return node


# --- Valid records of every kind ---------------------------------------------------------


def _ref(chunk_id: str, total: int, crc: str) -> Obj:
    return Obj([("chunk_id", chunk_id), ("total_fragments", total), ("crc32c", crc)])


def seeds() -> list[tuple[str, Any]]:
    """(kind, tree) of valid records: the reference's examples, made variants, generated ones."""
    insert, delete, chunked = tree(INSERT), tree(DELETE_RECORD), tree(CHUNKED)
    update = tree(INSERT.replace('"op": "c"', '"op": "u"'))
    unknown_op = tree(INSERT.replace('"op": "c"', '"op": "x"'))
    chunked_delete = tree(CHUNKED.replace('"op": "c"', '"op": "d"'))
    chunked_delete.set("chunked", Obj([("before", _ref("chunk-b", 2, "4021"))]))
    chunked_both = tree(CHUNKED.replace('"op": "c"', '"op": "u"'))
    chunked_both.set(
        "chunked",
        Obj([("before", _ref("chunk-b", 1, "7")), ("after", _ref("chunk-a", 4, "4294967295"))]),
    )
    chunked_inline_before = tree(CHUNKED.replace('"op": "c"', '"op": "u"'))
    chunked_inline_before.set("before", Obj([("order_id", 1001), ("item_id", 42)]))
    fragment = tree(
        '{ "type": "fragment", "chunk_id": "chunk-id", "index": 0, "data": "partial-JSON-text" }'
    )
    made = [
        ("full", insert),
        ("full", update),
        ("full", delete),
        ("full", unknown_op),
        ("chunked", chunked),
        ("chunked", chunked_delete),
        ("chunked", chunked_both),
        ("chunked", chunked_inline_before),
        ("fragment", fragment),
    ]
    stream = generate(60, seed=11, chunk_threshold=700, fragment_bytes=250, bad_input=False)
    picked: dict[str, int] = defaultdict(int)
    for text in stream.deliveries:
        doc = tree(text)
        kind = doc.get("type")
        if picked[kind] < 4:
            picked[kind] += 1
            made.append((kind, doc))
    assert {kind for kind, _ in made} == {"full", "chunked", "fragment"}
    return made


# --- Mutations ---------------------------------------------------------------------------

JSON_VALUES: list[Any] = [
    None,
    True,
    False,
    0,
    -1,
    Raw("1.5"),
    Raw("1e400"),
    2**63,
    2**64,
    "",
    "x",
    [],
    Obj(),
    Raw("-0"),
    Raw("NaN"),
    Raw("Infinity"),
    Raw("-Infinity"),
    Obj([("a", 1)]),
    ["full"],
]
# What an integer field of the envelope (ts_ns, index, total_fragments, crc32c) may be given.
INTEGERS: list[Any] = [
    0,
    1,
    2,
    -1,
    -(2**63),
    2**31,
    2**53 + 1,
    2**63 - 1,
    2**63,
    2**64,
    10**19,
    10**20 - 1,
    10**20,
    10**38 - 1,
    10**38,
    10**40,
    123456789012345678901234567890123456789012,
    MAX_FRAGMENTS - 1,
    MAX_FRAGMENTS,
    MAX_FRAGMENTS + 1,
    Raw("-0"),
    Raw("1.5"),
    Raw("-0.5"),
    Raw("1e3"),
    Raw("1E+2"),
    Raw("0.0e5"),
    Raw("3.0", twin="3"),
    Raw("-0.0", twin="0"),
    Raw("1705318200000000000.000", twin="1705318200000000000"),
    Raw("1" * 60),
    Raw("-" + "1" * 60),
    Raw("1" * 1000),
    Raw("1" * 1001),
    "0",
    "7",
    "-0",
    "-00",
    "-5",
    "--5",
    "+5",
    " 5",
    "5 ",
    "5\n",
    "5\r",
    "5\r\n",
    "-5\n",
    "\n5",
    "٣",
    "0x10",
    "1e3",
    "1.0",
    "0" * 30 + "5",
    "-" + "0" * 30,
    "1" * 21,
    str(2**64),
    str(-(2**63) - 1),
]
# Decimal strings that only the sweeps give (random mutants draw from INTEGERS alone): ones
# that end in a line terminator Java's regex ``$`` admits, and ones past DECIMAL(38)'s digits.
# Where one makes the JVM parse raise, each record that holds it costs a Spark job of its own.
SWEPT_INTEGERS: list[Any] = [
    "5\u0085",
    "5\u2028",
    "5\u2029",
    "1" * 39,
    "-" + "1" * 39,
    "-" + "1" * 45,
    "1" * 5000,
]
INTEGER_FIELDS = ("ts_ns", "index", "total_fragments", "crc32c")
ENUM_CASES: list[Callable[[str], str]] = [
    str.upper,
    str.title,
    str.swapcase,
    lambda s: s[:1] + s[1:].upper(),
    lambda s: f" {s}",
    lambda s: f"{s} ",
    lambda s: f"{s}\u0000",
    lambda s: s.replace("u", "\u0443").replace("c", "\u0441"),  # Cyrillic look-alikes
]
NAMES = [
    "zürich",
    "東京",
    "🚀",
    'a"b',
    "a\\b",
    "a/b",
    "a.b",
    "$",
    "[0]",
    "\u0000",
    "\u001f",
    "\u007f",
    "\ufeff",
    "\u2028",
    "e\u0301",
    "\u202eevil",
    "\ud83d\ude80",
    "\ud800",
    "\udc00",
    "x\ud800y",
    "\ude80\ud83d",
    "",
    " ",
    "TYPE",
    "type",
    "op",
    "source",
]
NUMBER_LITERALS = [
    "1.0",
    "-0",
    "-0.0",
    "1E+2",
    "1e-7",
    "0.1",
    "1e400",
    "-1e400",
    "4.9e-324",
    "1e-400",
    "NaN",
    "Infinity",
    "-Infinity",
    "12345678901234567890123456789012345678",
    "123456789012345678901234567890123456789",
    "0.12345678901234567890123456789012345678",
    "0.123456789012345678901234567890123456789",
    "1.2345678901234567890123e5",
    "9" * 999,
    "9" * 1000,
    "9" * 1001,
    "-" + "9" * 999,
    "-" + "9" * 1000,
    "1." + "5" * 998,
    "1." + "5" * 999,
]
TRAILING = [
    " ",
    "\n",
    "\r\n\t",
    " x",
    "}",
    "]",
    ",",
    "\u0000",
    " {}",
    " null",
    " //c",
    " /*c*/",
    "\f",
    "\v",
    "\u00a0",
    "\u2028",
    "\u3000",
    "\ufeff",
]
LEADING = ["\ufeff", " \t\r\n", "\f", "\v", "\u00a0", "\u2028", "\u0000", "//c\n", "/*c*/"]
BAD_BYTES = [
    b"\xff",
    b"\xfe",
    b"\x80",
    b"\xc3",
    b"\xc0\xaf",
    b"\xe0\x80\xaf",
    b"\xed\xa0\x80",
    b"\xed\xbf\xbf",
    b"\xf4\x90\x80\x80",
]
INSERTED_WHITESPACE = ["\t", "\n", "\r", "\f", "\v", "\u00a0", "\u2028", "\u3000", "\u0000"]
DEPTHS = [1, 10, 100, 400, 800, 900, 950, 990, 995, 996, 997, 998, 999, 1000, 1001, 1500]


_REFS = tuple(
    f"chunked.{image}{suffix}"
    for image in ("before", "after")
    for suffix in ("", ".chunk_id", ".total_fragments", ".crc32c")
)
_CHANGE = ("type", "op", "source", "source.ts_ns", "source.schema", "source.table")
READ_FIELDS = {
    "full": (*_CHANGE, "before", "after", "chunked"),
    "chunked": (*_CHANGE, "before", "after", "chunked", *_REFS),
    "fragment": ("type", "chunk_id", "index", "data"),
}


def _parent(doc: Any, path: str) -> tuple[Any, str]:
    *parents, last = path.split(".")
    node = doc
    for part in parents:
        node = node.get(part) if isinstance(node, Obj) else None
    return node, last


def place(doc: Any, path: str, value: Any) -> None:
    """Set the member at ``path`` (dotted keys from the record), adding it (and the objects
    on its way) where it is missing."""
    *parents, last = path.split(".")
    node = doc
    for part in parents:
        if not isinstance(node.get(part), Obj):
            node.set(part, Obj())
        node = node.get(part)
    node.set(last, value)


def remove(doc: Any, path: str) -> bool:
    node, last = _parent(doc, path)
    if not isinstance(node, Obj) or all(k != last for k, _ in node.pairs):
        return False
    node.pairs = [pair for pair in node.pairs if pair[0] != last]
    return True


@dataclass
class Case:
    labels: list[str]
    payload: bytes
    twin: bytes | None = None  # the payload the JVM is documented to read it as

    @property
    def text(self) -> str:
        return self.payload.decode("utf-8", "backslashreplace")


def positions(node: Any, path: str = "$") -> Iterator[tuple[Any, int, str]]:
    """(container, index, path) of every member of every object and array in ``node``,
    outermost first (iterative: trees nest deep)."""
    stack = [(node, path)]
    while stack:
        item, where = stack.pop()
        if isinstance(item, Obj):
            for n, (key, value) in enumerate(item.pairs):
                yield item, n, f"{where}.{key}"
                stack.append((value, f"{where}.{key}"))
        elif isinstance(item, list):
            for n, value in enumerate(item):
                yield item, n, f"{where}[{n}]"
                stack.append((value, f"{where}[{n}]"))


def _get(container: Any, n: int) -> Any:
    return container.pairs[n][1] if isinstance(container, Obj) else container[n]


def _put(container: Any, n: int, value: Any) -> None:
    if isinstance(container, Obj):
        container.pairs[n][1] = value
    else:
        container[n] = value


def _key(container: Any, n: int) -> str | None:
    return container.pairs[n][0] if isinstance(container, Obj) else None


def _named(doc: Any, names: tuple[str, ...]) -> list[tuple[Any, int, str]]:
    return [p for p in positions(doc) if _key(p[0], p[1]) in names]


def _envelope(doc: Any) -> list[tuple[Any, int, str]]:
    """Positions of the fields the parsers read (not inside the images)."""
    return [
        p
        for p in positions(doc)
        if not p[2].startswith(("$.before.", "$.after.", "$.before[", "$.after["))
    ]


def _image_members(doc: Any) -> list[tuple[Any, int, str]]:
    return [
        p
        for p in positions(doc)
        if p[2].startswith(("$.before.", "$.after."))
        and isinstance(doc.get(p[2].split(".")[1]), Obj)
    ]


class Mutator:
    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def pick(self, items: list[Any]) -> Any:
        if not items:
            raise LookupError("nothing to mutate")
        return items[self.rng.randrange(len(items))]

    def value(self) -> Any:
        return clone(self.pick(JSON_VALUES))

    # Tree mutations: each changes ``doc`` in place and names what it did.
    def delete(self, doc: Any) -> str:
        objs = [p for p in _envelope(doc) if isinstance(p[0], Obj)]
        container, n, path = self.pick(objs)
        del container.pairs[n]
        return f"delete {path}"

    def set_type(self, doc: Any) -> str:
        container, n, path = self.pick(_envelope(doc))
        value = self.value()
        _put(container, n, value)
        return f"set {path}={dump(value)[:20]}"

    def duplicate_key(self, doc: Any) -> str:
        objs = [p for p in positions(doc) if isinstance(p[0], Obj)]
        container, n, path = self.pick(objs)
        key, value = container.pairs[n]
        other = self.value() if self.rng.random() < 0.7 else clone(value)
        at = n + 1 if self.rng.random() < 0.5 else n  # the duplicate after (wins) or before
        container.pairs.insert(at, [key, other])
        return f"duplicate {path} {'last' if at > n else 'first'}={dump(other)[:20]}"

    def recase(self, doc: Any) -> str:
        targets = _named(doc, ("type", "op"))
        container, n, path = self.pick(targets)
        value = _get(container, n)
        if not isinstance(value, str):
            return "recase (not a string)"
        _put(container, n, self.pick(ENUM_CASES)(value))
        return f"recase {path}"

    def integer(self, doc: Any) -> str:
        targets = _named(doc, INTEGER_FIELDS)
        if not targets:
            return self.set_type(doc)
        container, n, path = self.pick(targets)
        value = self.pick(INTEGERS)
        _put(container, n, value)
        return f"integer {path}={str(value)[:20]!r}"

    def image(self, doc: Any) -> str:
        name = self.pick(["before", "after"])
        roll = self.rng.random()
        if roll < 0.3:  # not an object
            value = self.pick([None, 1, "x", [], [1], True, Raw("NaN"), Raw('"{}"')])
            doc.set(name, value)
            return f"image {name}={dump(value)}"
        if roll < 0.6:  # nested objects and arrays inside
            depth = self.pick(DEPTHS)
            image = doc.get(name) if isinstance(doc.get(name), Obj) else Obj()
            image.pairs.append(["deep", nested(depth, self.pick([1, "s", None, Obj()]), self.rng)])
            doc.set(name, image)
            return f"image {name} nested {depth}"
        image = doc.get(name) if isinstance(doc.get(name), Obj) else Obj([("id", 1)])
        literal = self.pick(NUMBER_LITERALS)
        image.pairs.append(["n", Raw(literal)])
        doc.set(name, image)
        return f"image {name} number {literal[:12]}({len(literal)})"

    def deep_envelope(self, doc: Any) -> str:
        container, n, path = self.pick(_envelope(doc))
        depth = self.pick(DEPTHS)
        _put(container, n, nested(depth, _get(container, n), self.rng))
        return f"nest {path} {depth}"

    def extra(self, doc: Any) -> str:
        objs = [doc] + [p for p in positions(doc) if isinstance(_get(p[0], p[1]), Obj)]
        target = self.pick(objs)
        target = target if isinstance(target, Obj) else _get(target[0], target[1])
        key = self.pick(["extra", "Type", "TYPE", "type ", "Op", "chunked", "before", *NAMES])
        target.pairs.insert(self.rng.randrange(len(target.pairs) + 1), [key, self.value()])
        return f"extra {key!r}"

    def name(self, doc: Any) -> str:
        names = ("schema", "table", "chunk_id", "data", "op", "type", "txId")
        targets = _named(doc, names) + _image_members(doc)
        container, n, path = self.pick(targets)
        text = self.pick(NAMES)
        if isinstance(container, Obj) and path.startswith(("$.before.", "$.after.")):
            container.pairs[n][0] = text  # a column name
            return f"column name {text!r}"
        value = _get(container, n)
        base = value if isinstance(value, str) else "v"
        _put(container, n, self.pick([text, base + text, text + base]))
        return f"name {path} {text!r}"

    def rename(self, doc: Any) -> str:
        container, n, path = self.pick([p for p in _envelope(doc) if isinstance(p[0], Obj)])
        key = container.pairs[n][0]
        container.pairs[n][0] = self.pick(
            [key.upper(), key + " ", "\ufeff" + key, key.replace("e", "\u0435"), key + "\u0000"]
        )
        return f"rename {path}"

    TREE = ("delete", "set_type", "duplicate_key", "recase", "integer", "image", "extra", "name")
    TREE_WEIGHTS = (3, 6, 3, 2, 5, 4, 2, 3)

    def mutate(self, doc: Any) -> list[str]:
        labels = []
        for _ in range(self.pick([1, 1, 1, 2, 2, 3])):
            if self.rng.random() < 0.06:
                kind = self.pick(["deep_envelope", "rename"])
            else:
                kind = self.rng.choices(self.TREE, self.TREE_WEIGHTS)[0]
            try:
                labels.append(getattr(self, kind)(doc))
            except LookupError:  # no member of that kind left: add one instead
                labels.append(self.extra(doc))
        return labels

    def style(self) -> Style:
        rng = self.rng
        return Style(
            comma=self.pick([", ", ",", ",\n  ", " ,\t", "\r\n,"]),
            colon=self.pick([": ", ":", " :\t", ":\n"]),
            escape_letters=self.pick([0.0, 0.0, 0.0, 0.3, 1.0]),
            ascii_only=rng.random() < 0.3,
            escape_slash=rng.random() < 0.2,
            seed=rng.getrandbits(32),
        )

    def text(self, text: str) -> tuple[str, str | None]:
        """A change to the written record, or none (most records)."""
        roll = self.rng.random()
        if roll < 0.70:
            return text, None
        if roll < 0.76:
            return text + self.pick(TRAILING), "trailing"
        if roll < 0.80:
            return self.pick(LEADING) + text, "leading"
        if roll < 0.86:  # a character between two tokens
            at = self.pick([i + 1 for i, c in enumerate(text) if c in ",:{["] or [0])
            return text[:at] + self.pick(INSERTED_WHITESPACE) + text[at:], "whitespace"
        if roll < 0.90:  # a raw control character inside a string
            quotes = [i + 1 for i, c in enumerate(text) if c == '"'] or [0]
            at = self.pick(quotes)
            return text[:at] + self.pick(["\u0001", "\t", "\n", "\u001f"]) + text[at:], "control"
        if roll < 0.94:  # a lenient JSON construct
            variants: list[Callable[[str], str]] = [
                lambda t: t.replace('"type"', "'type'", 1),
                lambda t: t.replace('"type"', "type", 1),
                lambda t: t.rstrip()[:-1] + ",}",
                lambda t: t.replace('"op"', '/* c */ "op"', 1),
                lambda t: t.replace(": 0", ": 00", 1).replace(": 1", ": +1", 1),
                lambda t: t.replace("null", "NULL", 1),
                lambda t: t.replace("true", "True", 1).replace('"index": 0', '"index": 0x0'),
            ]
            return self.pick(variants)(text), "lenient"
        if roll < 0.97:  # cut short
            return text[: self.rng.randrange(len(text))], "truncated"
        return text + self.pick([" ", "\n"]) + text, "two documents"

    def payload(self, text: str) -> tuple[bytes, str | None]:
        data = text.encode("utf-8", "surrogatepass")  # a raw lone surrogate: CESU bytes
        if self.rng.random() < 0.05:
            inside = [i + 1 for i, b in enumerate(data) if b == 0x22] or [0]
            at = self.pick(inside) if self.rng.random() < 0.8 else self.rng.randrange(len(data))
            return data[:at] + self.pick(BAD_BYTES) + data[at:], "bad utf-8"
        return data, None


def cases() -> list[Case]:
    rng = random.Random(SEED)
    mutator = Mutator(rng)
    made = seeds()
    out: list[Case] = []

    def add(labels: list[str], doc: Any, style: Style = Style()) -> None:
        text = dump(doc, style)
        twin = dump(doc, style, twin=True)
        data = text.encode("utf-8", "surrogatepass")
        out.append(
            Case(labels, data, twin.encode("utf-8", "surrogatepass") if twin != text else None)
        )

    # Each seed as it is, written in every style.
    for kind, doc in made:
        add([f"seed {kind}"], doc)
        add([f"seed {kind} styled"], doc, mutator.style())
    # Every field the parsers read deleted and set to each JSON type, in one record of each
    # kind; the integer fields of an insert, a chunked record naming both images and a
    # fragment given every integer, as a number or a decimal string.
    for kind, doc in [made[0], made[2], made[4], made[6], made[8]]:
        swept = any(doc is made[n][1] for n in (0, 6, 8))
        for path in READ_FIELDS[kind]:
            mutant = clone(doc)
            if remove(mutant, path):
                add([f"{kind}: delete {path}"], mutant)
            for value in JSON_VALUES:
                mutant = clone(doc)
                place(mutant, path, clone(value))
                add([f"{kind}: set {path}={dump(value)[:20]}"], mutant)
            if swept and path.rsplit(".", 1)[-1] in INTEGER_FIELDS:
                # The rare ones once per field: source.ts_ns of the insert, the fields of
                # chunked.after, the fragment's index.
                rare = kind != "chunked" or path.startswith("chunked.after.")
                for value in INTEGERS + (SWEPT_INTEGERS if rare else []):
                    mutant = clone(doc)
                    place(mutant, path, value)
                    add([f"{kind}: integer {path}={str(value)[:24]!r}"], mutant)
    # Random mutants.
    for _ in range(RANDOM_CASES):
        kind, doc = mutator.pick(made)
        mutant = clone(doc)
        labels = [f"{kind}: " + "; ".join(mutator.mutate(mutant))]
        style = mutator.style() if rng.random() < 0.5 else Style()
        text, change = mutator.text(dump(mutant, style))
        twin = dump(mutant, style, twin=True)
        data, broken = mutator.payload(text)
        labels += [x for x in (change, broken) if x]
        same_bytes = change is None and broken is None and twin != text
        out.append(
            Case(labels, data, twin.encode("utf-8", "surrogatepass") if same_bytes else None)
        )
    return out


# --- The two views ---------------------------------------------------------------------


def exact(value: Any) -> Any:
    """A view's value for comparison by exact value: numbers as Decimals (``1.0`` is ``1``,
    a 30-digit number keeps its digits), booleans apart from numbers, NaN equal to itself."""
    stack: list[Any] = []
    holder = [value]
    stack.append((holder, 0))
    while stack:
        parent, slot = stack.pop()
        item = parent[slot]
        if isinstance(item, bool):
            parent[slot] = ("bool", item)
        elif isinstance(item, JsonNumber):
            parent[slot] = ("number", Decimal(item.text))
        elif isinstance(item, float):
            parent[slot] = ("number", Decimal(repr(item))) if item == item else ("NaN",)
        elif isinstance(item, (int, Decimal)):
            parent[slot] = ("number", Decimal(item))
        elif isinstance(item, dict):
            copied = dict(item)
            parent[slot] = copied
            stack.extend((copied, key) for key in copied)
        elif isinstance(item, (list, tuple)):
            copied_list = list(item)
            parent[slot] = copied_list
            stack.extend((copied_list, n) for n in range(len(copied_list)))
    return holder[0]


def core_of(payload: bytes) -> dict[str, Any]:
    try:
        text = payload.decode("utf-8")
    except UnicodeDecodeError:
        return {"rtype": "error", "reason": "invalid_utf8"}
    view = core_view(text)
    for name in ("before", "after"):
        if name in view:
            view[name] = exact(view[name])
    return view


def _view(row: Any) -> dict[str, Any]:
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10_000))  # images nest as deep as the JVM takes them
    try:
        view = jvm_view(row)
        for name in ("before", "after"):
            if view.get(name) is not None:
                view[name] = exact(json.loads(row[name], parse_float=Decimal, parse_int=Decimal))
    finally:
        sys.setrecursionlimit(limit)
    return view


def _crash(err: Exception) -> dict[str, Any]:
    """The view of a record that makes the JVM parse raise: the error's class and message."""
    text = str(err)
    named = re.search(r"\[[A-Z_.]+\][^\n]*", text)
    return {"rtype": "crash", "error": (named[0] if named else text.strip())[:200]}


# The columns of the JVM's parse that its view reads.
VIEW_COLUMNS = (
    *("rtype", "reason", "chunk_id", "frag_index", "frag_data", "schema", "table", "op"),
    *("sequence", "commit_us", "before", "after"),
    *(
        f"{image}_{field}"
        for image in ("before", "after")
        for field in ("chunk_id", "total", "crc")
    ),
)


def one_by_one(spark: Any, payloads: list[bytes]) -> list[dict[str, Any]]:
    """Each record parsed in a Spark job of its own (a partition each, collected in the JVM):
    a record that makes the JVM parse raise gets a ``crash`` view, the others theirs."""
    from py4j.protocol import Py4JJavaError
    from pyspark.errors.exceptions.captured import CapturedException
    from pyspark.sql import functions as F

    parsed = parsed_frame(spark, payloads, slices=len(payloads))
    rows = parsed.select(F.to_json(F.struct(*VIEW_COLUMNS)))._jdf.toJavaRDD()
    gateway = spark.sparkContext._gateway
    views = []
    for n in range(len(payloads)):
        partition = gateway.new_array(gateway.jvm.int, 1)
        partition[0] = n
        try:
            [collected] = rows.collectPartitions(partition)
        except (CapturedException, Py4JJavaError) as err:  # a crash of the parse: a finding
            views.append(_crash(err))
            continue
        row = json.loads(collected.get(0).getString(0))
        views.append(_view(defaultdict(lambda: None, row)))  # to_json leaves nulls out
    return views


# The value a Spark error names: a cast of a string, or a number past DECIMAL(38).
_NAMED_VALUE = re.compile(
    r"The value '(?P<text>.*?)' of the type|The value (?P<number>-?[0-9]+) cannot be",
    re.DOTALL,
)


def suspects(err: Exception, payloads: list[bytes], among: list[int]) -> list[int]:
    """The records (of ``among``) that hold the value a failed pass's error names."""
    match = _NAMED_VALUE.search(str(err))
    if match is None:
        return []
    wanted = match["text"] if match["text"] is not None else match["number"]

    def holds(payload: bytes) -> bool:
        try:
            doc = json.loads(payload.decode("utf-8", "replace"), parse_constant=str)
        except (ValueError, RecursionError):
            return False
        stack = [doc]
        while stack:
            item = stack.pop()
            if isinstance(item, dict):
                stack.extend(item.values())
            elif isinstance(item, list):
                stack.extend(item)
            elif isinstance(item, (str, int)) and not isinstance(item, bool):
                text = str(item)
                if text == wanted or (match["number"] and _same_integer(text, wanted)):
                    return True
        return False

    return [n for n in among if holds(payloads[n])]


def _same_integer(text: str, digits: str) -> bool:
    """Whether ``text`` is a decimal string of the integer ``digits`` (compared as text:
    Python's int() takes no more than 4,300 digits)."""

    def canonical(value: str) -> str:
        sign, body = ("-", value[1:]) if value.startswith("-") else ("", value)
        body = body.lstrip("0")
        return sign + body if body else "0"

    return re.fullmatch(r"-?[0-9]+", text) is not None and canonical(text) == canonical(digits)


def jvm_of(spark: Any, payloads: list[bytes]) -> list[dict[str, Any]]:
    """The JVM's views of ``payloads``, in one Spark pass.

    A crash of the pass (one record that makes the JVM raise fails the whole batch) is a
    finding: the records that hold the value its error names are parsed one by one, the
    rest in one pass again, until a pass succeeds. Records left when the error names no
    value that a record holds (or after ``ISOLATION_ROUNDS``) get a ``crash`` view of it."""
    from pyspark.errors.exceptions.captured import CapturedException

    views: dict[int, dict[str, Any]] = {}
    remaining = list(range(len(payloads)))
    error: Exception | None = None
    for _ in range(ISOLATION_ROUNDS):
        try:
            chosen = [payloads[n] for n in remaining]
            rows = parsed_frame(spark, chosen).orderBy("record_id").collect()
        except CapturedException as err:  # a crash of the JVM parse is a finding
            error = err
            suspected = suspects(err, payloads, remaining)
            if not suspected:
                break
            alone = one_by_one(spark, [payloads[n] for n in suspected])
            views.update(zip(suspected, alone, strict=True))
            remaining = [n for n in remaining if n not in views]
            continue
        views.update(zip(remaining, (_view(row) for row in rows), strict=True))
        return [views[n] for n in range(len(payloads))]
    assert error is not None
    return [views.get(n, _crash(error)) for n in range(len(payloads))]


def documented(case: Case, core: dict[str, Any], jvm: dict[str, Any]) -> bool:
    """The differences ``tests/spark/test_parse.py`` asserts as intended, and those that
    Spark's JSON reader imposes (``spark_jobs/values.py`` names them), each where the record
    shows its cause."""
    if case.twin is not None and jvm == core_of(case.twin):
        return True  # a zero-fraction number read as the integer
    error = {"rtype": "error", "reason": "invalid_chunked"}
    crcs = [core.get(f"{n}_ref", (None, 0, 0))[2] for n in ("before", "after")]
    if core["rtype"] == "chunked" and jvm == error and any(abs(c) >= 2**63 for c in crcs):
        return True  # a CRC past 64 bits
    if core["rtype"] == "error" and jvm == {"rtype": "error", "reason": "invalid_sequence"}:
        return _wide_ts(case.payload)  # the JVM checks the sequence's width first
    if jvm == {"rtype": "error", "reason": "missing_field"} and _wide_envelope_integer(case):
        return True  # an integer past 38 digits is a DOUBLE in a VARIANT: not an integer
    if core == {"rtype": "error", "reason": "invalid_record"} and _LONG_NUMBER.search(case.text):
        return True  # a literal past 1,000 characters: the core counts its sign and point
    if core == {"rtype": "error", "reason": "malformed_json"} and _depth(case.text) > 900:
        return True  # the core's reader recurses, and gives up first
    return _variant_numbers(core, jvm)


# A number literal longer than the core's limit (``MAX_NUMBER_LENGTH``): Jackson, under
# Spark, counts only its digits, the core every character.
_LONG_NUMBER = re.compile(r"[-+.0-9eE]{1001,}")


def _wide_envelope_integer(case: Case) -> bool:
    """Whether an integer field of the envelope is a JSON number of more than 38 digits."""
    try:
        doc = json.loads(case.payload.decode("utf-8"), parse_constant=str)
    except (ValueError, RecursionError):
        return False
    if not isinstance(doc, dict):
        return False
    chunked = doc.get("chunked") if isinstance(doc.get("chunked"), dict) else {}
    source = doc.get("source") if isinstance(doc.get("source"), dict) else {}
    fields = [source.get("ts_ns"), doc.get("index")]
    for ref in (chunked.get("before"), chunked.get("after")):
        if isinstance(ref, dict):
            fields += [ref.get("total_fragments"), ref.get("crc32c")]
    return any(
        isinstance(v, int) and not isinstance(v, bool) and len(str(abs(v))) > 38 for v in fields
    )


def _depth(text: str) -> int:
    """How deep the text's arrays and objects nest (brackets outside strings)."""
    deepest = depth = 0
    inside = escaped = False
    for char in text:
        if inside:
            escaped = not escaped and char == "\\"
            inside = escaped or char != '"'
        elif char == '"':
            inside = True
        elif char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth -= 1
    return deepest


def _variant_numbers(core: dict[str, Any], jvm: dict[str, Any]) -> bool:
    """Whether the two agree but for image numbers that a VARIANT cannot hold as written
    (more than 38 digits, or past a double's range), which the JVM holds as doubles."""
    if core.get("rtype") not in ("change", "chunked") or core.keys() != jvm.keys():
        return False
    if any(core[k] != jvm[k] for k in core if k not in ("before", "after")):
        return False
    wide = False
    for name in ("before", "after"):
        pairs = [(core[name], jvm[name])]
        while pairs:
            want, have = pairs.pop()
            if isinstance(want, dict) and isinstance(have, dict) and want.keys() == have.keys():
                pairs.extend((want[k], have[k]) for k in want)
            elif isinstance(want, list) and isinstance(have, list) and len(want) == len(have):
                pairs.extend(zip(want, have, strict=True))
            elif want != have:
                if not (isinstance(want, tuple) and want[0] == "number"):
                    return False
                number = want[1]
                digits = len(number.as_tuple().digits)
                double = float(number)
                held = ("number", Decimal(repr(double))) if math.isfinite(double) else None
                infinite = "Infinity" if double > 0 else "-Infinity"
                if have != held and have != infinite:
                    return False
                wide = wide or digits > 38 or not math.isfinite(double) or have == held
    return wide


def _wide_ts(payload: bytes) -> bool:
    """Whether the record's source.ts_ns is an integer of more than 20 digits."""
    try:
        doc = json.loads(payload.decode("utf-8"))
        ts = doc["source"]["ts_ns"]
        digits = str(ts).lstrip("-").lstrip("0")
        return isinstance(ts, (int, str)) and not isinstance(ts, bool) and len(digits) > 20
    except (ValueError, KeyError, TypeError, RecursionError):
        return False


_SHOW = reprlib.Repr()  # views nest deep: shown to a few levels
_SHOW.maxlevel, _SHOW.maxdict, _SHOW.maxstring, _SHOW.maxlong = 4, 12, 120, 60


def test_jvm_parser_agrees_with_the_core_on_fuzzed_records(spark: Any) -> None:
    made = cases()
    assert len(made) > 3000
    jvm = jvm_of(spark, [case.payload for case in made])
    core = [core_of(case.payload) for case in made]
    groups: dict[tuple[str, str], list[tuple[Case, dict[str, Any], dict[str, Any]]]] = defaultdict(
        list
    )
    for case, want, have in zip(made, core, jvm, strict=True):
        if want != have and not documented(case, want, have):
            key = (str(want.get("reason", want["rtype"])), str(have.get("reason", have["rtype"])))
            groups[key].append((case, want, have))
    report = []
    for (want, have), found in sorted(groups.items(), key=lambda g: -len(g[1])):
        case, core_says, jvm_says = min(found, key=lambda f: len(f[0].payload))
        report.append(
            f"{len(found)} record(s): core {want} / JVM {have}; smallest"
            f" ({', '.join(case.labels)}): {case.text[:300]!r}\n"
            f"    core: {_SHOW.repr(core_says)}\n    jvm:  {_SHOW.repr(jvm_says)}"
        )
    assert not report, "\n".join(report)
    kinds = {view["rtype"] for view in jvm}
    assert kinds == {"change", "chunked", "fragment", "error"}
