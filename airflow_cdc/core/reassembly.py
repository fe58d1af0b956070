"""Reassembly of oversized images from fragment records.

From the Aurora DSQL reference: "buffer each record with type fragment by its chunk_id. When you
receive a main record with type chunked, wait until you have total_fragments fragments for each
chunk_id [...], sort the fragments by index ascending, and concatenate the data strings. [...]
compute CRC32C over the concatenated string and compare the result to [...] crc32c." A chunk_id
"is stable across retries", so a redelivered fragment is the same piece again.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import crc32c

from airflow_cdc.core.events import ChunkRef, Fragment
from airflow_cdc.core.exceptions import RecordFormatError
from airflow_cdc.core.formats.common import MAX_SET_BYTES, load_json

COMPLETE = "complete"
INCOMPLETE = "incomplete"
FAILED = "failed"


@dataclass(frozen=True)
class Assembly:
    """The outcome of reassembling one image.

    ``status`` is ``complete`` (``image`` holds the parsed object), ``incomplete`` (``missing``
    lists the absent indexes) or ``failed`` (``reason`` is a quarantine code).
    ``redelivered`` counts fragments that were exact copies of one already in the set.
    """

    status: str
    image: dict[str, Any] | None = None
    reason: str | None = None
    detail: str = ""
    missing: tuple[int, ...] = ()
    redelivered: int = 0
    used: tuple[int, ...] = field(default=())


def checksum(text: str) -> int:
    """CRC32C of the UTF-8 bytes of ``text``, as the unsigned integer DSQL prints."""
    return crc32c.crc32c(text.encode("utf-8"))


OVERSIZED = "oversized_fragment_set"


def oversized_detail(delivered: int, max_bytes: int) -> str:
    """The quarantine detail of a set whose fragments hold ``delivered`` bytes."""
    return (
        f"the distinct fragments of its chunk_id hold {delivered} bytes of data, more than"
        f" the {max_bytes} one set may gather"
    )


def assemble(
    ref: ChunkRef, fragments: Iterable[Fragment], max_bytes: int = MAX_SET_BYTES
) -> Assembly:
    """Reassemble the image that ``ref`` describes from whatever fragments have arrived.

    Fragments of other chunk ids are ignored. Duplicates of a fragment are dropped. The
    outcome does not depend on the order the fragments arrived in: fragments whose distinct
    data (a redelivery of a fragment counted once) is more than ``max_bytes`` UTF-8 bytes
    fail the set first
    (:data:`~airflow_cdc.core.formats.common.MAX_SET_BYTES`), then a fragment whose index is
    past the set (the smallest such index is named), then two fragments with
    the same index but different data (the smallest such index); then the set is
    incomplete, or its CRC32C is checked. The image is read by the rules of an inline one
    (:func:`~airflow_cdc.core.formats.common.load_object`, strict: its numbers keep their
    digits, RFC 8259 text only, number literals within the limits).
    """
    mine = [f for f in fragments if f.chunk_id == ref.chunk_id]
    distinct = {(f.index, f.data) for f in mine}
    delivered = sum(len(data.encode("utf-8", "surrogatepass")) for _, data in distinct)
    if delivered > max_bytes:
        return Assembly(FAILED, reason=OVERSIZED, detail=oversized_detail(delivered, max_bytes))
    past = [f.index for f in mine if f.index >= ref.total_fragments]
    if past:
        return Assembly(
            FAILED,
            reason="fragment_out_of_range",
            detail=f"index {min(past)} >= total_fragments {ref.total_fragments}",
        )
    pieces: dict[int, set[str]] = {}
    for fragment in mine:
        pieces.setdefault(fragment.index, set()).add(fragment.data)
    conflicting = [index for index, data in pieces.items() if len(data) > 1]
    if conflicting:
        return Assembly(
            FAILED,
            reason="conflicting_fragments",
            detail=f"two different fragments with index {min(conflicting)}",
        )
    redelivered = len(mine) - len(pieces)
    missing = tuple(i for i in range(ref.total_fragments) if i not in pieces)
    if missing:
        return Assembly(INCOMPLETE, missing=missing, redelivered=redelivered)
    text = "".join(next(iter(pieces[i])) for i in range(ref.total_fragments))
    actual = checksum(text)
    if actual != ref.crc32c:
        return Assembly(
            FAILED,
            reason="crc_mismatch",
            detail=f"crc32c {actual} of the reassembled text != declared {ref.crc32c}",
        )
    try:
        image = load_json(text, strict=True)
    except RecordFormatError as err:
        return Assembly(FAILED, reason="malformed_image", detail=str(err))
    if not isinstance(image, dict):
        return Assembly(FAILED, reason="malformed_image", detail="image is not a JSON object")
    return Assembly(COMPLETE, image=image, redelivered=redelivered, used=tuple(sorted(pieces)))


def split(text: str, chunk_id: str, max_bytes: int) -> list[Fragment]:
    """Split an image's JSON text into fragments of at most ``max_bytes`` UTF-8 bytes each.

    Splits fall on character boundaries, so each fragment's data is valid UTF-8 on its own, as
    the DSQL reference promises. Used by the stream generator and the tests.
    """
    if max_bytes < 4:
        raise ValueError(f"max_bytes must be at least 4 (one UTF-8 character), got {max_bytes!r}")
    fragments: list[Fragment] = []
    current: list[str] = []
    size = 0
    for char in text:
        width = len(char.encode("utf-8"))
        if size + width > max_bytes:
            fragments.append(Fragment(chunk_id, len(fragments), "".join(current)))
            current, size = [], 0
        current.append(char)
        size += width
    fragments.append(Fragment(chunk_id, len(fragments), "".join(current)))
    return fragments
