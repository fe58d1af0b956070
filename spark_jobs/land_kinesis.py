"""Land every shard of a Kinesis data stream into the raw Delta table.

Each open shard is read from its checkpoint to the tip in its own Spark task with boto3;
closed parent shards are read to their end before their children start (resharding). A
shard the last run left open that the stream no longer lists has expired: resharding closed
it and its retention removed it, with whatever it held after the checkpoint. It lands as one
record (:func:`expired_shard_row`) that the apply quarantines as ``expired_before_landing``,
and its checkpoint closes, so that it no longer holds the resolved timestamp.
Credentials: keys that the task puts in the driver's environment (``AWS_ACCESS_KEY_ID``,
``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``; never the command line) travel to the
executors inside the shard readers, since on a cluster an executor's environment is not the
driver's. Without them, each executor's boto3 finds its own (an instance role, IRSA).
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Iterator
from typing import Any

from airflow_cdc.core.events import EXPIRED_PREFIX
from airflow_cdc.core.ordering import kinesis_sequence_key
from airflow_cdc.jobs import MILLIS_BEHIND
from spark_jobs.arguments import base_parser, landed_source, source_name
from spark_jobs.landing import (
    ShardTask,
    add_landing_arguments,
    land,
    load_checkpoints,
    progress_row,
    record_row,
)
from spark_jobs.runs import start, write_stats

JOB_NAME = "land_kinesis"
JOB_VERSION = "1.1.6"


class Credentials:
    """AWS credentials resolved on the driver, for clients on the executors. They never
    print: not in a log line, an exception or a task's description."""

    __slots__ = ("_access_key", "_secret_key", "_token")

    def __init__(self, access_key: str, secret_key: str, token: str | None) -> None:
        self._access_key = access_key
        self._secret_key = secret_key
        self._token = token

    def __repr__(self) -> str:
        return "Credentials(<hidden>)"

    def __getstate__(self) -> tuple[str, str, str | None]:
        return self._access_key, self._secret_key, self._token

    def __setstate__(self, state: tuple[str, str, str | None]) -> None:
        self._access_key, self._secret_key, self._token = state

    @classmethod
    def of_driver(cls) -> Credentials | None:
        """The keys the task gave the driver in its environment (``AWS_ACCESS_KEY_ID``...),
        for the executors. ``None`` when boto3 finds its credentials elsewhere (an instance
        role, IRSA, a profile): those refresh themselves, and each executor's own chain
        finds its machine's, so nothing frozen travels."""
        import boto3

        found = boto3.Session().get_credentials()
        if found is None or found.method != "env":
            return None
        frozen = found.get_frozen_credentials()
        if not frozen.access_key or not frozen.secret_key:
            return None
        return cls(frozen.access_key, frozen.secret_key, frozen.token)

    def client_arguments(self) -> dict[str, Any]:
        return {
            "aws_access_key_id": self._access_key,
            "aws_secret_access_key": self._secret_key,
            "aws_session_token": self._token,
        }


class KinesisShardReader:
    """Reads one shard from after a sequence number up to the tip, or its end if closed.

    :param max_records: Upper bound on records read from one shard in one run.
    :param page_size: Records per GetRecords call. Must be between 1 and 10,000.
    :param credentials: The driver's credentials, for the executors' clients (``None``: each
        client's own credential chain).
    :param source: The landed source, named by the record of an expired shard.
    :param expired: Shards of the checkpoints that the stream no longer lists
        (:func:`expired_shards`): their tasks read nothing, and close them.
    """

    def __init__(
        self,
        stream: str,
        endpoint_url: str | None,
        region: str,
        max_records: int,
        page_size: int = 1000,
        credentials: Credentials | None = None,
        source: str | None = None,
        expired: frozenset[str] = frozenset(),
    ) -> None:
        if not 1 <= page_size <= 10_000:
            raise ValueError(f"page_size must be between 1 and 10,000, got {page_size!r}")
        self.stream = stream
        self.endpoint_url = endpoint_url
        self.region = region
        self.max_records = max_records
        self.page_size = page_size
        self.credentials = credentials
        self.source = source or stream
        self.expired = expired

    def client(self) -> Any:
        import boto3
        from botocore.config import Config

        given = self.credentials.client_arguments() if self.credentials else {}
        return boto3.client(
            "kinesis",
            endpoint_url=self.endpoint_url,
            region_name=self.region,
            config=Config(retries={"max_attempts": 10, "mode": "adaptive"}),
            **given,
        )

    def __call__(self, task: ShardTask) -> Iterator[tuple[Any, ...]]:
        if task.shard_id in self.expired:
            after = task.after_sequence
            yield expired_shard_row(self.source, self.stream, task.shard_id, after)
            key = kinesis_sequence_key(after) if after else None
            yield progress_row(self.stream, task.shard_id, after, key, True, None)
            return
        client = self.client()
        last = task.after_sequence
        last_arrival: dt.datetime | None = None
        iterator = self._iterator(client, task.shard_id, last)
        read, closed, horizon, behind = 0, False, None, None
        while True:
            asked_at = dt.datetime.now(dt.UTC)
            try:
                page = client.get_records(ShardIterator=iterator, Limit=self.page_size)
            except client.exceptions.ExpiredIteratorException:
                iterator = self._iterator(client, task.shard_id, last)
                continue
            for record in page["Records"]:
                last = record["SequenceNumber"]
                last_arrival = record.get("ApproximateArrivalTimestamp")
                read += 1
                yield record_row(
                    f"kinesis:{self.stream}/{task.shard_id}/{last}",
                    self.stream,
                    task.shard_id,
                    last,
                    kinesis_sequence_key(last),
                    record.get("PartitionKey"),
                    last_arrival,
                    record["Data"],
                )
            behind = page.get("MillisBehindLatest", behind)
            iterator = page.get("NextShardIterator")
            if iterator is None:
                closed, horizon = True, last_arrival or asked_at
                break
            if not page["Records"] and page.get("MillisBehindLatest", 0) == 0:
                horizon = asked_at
                break
            if read >= self.max_records:
                horizon = last_arrival
                break
            if not page["Records"]:
                time.sleep(0.2)
        yield progress_row(
            self.stream,
            task.shard_id,
            last,
            kinesis_sequence_key(last) if last else None,
            closed,
            horizon,
            None if behind is None else {MILLIS_BEHIND: int(behind)},
        )

    def _iterator(self, client: Any, shard_id: str, after: str | None) -> str:
        kwargs: dict[str, Any] = {"StreamName": self.stream, "ShardId": shard_id}
        if after:
            kwargs.update(ShardIteratorType="AFTER_SEQUENCE_NUMBER", StartingSequenceNumber=after)
        else:
            kwargs.update(ShardIteratorType="TRIM_HORIZON")
        return str(client.get_shard_iterator(**kwargs)["ShardIterator"])


