"""The JVM parsers against the core parsers, record for record (the core is the specification).

Every DSQL record of the reference's examples, of generated streams (fragments, chunked
records, redeliveries, bad input) and of hostile variants goes through both
``spark_jobs.parse.parse_records`` and ``airflow_cdc.core.formats``; they must agree on what
each record is, its quarantine reason, and every field of the change, fragment or chunk
reference. The few places where the JVM is stricter than the core (the core raises an
uncaught error, for example a sequence wider than its padding) are asserted as such.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from airflow_cdc.core.events import ChangeRecord, Fragment, Message
from airflow_cdc.core.exceptions import RecordFormatError
from airflow_cdc.core.formats import UNTYPED, parser_for
from airflow_cdc.core.formats.common import RecordLimits
from cdc_demo.dsql_stream import generate
from spark_jobs.parse import parse_records
from tests.core.test_dsql_format import CHUNKED, DELETE_RECORD, INSERT

pytestmark = pytest.mark.spark

RAW = (
    "record_id STRING, shard_id STRING, batch_id STRING, arrival_ts TIMESTAMP, data BINARY,"
    " envelope_error STRING, partition_key STRING, seq_key STRING, stream STRING"
)
FRAGMENT = '{"type": "fragment", "chunk_id": "c", "index": 1, "data": "xx"}'


def hostile() -> list[str]:
    insert = json.loads(INSERT)
    chunked = json.loads(CHUNKED)

    def with_(doc: dict[str, Any], path: str, value: Any) -> str:
        copy = json.loads(json.dumps(doc))
        target = copy
        *parents, last = path.split(".")
        for part in parents:
            target = target[part]
        target[last] = value
        return json.dumps(copy)

    return [
        "{not json",
        INSERT + " trailing",  # a document, then more: not one JSON document
        INSERT + " " + INSERT,
        INSERT + "] " + INSERT,
        "[1, 2]",
        "42",
        "null",
        '"text"',
        "{}",
        '{"type": 5}',
        '{"type": ["full"]}',
        with_(insert, "op", 5),
        with_(insert, "op", None),
        with_(insert, "op", "x"),
        with_(insert, "source", "s"),
        with_(insert, "source.ts_ns", "1705318200000000000"),
        with_(insert, "source.ts_ns", "-5"),
        with_(insert, "source.ts_ns", 1.5),
        with_(insert, "source.ts_ns", True),
        with_(insert, "source.ts_ns", 0),
        with_(insert, "source.ts_ns", 10**19),
        with_(insert, "source.schema", 7),
        with_(insert, "source.table", None),
        with_(insert, "after", '{"order_id": 1}'),
        with_(insert, "after", [1]),
        with_(insert, "after", {}),
        with_(insert, "before", 3),
        with_(insert, "after", {"a": {"nested": [1, 2.5, None]}, "b": "zürich 東京 🚀"}),
        with_(json.loads(DELETE_RECORD), "before", None),
        with_(chunked, "chunked", None),
        with_(chunked, "chunked", {}),
        with_(chunked, "chunked", {"after": 5}),
        with_(chunked, "chunked.after.total_fragments", 0),
        with_(chunked, "chunked.after.total_fragments", "3"),
        with_(chunked, "chunked.after.total_fragments", True),
        with_(chunked, "chunked.after.chunk_id", 9),
        with_(chunked, "chunked.after.crc32c", 2073618257),
        with_(chunked, "chunked.after.crc32c", "x"),
        with_(chunked, "after", {"order_id": 1}),
        with_(chunked, "chunked.before", {"chunk_id": "b", "total_fragments": 1, "crc32c": "1"}),
        FRAGMENT,
        FRAGMENT.replace('"index": 1', '"index": -1'),
        FRAGMENT.replace('"index": 1', '"index": 9999'),
        FRAGMENT.replace('"index": 1', '"index": 10000'),
        FRAGMENT.replace('"index": 1', f'"index": {2**63}'),
        with_(chunked, "chunked.after.total_fragments", 10_000),
        with_(chunked, "chunked.after.total_fragments", 10_001),
        with_(chunked, "chunked.after.total_fragments", 10**7),
        with_(chunked, "chunked.after.total_fragments", 2**64),
        FRAGMENT.replace('"index": 1', '"index": true'),
        FRAGMENT.replace('"index": 1', '"index": "1"'),
        FRAGMENT.replace('"chunk_id": "c"', '"chunk_id": 3'),
        FRAGMENT.replace('"data": "xx"', '"data": null'),
        FRAGMENT.replace('"data": "xx"', '"data": {"a": 1}'),
    ]


def core_view(text: str, limits: RecordLimits | None = None) -> dict[str, Any]:
    """What the core parser makes of a record, in the JVM parser's terms."""
    try:
        record = parser_for("dsql", limits)(Message(text))
    except RecordFormatError as err:
        return {"rtype": "error", "reason": err.reason}
    if isinstance(record, Fragment):
        return {
            "rtype": "fragment",
            "chunk_id": record.chunk_id,
            "frag_index": record.index,
            "frag_data": record.data,
        }
    assert isinstance(record, ChangeRecord)
    view: dict[str, Any] = {
        "rtype": "chunked" if record.chunked else "change",
        "schema": record.table.schema,
        "table": record.table.name,
        "op": record.op,
        "sequence": record.sequence,
        "commit_us": record.commit_ts_us,
        "before": record.before,
        "after": record.after,
        "types": record.types,
    }
    for name, ref in record.chunked.items():
        view[name] = None
        view[f"{name}_ref"] = (ref.chunk_id, ref.total_fragments, ref.crc32c)
    return view


