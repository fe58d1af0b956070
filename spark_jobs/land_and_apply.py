"""Land a source, then apply its batch, in one Spark application.

The landing job that ``--land-job`` names runs first, with its own arguments
(``--land-args``, a JSON list), landing ``--source``. Once that landing leaves the source's
resolved timestamp at or past ``--resolved-target`` (the data interval's end: what
``ResolvedTimestampSensor`` waits for), ``apply_changes`` runs with ``--apply-args`` (a JSON
list). Each step is the job it names, at its own version, with its own commits; this job
only runs them in one JVM, so a batch pays one spark-submit, one JVM start and one Delta
start-up instead of two.

A landing that leaves the resolved timestamp short of the target ends the run without
applying, and says so (``waiting``): the operator lands again later, as the sensor would
poll. What was landed stays landed, and the next run's landing carries on from it.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any

from spark_jobs import apply_changes, land_files, land_kafka, land_kinesis
from spark_jobs.arguments import base_parser, instant, source_name
from spark_jobs.cut import batch_resolved
from spark_jobs.runs import start, write_stats

JOB_NAME = "land_and_apply"
JOB_VERSION = "1.0.2"

LANDINGS: dict[str, Callable[[list[str]], dict[str, Any]]] = {
    "land_kinesis": land_kinesis.main,
    "land_kafka": land_kafka.main,
    "land_files": land_files.main,
}


def arguments(text: str) -> list[str]:
    """A step's own arguments: a JSON list of strings."""
    try:
        found = json.loads(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(f"expected a JSON list of strings: {err}") from err
    if not isinstance(found, list) or not all(isinstance(a, str) for a in found):
        raise argparse.ArgumentTypeError(f"expected a JSON list of strings, got {text!r}")
    return found


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = base_parser(__doc__)
    parser.add_argument("--source", required=True, type=source_name, help="the source")
    parser.add_argument("--land-job", required=True, choices=sorted(LANDINGS))
    parser.add_argument("--land-args", required=True, type=arguments)
    parser.add_argument("--apply-args", required=True, type=arguments)
    parser.add_argument(
        "--resolved-target",
        required=True,
        type=instant,
        help="apply once the source's resolved timestamp is at or past this time (ISO 8601)",
    )
    args = parser.parse_args(argv)
    ctx = start(JOB_NAME, JOB_VERSION, args)
    # Each step reports through this run's counts, not a file of its own. An option and its
    # value are one argument: a step would take a value starting with "-" for an option.
    common = [
        f"--warehouse={args.warehouse}",
        f"--batch-id={args.batch_id}",
        f"--run-id={args.run_id}",
    ]
    source = args.source
    landed = LANDINGS[args.land_job]([*common, *args.land_args, f"--source={source}"])
    resolved = batch_resolved(ctx, source)
    gate = {
        "resolved_ts": None if resolved is None else resolved.isoformat(),
        "resolved_target": args.resolved_target.isoformat(),
    }
    if resolved is None or resolved < args.resolved_target:
        stats = {
            "job": JOB_NAME,
            "source": source,
            "batch_id": args.batch_id,
            "land": landed,
            **gate,
            "waiting": f"the resolved timestamp of {source} is {gate['resolved_ts']}, short of"
            f" {gate['resolved_target']}: landed, not applied yet",
        }
    else:
        applied = apply_changes.main([*common, *args.apply_args, f"--source={source}"])
        stats = {**applied, "job": JOB_NAME, "land": landed, **gate}
    write_stats(args.stats_file, stats)
    return stats


if __name__ == "__main__":
    main()
