"""Sortable sequence keys.

Every format maps its commit order onto one string that sorts lexicographically in commit
order, so that Spark can order and compare changes of any format with plain string operators.
Kinesis sequence numbers are decimal strings of up to 129 digits and are never cast to int64.
"""

from __future__ import annotations

KINESIS_SEQUENCE_WIDTH = 130
_INT64_WIDTH = 20


def pad_decimal(value: str | int, width: int) -> str:
    """Left-pad a non-negative decimal integer so that string order equals numeric order.

    :param value: A non-negative integer, or its decimal digits as a string.
    :param width: The fixed width of the result, in characters.
    """
    text = str(value)
    if not text.isdigit() or not text.isascii():
        raise ValueError(f"value must be a non-negative decimal integer, got {value!r}")
    stripped = text.lstrip("0") or "0"
    if len(stripped) > width:
        raise ValueError(f"value {value!r} has more than {width} digits")
    return stripped.rjust(width, "0")


def kinesis_sequence_key(sequence_number: str) -> str:
    """Sort key of a Kinesis sequence number (decimal string up to 129 digits)."""
    return pad_decimal(sequence_number, KINESIS_SEQUENCE_WIDTH)


def sequence_key(*parts: int) -> str:
    """Sort key for a commit position made of non-negative integers, most significant first.

    >>> sequence_key(1705318200000000000)
    '01705318200000000000'
    """
    if not parts:
        raise ValueError("sequence_key needs at least one part")
    return ".".join(pad_decimal(part, _INT64_WIDTH) for part in parts)
