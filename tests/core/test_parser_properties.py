"""Any input at all: every parser answers with a change, a fragment, a control message or a
:class:`RecordFormatError` with a reason, never another exception.

Documents are drawn from each format's own field names (so that the parsers get past their
first checks) mixed with arbitrary names and values of every JSON type, nested; raw texts
that are not JSON, and absent values, too.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_cdc.core.events import ChangeRecord, Control, Fragment, Message
from airflow_cdc.core.exceptions import RecordFormatError
from airflow_cdc.core.formats import PARSERS, parser_for

# Field names each format's documents use, at any depth.
VOCABULARY = [
    *("type", "op", "before", "after", "source", "ts_ns", "ts_ms", "schema", "table"),
    *("chunked", "chunk_id", "index", "data", "total_fragments", "crc32c", "ref"),
    *("key", "update", "erase", "reset", "newImage", "oldImage", "ts", "resolved", "step"),
    *("txId", "updated", "__crdb__", "topic", "payload", "length", "fields", "field"),
    *("optional", "name", "scale", "parameters", "version", "lsn", "db", "unique", "SEG_OWNER"),
    *("TABLE_NAME", "OPERATION", "TIMESTAMP", "message_version", "HEARTBEAT", "snapshot"),
]
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**80), max_value=2**80)
    | st.floats(allow_nan=False)
    | st.text(max_size=12)
    | st.sampled_from(["c", "u", "d", "r", "full", "chunked", "fragment", "int64", "struct"])
    | st.sampled_from(["1.5", "2024-01-15T10:30:00Z", "12:00:00+02:00", "AAAA", "-5", "1e400"])
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.sampled_from(VOCABULARY) | st.text(max_size=6), inner, max_size=6)
    ),
    max_leaves=25,
)
DOCUMENTS = st.dictionaries(st.sampled_from(VOCABULARY), VALUES, max_size=8)
TEXTS = (
    DOCUMENTS.map(json.dumps)
    | VALUES.map(json.dumps)
    | st.text(max_size=40)
    | st.none()
    | st.just('{"a": ' + "9" * 5000 + "}")
    | st.just("[" * 5000 + "]" * 5000)
)
KEYS = st.none() | TEXTS | st.lists(SCALARS, max_size=3).map(json.dumps)


@pytest.mark.parametrize("fmt", sorted(PARSERS))
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(value=TEXTS, key=KEYS, topic=st.none() | st.text(max_size=12))
def test_a_parser_answers_anything(
    fmt: str, value: str | None, key: str | None, topic: Any
) -> None:
    message = Message(value, key, "00000000000000000001", topic)
    try:
        parsed = parser_for(fmt)(message)
    except RecordFormatError as err:
        assert err.reason and str(err)
        return
    assert isinstance(parsed, ChangeRecord | Fragment | Control)
