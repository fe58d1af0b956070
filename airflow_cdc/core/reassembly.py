"""Reassembly of oversized images from fragment records.

From the Aurora DSQL reference: "buffer each record with type fragment by its chunk_id. When you
receive a main record with type chunked, wait until you have total_fragments fragments for each
chunk_id [...], sort the fragments by index ascending, and concatenate the data strings. [...]
compute CRC32C over the concatenated string and compare the result to [...] crc32c." A chunk_id
"is stable across retries", so a redelivered fragment is the same piece again.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import crc32c

from airflow_cdc.core.events import ChunkRef, Fragment

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


def assemble(ref: ChunkRef, fragments: Iterable[Fragment]) -> Assembly:
    """Reassemble the image that ``ref`` describes from whatever fragments have arrived.

    Fragments of other chunk ids are ignored. Duplicates of a fragment are dropped; two
    fragments with the same index but different data fail the set.
    """
    pieces: dict[int, str] = {}
    redelivered = 0
    for fragment in fragments:
        if fragment.chunk_id != ref.chunk_id:
            continue
        if fragment.index >= ref.total_fragments:
            return Assembly(
                FAILED,
                reason="fragment_out_of_range",
                detail=f"index {fragment.index} >= total_fragments {ref.total_fragments}",
            )
        known = pieces.get(fragment.index)
        if known is None:
            pieces[fragment.index] = fragment.data
        elif known == fragment.data:
            redelivered += 1
        else:
            return Assembly(
                FAILED,
                reason="conflicting_fragments",
                detail=f"two different fragments with index {fragment.index}",
            )
    missing = tuple(i for i in range(ref.total_fragments) if i not in pieces)
    if missing:
        return Assembly(INCOMPLETE, missing=missing, redelivered=redelivered)
    text = "".join(pieces[i] for i in range(ref.total_fragments))
    actual = checksum(text)
    if actual != ref.crc32c:
        return Assembly(
            FAILED,
            reason="crc_mismatch",
            detail=f"crc32c {actual} of the reassembled text != declared {ref.crc32c}",
        )
    try:
        image = json.loads(text)
    except json.JSONDecodeError as err:
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
