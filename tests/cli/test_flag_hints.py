"""``ticktensor ingest`` errors name its flags; the Python API's messages keep the keywords."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ticktensor.cli import main
from ticktensor.cli._hints import INGEST_HINTS, in_cli_words
from ticktensor.errors import VersionConflictError
from ticktensor.ingest._job import IngestOptions, ingest
from ticktensor.ingest.readers._base import ReadOptions
from ticktensor.schemas import EventKind
from ticktensor.store import PackRecord, Store

T0 = 1_704_205_800_000_000_000  # 2024-01-02 14:30 UTC


def trades(path: Path, price: float) -> str:
    rows = "".join(f"{T0 + i * 10**9},AAA,{price + i / 100:.2f},10,1\n" for i in range(20))
    path.write_text("ts_event,symbol,price,size,side\n" + rows)
    return str(path)


def cli_ingest(*args: str) -> int:
    return main(["ingest", *args, "--schema", "trades", "--workers", "1", "--quiet"])


def test_a_conflict_tells_the_cli_user_to_pass_replace(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = str(tmp_path / "store")
    assert cli_ingest(trades(tmp_path / "a.csv", 100.0), "--out", out) == 0
    other = trades(tmp_path / "b.csv", 101.0)
    capsys.readouterr()
    assert cli_ingest(other, "--out", out) == 1
    err = capsys.readouterr().err
    assert err.startswith(
        "ticktensor ingest: error: session 2024-01-02 already exists in version 1 with other "
        "content (its trades events and features differ)"
    )
    assert err.rstrip().endswith("; pass --replace to supersede it")
    assert "replace=True" not in err
    assert err.count("\n") == 1
    assert cli_ingest(other, "--out", out, "--replace") == 0  # the flag it named works


def test_the_python_api_still_says_replace_true(tmp_path: Path) -> None:
    out = str(tmp_path / "store")
    options = IngestOptions(format="csv", read=ReadOptions(kind=EventKind.TRADES), workers=1)
    ingest([trades(tmp_path / "a.csv", 100.0)], out, options, progress=False)
    with pytest.raises(VersionConflictError, match=r"; pass replace=True to supersede it$"):
        ingest([trades(tmp_path / "b.csv", 101.0)], out, options, progress=False)


def test_every_hint_matches_what_the_store_says(tmp_path: Path) -> None:
    """Each library phrase the command rewrites is one a real store error holds."""
    store = Store.create(str(tmp_path / "store"))

    def pack(session: str, price: float) -> PackRecord:
        return store.write_pack(
            session=session,
            symbols=["AAA"],
            offsets=[0, 1],
            ts=np.array([T0], np.int64),
            values=np.array([[price]], np.float32),
            feature_names=["x"],
        )

    store.commit(packs=[pack("2024-01-02", 1.0)])
    with pytest.raises(VersionConflictError) as other_content:
        store.commit(packs=[pack("2024-01-02", 2.0)])
    with pytest.raises(VersionConflictError) as stale_base:
        store.commit(packs=[pack("2024-01-03", 1.0)], base_version=0)
    errors = [other_content.value, stale_base.value]  # in the order of INGEST_HINTS
    for (library, cli), error in zip(INGEST_HINTS, errors, strict=True):
        assert library in str(error)
        rewritten = str(in_cli_words(error, INGEST_HINTS))
        assert cli in rewritten
        assert library not in rewritten
        assert rewritten.replace(cli, library) == str(error)  # the rest is left as it was


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--workers", "0"], "argument --workers: expected a positive integer, got '0'"),
        (["--batch-rows", "0"], "argument --batch-rows: expected a positive integer, got '0'"),
        (["--chunk-rows", "0"], "argument --chunk-rows: expected a positive integer, got '0'"),
        (["--chunk-rows", "-5"], "argument --chunk-rows: expected a positive integer, got '-5'"),
    ],
)
def test_bad_flag_values_are_usage_errors_naming_the_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: list[str], message: str
) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["ingest", trades(tmp_path / "a.csv", 100.0), "--out", str(tmp_path / "s"), *flags])
    assert exit_.value.code == 2
    assert f"ticktensor ingest: error: {message}" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("flags", "message", "python_name"),
    [
        (
            ["--start", "2024-01-03", "--end", "2024-01-02"],
            "--start 2024-01-03 must be before --end 2024-01-02 (the day after the last)",
            "ts_range",
        ),
        (["--interval", "0"], "--interval: duration '0' is not a positive integer", "interval_ns"),
    ],
)
def test_bad_ranges_and_durations_name_the_flags(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    flags: list[str],
    message: str,
    python_name: str,
) -> None:
    assert cli_ingest(trades(tmp_path / "a.csv", 100.0), "--out", str(tmp_path / "s"), *flags) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"ticktensor ingest: error: {message}")
    assert python_name not in err
    assert not (tmp_path / "s").exists()


def test_a_run_that_stores_nothing_fails_naming_the_top_reasons(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "us-dates.csv"  # MM/DD/YYYY: no layout recognised, every row bad
    rows = "".join(f"01/{2 + i:02d}/2024 10:00,AAA,10.5,{i + 1}\n" for i in range(5))
    path.write_text("timestamp,symbol,price,size\n" + rows)
    out = str(tmp_path / "store")
    assert cli_ingest(str(path), "--out", out) == 1
    captured = capsys.readouterr()
    assert "5 read" in captured.err
    assert "nothing stored" in captured.err
    assert "unparseable 5" in captured.err
    assert "column 'timestamp' value '01/02/2024 10:00'" in captured.err  # an example
    assert "--ts-format" in captured.err  # and the flag that reads such times
    assert "--allow-all-quarantined" in captured.err
    # The counts were still printed, and the flag accepts the outcome.
    assert "quarantine rules: unparseable 5" in captured.out
    assert cli_ingest(str(path), "--out", out, "--allow-all-quarantined") == 0
    # A run that stored rows exits 0 though some were quarantined.
    good = tmp_path / "good.csv"
    good.write_text("timestamp,symbol,price,size\n2024-01-02 10:00,AAA,10.5,1\n" + rows)
    assert cli_ingest(str(good), "--out", str(tmp_path / "other")) == 0


def test_a_pipe_delimited_headerless_kline_file_names_both_flags(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "btc-klines.csv"
    t0 = 1_704_067_200_000
    lines = [
        f"{t0 + i * 60_000}|42000|42010|41990|42005|1.5|{t0 + i * 60_000 + 59_999}|63000|12|0.7|"
        "29400|0"
        for i in range(3)
    ]
    path.write_text("\n".join(lines) + "\n")
    args = ["ingest", str(path), "--out", str(tmp_path / "store"), "--workers", "1", "--quiet"]
    assert main(args) == 1
    err = capsys.readouterr().err
    assert "--delimiter '|' --no-header" in err
    assert "pass --schema" not in err.split("--no-header")[0]  # the fix comes first
