"""Fragment reassembly: every arrival order, redelivery, UTF-8 split points and CRC32C."""

from __future__ import annotations

import itertools
import json
import random

import pytest

from airflow_cdc.core.events import ChunkRef, Fragment
from airflow_cdc.core.reassembly import COMPLETE, FAILED, INCOMPLETE, assemble, checksum, split

IMAGE = {"order_id": 1001, "note": "grüße aus 東京 🚀" * 3, "price": "29.99"}
TEXT = json.dumps(IMAGE, ensure_ascii=False)


def _set(max_bytes: int = 16) -> tuple[ChunkRef, list[Fragment]]:
    fragments = split(TEXT, "chunk-1", max_bytes)
    return ChunkRef("chunk-1", len(fragments), checksum(TEXT)), fragments


def test_crc32c_known_vector() -> None:
    # The standard CRC-32C check value of "123456789" (RFC 3720, appendix B.4).
    assert checksum("123456789") == 0xE3069283


def test_split_respects_utf8_boundaries_and_limit() -> None:
    # "each fragment's data value is a valid UTF-8 string on its own"
    for limit in (4, 5, 7, 16):
        fragments = split(TEXT, "c", limit)
        assert "".join(f.data for f in fragments) == TEXT
        for fragment in fragments:
            assert 0 < len(fragment.data.encode("utf-8")) <= limit
            fragment.data.encode("utf-8").decode("utf-8")
        assert [f.index for f in fragments] == list(range(len(fragments)))


def test_every_arrival_order_reassembles() -> None:
    ref, fragments = _set(max_bytes=40)
    assert 3 <= len(fragments) <= 6
    for order in itertools.permutations(fragments):
        result = assemble(ref, order)
        assert result.status == COMPLETE
        assert result.image == IMAGE


def test_redelivered_fragments_are_counted_once() -> None:
    # "A chunk_id is stable across retries": a redelivery is the same piece again.
    ref, fragments = _set()
    result = assemble(ref, fragments + fragments[:2])
    assert result.status == COMPLETE
    assert result.redelivered == 2


def test_missing_fragments_leave_the_set_incomplete() -> None:
    ref, fragments = _set()
    result = assemble(ref, fragments[1:-1])
    assert result.status == INCOMPLETE
    assert result.missing == (0, len(fragments) - 1)


def test_fragments_of_other_chunks_are_ignored() -> None:
    ref, fragments = _set()
    stranger = Fragment("chunk-2", 0, "{}")
    assert assemble(ref, [stranger, *fragments]).status == COMPLETE


def test_crc_mismatch_fails() -> None:
    ref, fragments = _set()
    wrong = ChunkRef(ref.chunk_id, ref.total_fragments, (ref.crc32c + 1) % 2**32)
    result = assemble(wrong, fragments)
    assert result.status == FAILED
    assert result.reason == "crc_mismatch"


def test_corrupted_fragment_fails_the_crc() -> None:
    ref, fragments = _set()
    fragments[1] = Fragment(ref.chunk_id, 1, fragments[1].data[::-1])
    assert assemble(ref, fragments).reason == "crc_mismatch"


def test_conflicting_redelivery_fails() -> None:
    ref, fragments = _set()
    result = assemble(ref, [*fragments, Fragment(ref.chunk_id, 0, "different")])
    assert (result.status, result.reason) == (FAILED, "conflicting_fragments")


def test_index_beyond_total_fails() -> None:
    ref, fragments = _set()
    result = assemble(ref, [*fragments, Fragment(ref.chunk_id, ref.total_fragments, "x")])
    assert result.reason == "fragment_out_of_range"


def test_valid_crc_over_non_json_fails_as_malformed_image() -> None:
    text = '{"a": 1'
    ref = ChunkRef("c", 1, checksum(text))
    assert assemble(ref, [Fragment("c", 0, text)]).reason == "malformed_image"


def test_split_rejects_impossible_limit() -> None:
    with pytest.raises(ValueError, match="max_bytes"):
        split("abc", "c", 3)


def test_a_reassembled_image_is_read_as_an_inline_one() -> None:
    """Its numbers keep their digits; text that a strict reader refuses fails the set."""
    text = '{"amount": 123456789012345678.12345678901234567891, "n": 1}'
    result = assemble(ChunkRef("c", 1, checksum(text)), [Fragment("c", 0, text)])
    assert result.status == COMPLETE and result.image is not None
    assert result.image["amount"].text == "123456789012345678.12345678901234567891"
    for refused in ('{"a": NaN}', '{"a": "\\ud800"}', '{"a": 1} {"b": 2}', "[1]"):
        ref = ChunkRef("c", 1, checksum(refused))
        assert assemble(ref, [Fragment("c", 0, refused)]).reason == "malformed_image", refused


def test_the_outcome_does_not_depend_on_arrival_order() -> None:
    """A fragment past the set fails it before a conflict, each naming its smallest index."""
    ref, fragments = _set()
    extra = [
        Fragment(ref.chunk_id, 1, "different"),
        Fragment(ref.chunk_id, ref.total_fragments + 3, "x"),
        Fragment(ref.chunk_id, ref.total_fragments, "y"),
        Fragment(ref.chunk_id, 0, "other"),
    ]
    every = [*fragments, *extra]
    orders = [random.Random(seed).sample(every, len(every)) for seed in range(50)]
    assert {assemble(ref, order).detail for order in orders} == {
        f"index {ref.total_fragments} >= total_fragments {ref.total_fragments}"
    }
    conflicting = [*fragments, extra[0], extra[3]]
    orders = [random.Random(seed).sample(conflicting, len(conflicting)) for seed in range(50)]
    assert {(r.reason, r.detail) for r in (assemble(ref, order) for order in orders)} == {
        ("conflicting_fragments", "two different fragments with index 0")
    }


def test_a_set_past_the_byte_bound_fails_a_redelivery_counted_once() -> None:
    ref, fragments = _set()
    size = len(TEXT.encode("utf-8"))  # the set's data, each fragment once
    # Redelivered fragments count once: within the bound.
    assert assemble(ref, [*fragments, *fragments], max_bytes=size).status == COMPLETE
    # Other data at an index is more data: past the bound, which is checked first.
    other = Fragment(ref.chunk_id, 0, "z")
    result = assemble(ref, [*fragments, other], max_bytes=size)
    assert (result.status, result.reason) == (FAILED, "oversized_fragment_set")
    assert result.detail.startswith(f"the distinct fragments of its chunk_id hold {size + 1} bytes")
    assert assemble(ref, [*fragments, other], max_bytes=size + 1).reason == "conflicting_fragments"
    # Fragments of other chunk ids count for nothing.
    stranger = Fragment("chunk-2", 0, "x" * size)
    assert assemble(ref, [stranger, *fragments], max_bytes=size).status == COMPLETE
