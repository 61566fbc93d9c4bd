"""Stores on an S3 API server (moto on 127.0.0.1): reads in forked and spawned DataLoader
workers, and failures to reach the server reported in one line naming the setting to fix."""

from __future__ import annotations

import json
import pickle
import urllib.request
from typing import TYPE_CHECKING

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from ticktensor.errors import StoreError
from ticktensor.loaders import WindowDataset
from ticktensor.store import Layout, Location, Store, StoreVersion, migrate, open_store

from .conftest import make_series, write_pack_of, write_series

if TYPE_CHECKING:
    from tests.conftest import S3Bucket

Batches = list[list[torch.Tensor]]


def build_store(bucket: S3Bucket) -> StoreVersion:
    """Two symbols x two sessions of zstd chunks of 64 rows, committed on the server as
    format-1 segments (what ``migrate`` packs)."""
    store = Store.create(
        bucket.url("store"),
        layout=Layout(codec="zstd", chunk_rows=64),
        storage_options=bucket.storage_options,
    )
    records = [
        write_series(store, make_series(symbol, day, rows=300))
        for symbol in ("AAA", "BBB")
        for day in range(2)
    ]
    return store.commit(segments=records, message="object store test")


def build_packed_store(bucket: S3Bucket) -> StoreVersion:
    """The same rows as :func:`build_store`, one pack per session."""
    store = Store.create(
        bucket.url("packed"),
        layout=Layout(codec="zstd", chunk_rows=64),
        storage_options=bucket.storage_options,
    )
    packs = [write_pack_of(store, day, ("AAA", "BBB"), rows=300) for day in range(2)]
    return store.commit(packs=packs, message="object store test")


def read_all(dataset: WindowDataset, **workers: object) -> Batches:
    loader: DataLoader[tuple[torch.Tensor, torch.Tensor]] = DataLoader(
        dataset,
        batch_size=8,
        **workers,  # type: ignore[arg-type]
    )
    return [list(batch) for batch in loader]


def assert_same(got: Batches, expected: Batches) -> None:
    assert len(got) == len(expected)
    for i, (a, b) in enumerate(zip(got, expected, strict=True)):
        for x, y in zip(a, b, strict=True):
            assert torch.equal(x, y), f"batch {i} differs"


def test_version_reads_back_through_open_store(s3_bucket: S3Bucket) -> None:
    written = build_store(s3_bucket)
    opened = open_store(s3_bucket.url("store"), storage_options=s3_bucket.storage_options)
    assert opened.version == written.version == 1
    record = opened.segment("AAA", "2024-01-03")
    expected = make_series("AAA", 1, rows=300)
    data = opened.read_segment(record, verify=True)
    assert (data.values == expected.values).all()
    report = Store.open(s3_bucket.url("store"), storage_options=s3_bucket.storage_options).verify()
    assert report.ok
    assert report.files_checked > 0


