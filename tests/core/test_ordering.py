from __future__ import annotations

import pytest

from airflow_cdc.core.ordering import kinesis_sequence_key, pad_decimal, sequence_key
from airflow_cdc.core.resolved import ShardProgress, resolved_timestamp


def test_kinesis_sequence_numbers_order_as_decimals_not_int64() -> None:
    # Sequence numbers are decimal strings of up to 129 digits: far beyond int64.
    small = "49680457155173859824272656539276531475626071514060685314"
    large = "1" + "0" * 128
    assert int(small) > 2**63
    assert kinesis_sequence_key(small) < kinesis_sequence_key(large)
    assert kinesis_sequence_key("9") < kinesis_sequence_key("10")
    assert len(kinesis_sequence_key(large)) == 130


def test_sequence_key_orders_like_the_numbers() -> None:
    values = [0, 9, 10, 1705318200000000000, 1705318200000000001, 2**63 - 1]
    keys = [sequence_key(v) for v in values]
    assert keys == sorted(keys)
    assert sequence_key(1, 2) < sequence_key(1, 10) < sequence_key(2, 0)


@pytest.mark.parametrize("bad", ["-1", "1e5", "", "١٢"])
def test_pad_decimal_rejects_non_decimal(bad: str) -> None:
    with pytest.raises(ValueError, match=repr(bad)):
        pad_decimal(bad, 10)


def test_resolved_is_min_open_horizon_minus_lateness() -> None:
    progress = [
        ShardProgress("a", 1_000_000),
        ShardProgress("b", 700_000),
        ShardProgress("old", 10, closed=True),
    ]
    assert resolved_timestamp(progress, lateness_us=100_000) == 600_000


def test_resolved_unknown_while_a_shard_was_never_read() -> None:
    assert resolved_timestamp([ShardProgress("a", 5), ShardProgress("b", None)], 0) is None
    assert resolved_timestamp([], 0) is None


def test_resolved_of_fully_closed_stream_is_its_last_horizon() -> None:
    progress = [ShardProgress("a", 50, closed=True), ShardProgress("b", 80, closed=True)]
    assert resolved_timestamp(progress, 10) == 70
