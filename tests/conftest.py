"""Fixtures for every test package: a real S3 API server (moto) on 127.0.0.1."""

from __future__ import annotations

import logging
import socket
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

# What could point a test's S3 client somewhere else than the server started here.
_AWS_SETTINGS = (
    "AWS_PROFILE",
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_S3",
    "AWS_SESSION_TOKEN",
    "AWS_MAX_ATTEMPTS",
    "AWS_RETRY_MODE",
)


@dataclass(frozen=True)
class S3Bucket:
    """An empty bucket on the test server; credentials are in the environment."""

    endpoint: str
    name: str

    def url(self, key: str) -> str:
        """``s3://`` URL of ``key`` in this bucket."""
        return f"s3://{self.name}/{key}"

    @property
    def storage_options(self) -> dict[str, Any]:
        """fsspec options that reach the server without ``AWS_ENDPOINT_URL``."""
        return {"client_kwargs": {"endpoint_url": self.endpoint}}


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[str]:
    """URL of a moto S3 server thread, started once per session on a free port."""
    from moto.server import ThreadedMotoServer

    requests = logging.getLogger("werkzeug")
    level = requests.level
    requests.setLevel(logging.WARNING)  # one log line per request otherwise
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()
        requests.setLevel(level)


@pytest.fixture
def s3_bucket(s3_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> S3Bucket:
    """A fresh bucket, with the test credentials in the environment.

    fsspec caches a filesystem per set of options for the life of the process, and an
    S3 client reads the environment once: a test that changes the endpoint or the
    credentials in the environment runs its client in a new process.
    """
    import boto3

    for name in _AWS_SETTINGS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")  # no instance-metadata lookups
    name = f"tt-{uuid.uuid4().hex[:12]}"
    boto3.client("s3", endpoint_url=s3_endpoint).create_bucket(Bucket=name)
    return S3Bucket(s3_endpoint, name)


@pytest.fixture
def closed_endpoint() -> str:
    """An ``http://127.0.0.1:PORT`` URL where nothing listens."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}"