def test_a_pack_written_committed_read_and_verified_on_the_server(
    s3_bucket: S3Bucket, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Shards of 4 inner chunks: zarr reads the last, partial shard by byte ranges.
    monkeypatch.setattr("ticktensor.store._packs.SHARD_BYTES", 4 * 64 * 3 * 4)
    options = s3_bucket.storage_options
    store = Store.create(
        s3_bucket.url("packs"), layout=Layout(codec="zstd", chunk_rows=64), storage_options=options
    )
    record = write_pack_of(store, 0, ("AAA", "BBB", "CCC"), rows=300)
    assert store.commit(packs=[record], message="a pack").version == 1
    opened = open_store(s3_bucket.url("packs"), storage_options=options)
    pack = opened.pack("2024-01-02")
    assert pack == record
    assert opened.symbols == ("AAA", "BBB", "CCC")
    data = opened.read_pack(pack, verify=True)
    index = opened.pack_index(pack)
    lo, hi = index.rows_of("BBB")
    np.testing.assert_array_equal(data.values[lo:hi], make_series("BBB", 0, rows=300).values)
    chunks = opened.chunk_map(pack, "values")
    assert len(chunks.chunks) == 15  # 900 rows in chunks of 64
    assert len({c.rel for c in chunks.chunks}) == 4  # in shards of 4 chunks
    report = Store.open(s3_bucket.url("packs"), storage_options=options).verify()
    assert report.files_checked == len(record.files)


def test_segments_migrated_to_packs_on_the_server(s3_bucket: S3Bucket) -> None:
    build_store(s3_bucket)
    store = Store.open(s3_bucket.url("store"), storage_options=s3_bucket.storage_options)
    report = migrate(store)
    assert report.versions == [2]
    assert [(s.session, s.segments) for s in report.sessions] == [
        ("2024-01-02", 2),
        ("2024-01-03", 2),
    ]
    v = store.version()
    assert v.segments == ()
    data = v.read_pack(v.pack("2024-01-03"), verify=True)
    np.testing.assert_array_equal(data.values[:300], make_series("AAA", 1, rows=300).values)
    assert len(store.version(1).segments) == 4
    store.verify()
    store.verify(1)
    assert migrate(store).versions == []


def test_forked_workers_read_a_dataset_built_in_the_parent(s3_bucket: S3Bucket) -> None:
    # Building the dataset reads labels from the server: the parent's S3 client (its event
    # loop and connections) exists before the workers are forked.
    dataset = WindowDataset(build_packed_store(s3_bucket), 16, threads=2)
    expected = read_all(dataset)
    assert len(expected) == -(-len(dataset) // 8)
    forked = read_all(dataset, num_workers=2, multiprocessing_context="fork")
    assert_same(forked, expected)
    assert_same(read_all(dataset), expected)  # the parent still reads after the fork


def test_spawned_workers_read_the_same_batches(s3_bucket: S3Bucket) -> None:
    dataset = WindowDataset(build_packed_store(s3_bucket), 16, threads=1)
    expected = read_all(dataset)
    spawned = read_all(dataset, num_workers=1, multiprocessing_context="spawn")
    assert_same(spawned, expected)


def test_location_pickles_without_its_filesystem(s3_bucket: S3Bucket) -> None:
    location = Location(s3_bucket.url("store"), s3_bucket.storage_options)
    location.write_atomic("probe.txt", b"hello")
    copy = pickle.loads(pickle.dumps(location))
    assert copy == location
    assert "_owned_fs" not in pickle.loads(pickle.dumps(location)).__dict__
    assert copy.read_bytes("probe.txt") == b"hello"


def test_missing_bucket_is_one_error_naming_the_bucket(s3_bucket: S3Bucket) -> None:
    url = f"s3://{s3_bucket.name}-missing/store"
    with pytest.raises(StoreError) as info:
        Store.open(url, storage_options=s3_bucket.storage_options)
    message = str(info.value)
    assert f"bucket '{s3_bucket.name}-missing' does not exist at {s3_bucket.endpoint}" in message
    assert "\n" not in message
    with pytest.raises(StoreError, match="does not exist at"):
        Store.create(url, storage_options=s3_bucket.storage_options)


def test_unreachable_endpoint_names_the_endpoint_setting(
    s3_bucket: S3Bucket, closed_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")  # botocore's retries; s3fs still retries
    options = {"client_kwargs": {"endpoint_url": closed_endpoint}}
    with pytest.raises(StoreError) as info:
        Store.open(s3_bucket.url("store"), storage_options=options)
    message = str(info.value)
    assert message.startswith(f"{s3_bucket.url('store')}: cannot reach the object store at ")
    assert closed_endpoint in message
    assert "AWS_ENDPOINT_URL" in message
    assert '"endpoint_url"' in message
    assert "\n" not in message


def test_a_missing_file_stays_a_missing_file(s3_bucket: S3Bucket) -> None:
    """Only the server's failures are translated: a missing key is still FileNotFoundError."""
    location = Location(s3_bucket.url("store"), s3_bucket.storage_options)
    with pytest.raises(FileNotFoundError) as info:
        location.read_bytes("nothing-here.json")
    assert not isinstance(info.value, StoreError)


def test_refused_credentials_name_the_credential_settings(s3_bucket: S3Bucket) -> None:
    # The server checks signatures against its IAM users from now on (moto's switch),
    # so the test key is refused; the previous setting is restored afterwards.
    previous = _server_auth(s3_bucket.endpoint, "0")
    try:
        with pytest.raises(StoreError) as info:
            Store.open(s3_bucket.url("store"), storage_options=s3_bucket.storage_options)
    finally:
        _server_auth(s3_bucket.endpoint, previous)
    message = str(info.value)
    assert "the object store denied access (" in message
    assert "AWS_ACCESS_KEY_ID" in message
    assert "\n" not in message


def _server_auth(endpoint: str, requests_before_auth: str) -> str:
    """Set how many more requests the server serves unauthenticated; the previous count."""
    request = urllib.request.Request(
        f"{endpoint}/moto-api/reset-auth",
        data=requests_before_auth.encode(),
        headers={"Content-Type": "text/plain"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        answer = json.loads(response.read())
    return str(answer["PREVIOUS_INITIAL_NO_AUTH_ACTION_COUNT"])
