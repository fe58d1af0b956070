"""``spark_jobs.json_columns.base64_bytes`` against the core's reading of Base64
(:func:`airflow_cdc.core.types.padded_base64`, the specification): padded standard Base64 is
alphabet characters, at most two ``=`` at the end, and a length that is a multiple of four.

The texts are Base64 of random bytes with a few characters inserted, replaced or deleted:
whitespace and line terminators (which Spark's decoder skips), ``=`` anywhere, the URL-safe
alphabet, non-ASCII letters (more bytes than characters) and NUL."""

from __future__ import annotations

import base64
import binascii
import random
from typing import Any

from pyspark.sql import functions as F

from airflow_cdc.core.types import padded_base64
from spark_jobs.json_columns import base64_bytes

ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
ODD = [
    *"=+/-_ \t\n\r\f\v.,:\x00\u00e9\u2028\u0085\u00a0😀AZaz09",
    "==",
    "\r\n",
]


def expected(text: str) -> bytes | None:
    try:
        return padded_base64(text)
    except binascii.Error:
        return None


def mutated(rnd: random.Random) -> str:
    chars = list(base64.b64encode(rnd.randbytes(rnd.randint(0, 10))).decode())
    for _ in range(rnd.choice([0, 1, 1, 2, 3])):
        at = rnd.randint(0, len(chars))
        roll = rnd.random()
        if roll < 0.4:
            chars.insert(at, rnd.choice(ODD))
        elif chars and roll < 0.7:
            chars[min(at, len(chars) - 1)] = rnd.choice([*ODD, *ALPHABET])
        elif chars:
            del chars[min(at, len(chars) - 1)]
    return "".join(chars)


def test_base64_bytes_follows_the_rule(spark: Any) -> None:
    rnd = random.Random(20261201)
    texts = [mutated(rnd) for _ in range(20_000)]
    texts += ["", "AA", "AA==", "AAA=", "A===", "AAAA=", "AAAA====", "AB==", "AA=A", "=AAA"]
    texts += ["AAAA\n", " AAAA", "AA AA", "QUJD\r\n", "-_AA", "AA\u00e9", None]  # type: ignore[list-item]
    frame = spark.createDataFrame([(t,) for t in texts], "text string")
    rows = frame.select("text", base64_bytes(F.col("text")).alias("bytes")).collect()
    found = [
        (r["text"], expected(r["text"]), None if r["bytes"] is None else bytes(r["bytes"]))
        for r in rows
        if r["text"] is not None
    ]
    wrong = [case for case in found if case[1] != case[2]]
    assert not wrong, wrong[:10]
    valid = sum(1 for r in rows if r["bytes"] is not None)
    # Both kinds are well represented: the mutations leave about a quarter valid.
    assert 2_000 < valid < 18_000
    assert [r["bytes"] for r in rows if r["text"] is None] == [None]
