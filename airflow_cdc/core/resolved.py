"""The resolved timestamp of a landed stream.

Definition: the resolved timestamp R is a time such that every change committed before R has
already been landed. For a stream read shard by shard:

* each open shard has a *horizon* H: every record that reached the shard before H is landed.
  A shard read to its tip at wall time T has H = T; a shard whose read stopped early (a
  per-run record limit) has H = the arrival time of its last landed record;
* a change committed at time C reaches the stream by C + L, where L is the configured
  lateness bound (the source's replication lag, with margin);
* so R = min over open shards of H, minus L. Closed shards that were read to their end no
  longer hold anything back. A shard never read holds R at "unknown" (``None``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class ShardProgress:
    """How far one shard (or partition, or file) has been landed.

    :param horizon_us: Microseconds since the epoch before which everything is landed.
    :param closed: The shard was read to its end and will receive nothing more.
    """

    shard_id: str
    horizon_us: int | None
    closed: bool = False


def resolved_timestamp(progress: Iterable[ShardProgress], lateness_us: int) -> int | None:
    """Resolved timestamp in microseconds since the epoch, or ``None`` while unknown.

    :param lateness_us: The lateness bound L in microseconds. Must be >= 0.
    """
    if lateness_us < 0:
        raise ValueError(f"lateness_us must be >= 0, got {lateness_us!r}")
    shards = list(progress)
    open_horizons = [p.horizon_us for p in shards if not p.closed]
    if not shards:
        return None
    if not open_horizons:
        closed = [p.horizon_us for p in shards if p.horizon_us is not None]
        return max(closed) - lateness_us if closed else None
    if any(h is None for h in open_horizons):
        return None
    return min(h for h in open_horizons if h is not None) - lateness_us