def jvm_view(row: Any) -> dict[str, Any]:
    if row["rtype"] == "error":
        return {"rtype": "error", "reason": row["reason"]}
    if row["rtype"] == "fragment":
        return {
            "rtype": "fragment",
            "chunk_id": row["chunk_id"],
            "frag_index": row["frag_index"],
            "frag_data": row["frag_data"],
        }
    view: dict[str, Any] = {
        "rtype": row["rtype"],
        "schema": row["schema"],
        "table": row["table"],
        "op": row["op"],
        "sequence": row["sequence"],
        "commit_us": row["commit_us"],
        "before": json.loads(row["before"]) if row["before"] is not None else None,
        "after": json.loads(row["after"]) if row["after"] is not None else None,
        "types": json.loads(row["types_json"]) if row["types_json"] is not None else None,
    }
    for name in ("before", "after"):
        if row[f"{name}_chunk_id"] is not None:
            view[f"{name}_ref"] = (
                row[f"{name}_chunk_id"],
                row[f"{name}_total"],
                row[f"{name}_crc"],
            )
    return view


def parsed_frame(
    spark: Any,
    payloads: list[bytes],
    limits: RecordLimits | None = None,
    slices: int | None = None,
) -> Any:
    """The JVM parse of ``payloads`` (landed records' bytes, in ``slices`` partitions), with
    the images as JSON text and the commit time in µs."""
    from pyspark.sql import functions as F

    rows = [
        (f"r{n:06d}", "shard-0", "b", None, bytearray(p), None, None, "", "s")
        for n, p in enumerate(payloads)
    ]
    data = rows if slices is None else spark.sparkContext.parallelize(rows, slices)
    parsed = parse_records(spark.createDataFrame(data, RAW), "dsql", limits)
    return (
        parsed.select(
            "*",
            F.to_json("before").alias("before_text"),
            F.to_json("after").alias("after_text"),
            F.unix_micros("commit_ts").alias("commit_us"),
        )
        .drop("before", "after")
        .withColumnRenamed("before_text", "before")
        .withColumnRenamed("after_text", "after")
    )


def parse_in_spark(
    spark: Any, texts: list[str], limits: RecordLimits | None = None
) -> list[dict[str, Any]]:
    payloads = [t.encode("utf-8") for t in texts]
    collected = parsed_frame(spark, payloads, limits).orderBy("record_id").collect()
    return [jvm_view(r) for r in collected]


def test_jvm_parser_agrees_with_the_core_on_every_record(spark: Any) -> None:
    stream = generate(300, seed=21, chunk_threshold=800, fragment_bytes=300)
    texts = [INSERT, DELETE_RECORD, CHUNKED, *hostile(), *stream.deliveries]
    got = parse_in_spark(spark, texts)
    mismatches = [
        (text[:120], want, have)
        for text, want, have in zip(texts, (core_view(t) for t in texts), got, strict=True)
        if want != have
    ]
    assert mismatches == []
    kinds = {view["rtype"] for view in got}
    assert kinds == {"change", "chunked", "fragment", "error"}