def list_shards(client: Any, stream: str) -> list[dict[str, Any]]:
    shards: list[dict[str, Any]] = []
    kwargs: dict[str, Any] = {"StreamName": stream}
    while True:
        page = client.list_shards(**kwargs)
        shards.extend(page["Shards"])
        token = page.get("NextToken")
        if not token:
            return shards
        kwargs = {"NextToken": token}


def expired_shards(shards: list[dict[str, Any]], checkpoints: dict[str, Any]) -> frozenset[str]:
    """The shards the checkpoints leave open that ``shards`` (the stream's listing) no longer
    holds: a shard is listed from its creation until its retention runs out after it closed
    ("closed shards transition to an EXPIRED state", and the listing leaves them out)."""
    listed = {s["ShardId"] for s in shards}
    return frozenset(s for s, c in checkpoints.items() if not c.closed and s not in listed)


def expired_shard_row(
    source: str, stream: str, shard_id: str, after: str | None
) -> tuple[Any, ...]:
    """The landed record that stands for what an expired shard held after the checkpoint
    ``after`` (``None``: from its start), which no run landed and none can: no data, and an
    envelope error that quarantines it as ``expired_before_landing``. How many records that
    was, if any, the stream no longer says."""
    since = f"after sequence number {after}" if after else "from its start"
    return record_row(
        f"kinesis:{stream}/{shard_id}/expired-{after or 'start'}",
        stream,
        shard_id,
        after or "0",
        kinesis_sequence_key(after or "0"),
        None,
        None,
        None,
        f"{EXPIRED_PREFIX}the records of shard {shard_id} {since}, if it held any, expired"
        f" from stream {stream!r} (resharding closed the shard, then its retention removed"
        f" it) before source {source!r} landed them; their changes are not in the tables",
    )


def shard_tasks(shards: list[dict[str, Any]], checkpoints: dict[str, Any]) -> list[ShardTask]:
    """One task per listed shard, and one per expired shard (:func:`expired_shards`), which
    closes it; parents no longer listed do not hold children."""
    listed = {s["ShardId"] for s in shards}
    tasks = [
        ShardTask(s, checkpoints[s].sequence_number)
        for s in sorted(expired_shards(shards, checkpoints))
    ]
    for shard in shards:
        parents = tuple(
            p
            for p in (shard.get("ParentShardId"), shard.get("AdjacentParentShardId"))
            if p and p in listed
        )
        checkpoint = checkpoints.get(shard["ShardId"])
        after = checkpoint.sequence_number if checkpoint else None
        tasks.append(ShardTask(shard["ShardId"], after, parents))
    return tasks


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = base_parser(__doc__)
    parser.add_argument("--stream", required=True)
    parser.add_argument(
        "--source", type=source_name, help="name of the landed source (default: the stream)"
    )
    parser.add_argument("--endpoint-url", help="Kinesis endpoint; AWS itself when omitted")
    parser.add_argument("--region", default="us-east-1")
    parser.add_argument("--max-records-per-shard", type=int, default=1_000_000)
    add_landing_arguments(parser)
    args = parser.parse_args(argv)
    source = landed_source(parser, args.source, args.stream)
    ctx = start(JOB_NAME, JOB_VERSION, args)
    checkpoints, land_seq = load_checkpoints(ctx, source)
    reader = KinesisShardReader(
        args.stream,
        args.endpoint_url,
        args.region,
        args.max_records_per_shard,
        credentials=Credentials.of_driver(),
        source=source,
    )
    shards = list_shards(reader.client(), args.stream)
    reader.expired = expired_shards(shards, checkpoints)
    tasks = shard_tasks(shards, checkpoints)
    stats = land(
        ctx,
        source,
        tasks,
        reader,
        checkpoints,
        land_seq,
        int(args.lateness_seconds * 1_000_000),
        args.stale_staging_seconds,
    )
    stats["shards_expired"] = sorted(reader.expired)
    write_stats(args.stats_file, stats)
    return stats


if __name__ == "__main__":
    main()
