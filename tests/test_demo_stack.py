"""The demo stack's own helpers, where they can go wrong without a broker running."""

from __future__ import annotations

import base64
import uuid
from unittest import mock

from cdc_demo import kafka


def test_a_kafka_cluster_id_never_reads_as_a_command_line_option() -> None:
    # uuid4 bytes whose URL-safe base64 begins with "-" (0xF8 >> 2 == 62), then ordinary ones.
    dashed = uuid.UUID(bytes=b"\xf8" + bytes(15))
    plain = uuid.UUID(bytes=b"\x10" + bytes(15))
    with mock.patch.object(kafka.uuid, "uuid4", side_effect=[dashed, dashed, plain]):
        cluster = kafka._cluster_id()
    assert not cluster.startswith("-")
    assert base64.urlsafe_b64decode(cluster + "==") == plain.bytes
