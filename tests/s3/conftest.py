"""An S3-compatible server (S3Proxy) for the object-storage tests, and the environment under
which every AWS client of the test process reaches it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from cdc_demo.s3 import S3Server, s3_server


@pytest.fixture(scope="module")
def s3() -> Iterator[S3Server]:
    """A running server for the module; a server that cannot start fails the tests."""
    with s3_server() as server:
        yield server


@pytest.fixture
def s3_env(s3: S3Server, monkeypatch: pytest.MonkeyPatch) -> Iterator[S3Server]:
    """``s3``'s settings and credentials in this process's environment (botocore and s3fs
    read them), for the test only."""
    from s3fs import S3FileSystem

    for name, value in s3.environment().items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    # fsspec reuses a file system made with the same arguments, whatever the environment was.
    S3FileSystem.clear_instance_cache()
    yield s3
    S3FileSystem.clear_instance_cache()
