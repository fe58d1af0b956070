"""Land every shard of a Kinesis data stream into the raw Delta table.

Each open shard is read from its checkpoint to the tip in its own Spark task with boto3;
closed parent shards are read to their end before their children start (resharding).
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
JOB_VERSION = "1.1.3"


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
    """

    def __init__(
        self,
        stream: str,
        endpoint_url: str | None,
        region: str,
        max_records: int,
        page_size: int = 1000,
        credentials: Credentials | None = None,
    ) -> None:
        if not 1 <= page_size <= 10_000:
            raise ValueError(f"page_size must be between 1 and 10,000, got {page_size!r}")
        self.stream = stream
        self.endpoint_url = endpoint_url
        self.region = region
        self.max_records = max_records
        self.page_size = page_size
        self.credentials = credentials

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


def shard_tasks(shards: list[dict[str, Any]], checkpoints: dict[str, Any]) -> list[ShardTask]:
    """One task per listed shard; parents no longer listed (expired) do not hold children."""
    listed = {s["ShardId"] for s in shards}
    tasks = []
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
    reader = KinesisShardReader(
        args.stream,
        args.endpoint_url,
        args.region,
        args.max_records_per_shard,
        credentials=Credentials.of_driver(),
    )
    checkpoints, land_seq = load_checkpoints(ctx, source)
    tasks = shard_tasks(list_shards(reader.client(), args.stream), checkpoints)
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
    write_stats(args.stats_file, stats)
    return stats


if __name__ == "__main__":
    main()