def test_a_dsql_record_names_no_column_types(spark: Any) -> None:
    """apply_changes does not look for the column types records name (``types_json``) in a
    format of :data:`UNTYPED`: the core's DSQL rules never name any, nor does the JVM parse
    (which the test above holds to the core's, types included)."""
    assert "dsql" in UNTYPED
    stream = generate(120, seed=5, chunk_threshold=800, fragment_bytes=300)
    texts = [INSERT, DELETE_RECORD, CHUNKED, *hostile(), *stream.deliveries]
    changes = [v for v in map(core_view, texts) if v["rtype"] in ("change", "chunked")]
    assert len(changes) > 100
    assert [v for v in changes if v["types"] is not None] == []
    parsed = parsed_frame(spark, [t.encode("utf-8") for t in texts])
    assert parsed.where("types_json IS NOT NULL").count() == 0


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        # The core pads sequences to 20 digits and raises ValueError past that; the JVM
        # parser quarantines the record instead of failing the batch.
        (INSERT.replace("1705318200000000000", "1" * 21), "invalid_sequence"),
        # A fragment index or a CRC beyond 64 bits cannot be stored: quarantined.
        (FRAGMENT.replace('"index": 1', f'"index": {2**63}'), "invalid_fragment"),
        (CHUNKED.replace('"crc32c": "2073618257"', f'"crc32c": "{2**64}"'), "invalid_chunked"),
    ],
)
def test_jvm_parser_quarantines_what_the_core_cannot_represent(
    spark: Any, text: str, reason: str
) -> None:
    [view] = parse_in_spark(spark, [text])
    assert view == {"rtype": "error", "reason": reason}


def test_a_lowered_fragment_limit_holds_in_both_parsers(spark: Any) -> None:
    limits = RecordLimits(fragments=3)
    texts = [
        CHUNKED,  # total_fragments 3: at the limit
        CHUNKED.replace('"total_fragments": 3', '"total_fragments": 4'),
        FRAGMENT.replace('"index": 1', '"index": 2'),
        FRAGMENT.replace('"index": 1', '"index": 3'),
    ]
    want = [core_view(t, limits) for t in texts]
    assert [v["rtype"] for v in want] == ["chunked", "error", "fragment", "error"]
    assert [v.get("reason") for v in want[1::2]] == ["invalid_chunked", "invalid_fragment"]
    assert parse_in_spark(spark, texts, limits) == want
    # The default limit takes all four.
    assert {v["rtype"] for v in parse_in_spark(spark, texts)} == {"chunked", "fragment"}


def test_a_json_number_with_a_zero_fraction_reads_as_the_integer(spark: Any) -> None:
    # Known difference: Spark's VARIANT keeps numbers by value (``1.0`` is stored as the
    # integral decimal 1), so the JVM parser cannot tell ``1.0`` from ``1`` and takes the
    # index 1 where the core, seeing a Python float, quarantines the record. No value is lost.
    text = FRAGMENT.replace('"index": 1', '"index": 1.0')
    assert core_view(text) == {"rtype": "error", "reason": "missing_field"}
    [view] = parse_in_spark(spark, [text])
    assert view["rtype"] == "fragment" and view["frag_index"] == 1


def test_base64_payloads_are_not_decoded_twice(spark: Any) -> None:
    # A record's data is the record's JSON itself (landing decodes the Kinesis Base64 once).
    encoded = base64.b64encode(INSERT.encode()).decode()
    [view] = parse_in_spark(spark, [encoded])
    assert view == {"rtype": "error", "reason": "malformed_json"}


def test_an_envelope_error_is_quarantined_alike_by_the_jvm_and_the_core(spark: Any) -> None:
    """A landed record with an envelope error is refused before its bytes are read: offsets
    that expired before landing as ``expired_before_landing`` (the error's prefix names it),
    any other error as ``bad_envelope``; the detail is the error after the reason, in both
    parsers."""
    from spark_jobs.parse import parse_with_core

    errors = {
        "r1": "expired_before_landing: offsets 3 to 7 of partition t/0 (5 messages) expired",
        "r2": "the message key is not UTF-8: invalid start byte",
        "r3": "not expired_before_landing: a prefix only counts at the start",
    }
    want = {
        "r1": ("expired_before_landing", errors["r1"]),
        "r2": ("bad_envelope", f"bad_envelope: {errors['r2']}"),
        "r3": ("bad_envelope", f"bad_envelope: {errors['r3']}"),
    }
    rows = [(r, "t/0", "b", None, None, e, None, "", "t") for r, e in errors.items()]
    frame = spark.createDataFrame(rows, RAW)
    jvm = parse_records(frame, "dsql", None).select("record_id", "rtype", "reason", "detail")
    core = parse_with_core(frame, "debezium", RecordLimits()).select(
        "record_id", "rtype", "reason", "detail"
    )
    for parsed in (jvm, core):
        got = {r["record_id"]: (r["reason"], r["detail"]) for r in parsed.collect()}
        assert got == want
        assert {r["rtype"] for r in parsed.collect()} == {"error"}
